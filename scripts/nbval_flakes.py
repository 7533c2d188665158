"""Run the strict nbval check of the notebooks N times in a row and print how many runs failed.

    python scripts/nbval_flakes.py [--runs 10]

Every run is a fresh `pytest notebooks` (fresh kernels). The goal is 0 failures in 10 runs; a
failing run's first differing cell is printed so the source of nondeterminism can be found.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    failures = 0
    for run in range(1, args.runs + 1):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "notebooks"],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        status = "ok" if done.returncode == 0 else "FAILED"
        print(
            f"run {run:2d}/{args.runs}: {status} in {time.perf_counter() - start:.1f} s", flush=True
        )
        if done.returncode:
            failures += 1
            print(
                "\n".join(
                    line
                    for line in done.stdout.splitlines()
                    if "FAILED" in line or line.startswith("  -")
                )
            )
    print(f"{failures} failures in {args.runs} runs of strict nbval")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
