"""Print the README's test command's time against one strict nbval pass of the series.

Goal (issues 26 and 41): the suite (`pytest`, as the README runs it: the end-to-end tests, which
CI runs as a step of their own with `pytest -m e2e`, left out) takes at most 2x one strict nbval
pass of the notebooks on one worker (`pytest -n 0 notebooks`: one process, one notebook after
another, the serial cost of running every notebook once), and at most 4 minutes on 2 cores.
Each command runs --runs times (default 3), the two interleaved so a change in the machine's load
hits both alike; the script prints every run, the median and the spread (min-max) of each, the
ratio of the medians and the suite's median against 4 minutes.

With --busy N, N CPU-bound processes (`python -c "while True: pass"`) run beside every command
(the second goal: the suite passes 3 runs of 3 with two of them); a failed run is counted, not
fatal, and its last lines are printed.

    python benchmarks/test_suite_speed.py [--runs 3] [--busy 2]
"""

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOAL, GOAL_S = 2.0, 240.0  # the suite against one strict nbval pass; the suite's seconds
BUSY = [sys.executable, "-c", "while True: pass"]


def timed(cmd: list[str]) -> tuple[float, bool, str]:
    """Seconds ``cmd`` took in the repository, whether it passed, and its output's last lines."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
    return seconds, done.returncode == 0, tail


def summary(times: list[float]) -> str:
    """Median and spread of a list of seconds, as one column of text."""
    return f"median {statistics.median(times):7.1f} s  (min {min(times):.1f}, max {max(times):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs of each command (default: 3)")
    parser.add_argument("--busy", type=int, default=0,
                        help="CPU-bound processes to run beside each command (default: 0)")
    args = parser.parse_args()
    nbval, suite = "strict nbval (pytest -n 0 notebooks)", "test suite (pytest)"
    commands = {
        nbval: [
            sys.executable, "-m", "pytest", "-q", "-n", "0", "notebooks"
        ],
        suite: [sys.executable, "-m", "pytest", "-q"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    passes: dict[str, int] = {name: 0 for name in commands}
    busy = [subprocess.Popen(BUSY) for _ in range(args.busy)]
    try:
        for run in range(1, args.runs + 1):
            for name, cmd in commands.items():
                seconds, ok, tail = timed(cmd)
                times[name].append(seconds)
                passes[name] += ok
                print(f"run {run}: {name:38s} {seconds:7.1f} s  {'passed' if ok else 'FAILED'}",
                      flush=True)
                if not ok:
                    print("    " + tail.replace("\n", "\n    "), flush=True)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    print(f"\n{args.runs} runs each, {args.busy} busy process(es) beside:")
    for name in commands:
        print(f"{name:38s} {summary(times[name])}  passed {passes[name]} of {args.runs}")
    ratio = statistics.median(times[suite]) / statistics.median(times[nbval])
    verdict = "met" if ratio <= GOAL else "NOT met"
    ratios = [s / n for s, n in zip(times[suite], times[nbval])]  # run by run: the spread
    print(f"suite / nbval (medians): {ratio:.2f}x (goal <= {GOAL:g}x: {verdict}); run by run "
          f"{min(ratios):.2f}-{max(ratios):.2f}x")
    seconds = statistics.median(times[suite])
    verdict = "met" if seconds <= GOAL_S else "NOT met"
    print(f"suite (median): {seconds:.0f} s (goal <= {GOAL_S:.0f} s: {verdict})")


if __name__ == "__main__":
    main()
