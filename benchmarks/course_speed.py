"""Print the headless series time and the strict-nbval time as ratios to the seed script's time.

Goals (issue: the notebook series): headless series <= 6x the seed script, strict nbval <= 8x.
All three are measured in this one run, each as wall-clock time of a fresh command, best of
--repeats.

    python benchmarks/course_speed.py [--seed ../shared/seed/distributed-03.py]
        [--repeats 3] [--jobs 2]
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seed", default=str(ROOT.parent / "shared" / "seed" / "distributed-03.py")
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    if not Path(args.seed).is_file():
        sys.exit(f"seed script not found at {args.seed}; pass --seed PATH")
    with tempfile.TemporaryDirectory() as out:
        commands = {
            "seed script": [sys.executable, args.seed],
            "course run (headless series)": [
                sys.executable,
                "-m",
                "course_utils.tools.cli",
                "run",
                "--out",
                out,
                "--jobs",
                str(args.jobs),
            ],
            "strict nbval (pytest notebooks)": [sys.executable, "-m", "pytest", "-q", "notebooks"],
        }
        best = {name: min(wall(cmd) for _ in range(args.repeats)) for name, cmd in commands.items()}
    seed = best["seed script"]
    goals = {"course run (headless series)": 6, "strict nbval (pytest notebooks)": 8}
    print(f"best of {args.repeats} runs, {args.jobs} notebooks at a time")
    for name, seconds in best.items():
        ratio = seconds / seed
        goal = (
            f"  (goal <= {goals[name]}x: {'met' if ratio <= goals[name] else 'NOT met'})"
            if name in goals
            else ""
        )
        print(f"{name:34s} {seconds:6.2f} s  {ratio:5.1f}x the seed{goal}")


if __name__ == "__main__":
    main()
