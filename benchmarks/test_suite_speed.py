"""Print the README's test command's time against one strict nbval pass of the series.

Goal (issue 10): the whole suite (`pytest`, as the README runs it) takes at most 6x one strict
nbval pass of the notebooks (`pytest -n 0 notebooks`: one process, one notebook after another).
Both are measured in this one run, each as the wall-clock time of a fresh command, on an
otherwise idle machine.

    python benchmarks/test_suite_speed.py [--skip-browser]
"""

import argparse
import sys

from wallclock import wall

GOAL = 6.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--skip-browser", action="store_true", help="leave out the JupyterLab-in-Chromium test"
    )
    args = parser.parse_args()
    suite = [sys.executable, "-m", "pytest", "-q"] + (
        ["-m", "not browser"] if args.skip_browser else []
    )
    nbval = [sys.executable, "-m", "pytest", "-q", "-n", "0", "notebooks"]
    seconds = {"strict nbval (pytest notebooks)": wall(nbval), "test suite (pytest)": wall(suite)}
    ratio = seconds["test suite (pytest)"] / seconds["strict nbval (pytest notebooks)"]
    for name, s in seconds.items():
        print(f"{name:34s} {s:7.1f} s")
    verdict = "met" if ratio <= GOAL else "NOT met"
    print(f"suite / nbval: {ratio:.1f}x (goal <= {GOAL:g}x: {verdict})")


if __name__ == "__main__":
    main()
