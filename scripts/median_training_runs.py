"""Print one ``training.json`` whose times are the medians over several runs of one plan
(``course_utils.results.training.median_of_runs``): how the saved run is made.

    python scripts/median_training_runs.py build/training-*/training.json > training.json
"""

from __future__ import annotations

import sys

from course_utils.results.records import dumps, load
from course_utils.results.training import TrainingResults, median_of_runs


def main(paths: list[str]) -> int:
    try:
        runs = [load(TrainingResults, p) for p in paths]
        print(dumps(median_of_runs(runs)))
    except (OSError, ValueError) as exc:
        print(f"median_training_runs: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
