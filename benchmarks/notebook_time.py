"""Print each step's run time against a minimal notebook's (issue 27: at most 4x).

A minimal notebook is what every step pays anyway: a fresh kernel, the parameters cell, the device
setup (`import jax`, `use_cpu_devices`) and one print. Each notebook, and the minimal one, runs top
to bottom in a fresh kernel with JAX's compilation cache off; the figure is the median of
--repeats runs, with the spread (max - min) of those runs. The runs interleave the minimal notebook
with the steps, so a busy spell slows both.

    python benchmarks/notebook_time.py [--repeats 3] [notebooks/05_timing.ipynb ...]
"""

import argparse
import os
import statistics
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from wallclock import ROOT

BOUND = 4.0


def minimal_notebook() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell("N_DEVICES = 4", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell("import jax\n\nfrom course_utils import use_cpu_devices\n\n"
                                  "use_cpu_devices(N_DEVICES)"),
        nbformat.v4.new_code_cell('print("PASS", jax.device_count())'),
    ]
    return nb


def run_seconds(nb: nbformat.NotebookNode, folder: Path) -> float:
    """Wall-clock seconds of one top-to-bottom run in a fresh kernel started in ``folder``."""
    client = NotebookClient(nb, kernel_name="python3", timeout=600,
                            resources={"metadata": {"path": str(folder)}})
    start = time.perf_counter()
    client.execute()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("notebooks", nargs="*", type=Path)
    args = parser.parse_args()
    os.environ["COURSE_COMPILATION_CACHE"] = "off"  # the kernels inherit it
    paths = args.notebooks or sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    folder = ROOT / "notebooks"
    run_seconds(minimal_notebook(), folder)  # warm-up: files in the page cache, untimed
    floor = []
    times = {path: [] for path in paths}
    for _ in range(args.repeats):
        for path in paths:
            times[path].append(run_seconds(nbformat.read(path, as_version=4), folder))
        floor.append(run_seconds(minimal_notebook(), folder))
    base = statistics.median(floor)
    print(f"minimal notebook: median {base:.1f} s (spread {max(floor) - min(floor):.1f} s, "
          f"{len(floor)} runs); bound {BOUND:.0f}x = {BOUND * base:.1f} s")
    for path, seconds in times.items():
        median = statistics.median(seconds)
        spread = max(seconds) - min(seconds)
        print(f"{path.stem:34s} median {median:5.1f} s (spread {spread:4.1f} s)"
              f" = {median / base:4.1f}x the minimal notebook")


if __name__ == "__main__":
    main()
