"""Print one ``training.json`` whose times are the medians over several runs of one plan
(``course_utils.results.training.median_of_runs``): how the saved run is made.

    python scripts/median_training_runs.py build/training-*/training.json > training.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from course_utils.results.records import from_json, to_json
from course_utils.results.training import TrainingResults, median_of_runs


def main(paths: list[str]) -> int:
    try:
        runs = [from_json(TrainingResults, json.loads(Path(p).read_text()), p) for p in paths]
        print(json.dumps(to_json(median_of_runs(runs)), indent=1))
    except (OSError, ValueError) as exc:
        print(f"median_training_runs: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
