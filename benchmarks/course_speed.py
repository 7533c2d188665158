"""Print the series' speed against a floor: as many minimal notebooks, run the same way.

Goal (issue 12): `course run` takes at most 1.3x the time of as many minimal notebooks run with
`course run`, and strict nbval (`pytest notebooks`) at most 1.3x its own floor, both measured in
this one run. A minimal notebook is what every step pays anyway: a fresh kernel, the parameters
cell, the device setup (`import jax`, `use_cpu_devices`) and one print. Each figure is the best of
--repeats wall-clock times of a fresh command.

Both are measured twice: with JAX's persistent compilation cache off (every program compiled, as on
a first run) and with a warm cache (a rerun: `use_cpu_devices` turns the cache on, see
`course_utils/devices/compile_cache.py`). The warm cache lives in a folder of its own under
build/, filled
by one untimed run of each command first.

    python benchmarks/course_speed.py [--repeats 3] [--jobs 2]
"""

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
from wallclock import ROOT, wall

FLOOR = ROOT / "build" / "speed-floor"  # inside the repository, so its pytest settings apply
CACHE = ROOT / "build" / "speed-cache"
GOAL = 1.3
MODES = {
    "cache off": {"COURSE_COMPILATION_CACHE": "off"},
    "cache warm": {"XDG_CACHE_HOME": str(CACHE)},
}


def minimal_notebooks(count: int) -> Path:
    """Write ``count`` minimal step notebooks (stored outputs come from one run)."""
    shutil.rmtree(FLOOR, ignore_errors=True)
    FLOOR.mkdir(parents=True)
    for i in range(1, count + 1):
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
        nb.cells = [
            nbformat.v4.new_markdown_cell(f"# Step {i} — minimal"),
            nbformat.v4.new_code_cell("N_DEVICES = 4", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell("import jax\n\nfrom course_utils import use_cpu_devices\n\n"
                                      "use_cpu_devices(N_DEVICES)"),
            nbformat.v4.new_code_cell(f'print("PASS: step {i}", jax.device_count())'),
        ]
        nbformat.write(nb, FLOOR / f"{i:02d}_minimal.ipynb")
    course = [sys.executable, "-m", "course_utils.tools.cli", "run", "--folder", str(FLOOR),
              "--in-place"]
    subprocess.run(course, cwd=ROOT, check=True, capture_output=True)
    return FLOOR


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    series = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    floor = minimal_notebooks(len(series))
    out = ROOT / "build" / "speed-run"
    run = [sys.executable, "-m", "course_utils.tools.cli", "run", "--jobs", str(args.jobs),
           "--out", str(out)]
    nbval = [sys.executable, "-m", "pytest", "-q"]
    pairs = {
        "course run": (run + ["--folder", "notebooks"], run + ["--folder", str(floor)]),
        "strict nbval": (nbval + ["notebooks"], nbval + [str(floor)]),
    }
    print(f"{len(series)} notebooks; best of {args.repeats} runs; {args.jobs} notebooks at a time")
    shutil.rmtree(CACHE, ignore_errors=True)
    for mode, env in MODES.items():
        for name, (command, minimal) in pairs.items():
            if mode == "cache warm":  # fill the cache, untimed
                wall(command, env)
                wall(minimal, env)
            seconds = min(wall(command, env) for _ in range(args.repeats))
            base = min(wall(minimal, env) for _ in range(args.repeats))
            ratio = seconds / base
            verdict = "met" if ratio <= GOAL else "NOT met"
            print(f"{mode:10s} {name:13s} series {seconds:6.1f} s, {len(series)} minimal notebooks "
                  f"{base:6.1f} s: {ratio:4.2f}x (goal <= {GOAL}x: {verdict})")


if __name__ == "__main__":
    main()
