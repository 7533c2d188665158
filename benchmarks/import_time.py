"""Print how long `import course_utils` takes beyond JAX's own import (goal: < 0.5 s).

Each measurement runs in a fresh interpreter: first `import jax, numpy`, then `import course_utils`.
"""

import statistics
import subprocess
import sys

CODE = (
    "import time; t0 = time.perf_counter(); import jax, numpy; t1 = time.perf_counter(); "
    "import course_utils; t2 = time.perf_counter(); print(t1 - t0, t2 - t1)"
)


def main(repeats: int = 5) -> None:
    jax_s, extra_s = [], []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", CODE], capture_output=True, text=True, check=True
        ).stdout.split()
        jax_s.append(float(out[0]))
        extra_s.append(float(out[1]))
    print(
        f"import jax+numpy: median {statistics.median(jax_s):.3f} s "
        f"over {repeats} fresh interpreters"
    )
    print(
        f"import course_utils beyond that: median {statistics.median(extra_s):.3f} s "
        f"(max {max(extra_s):.3f} s; goal < 0.5 s)"
    )


if __name__ == "__main__":
    main()
