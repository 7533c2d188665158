"""Convert a ``diloco.json`` of the records before the one curve record (``LrRun``,
``SweepCurve``) to ``HeldoutCurve`` records (``course_utils.results.curves``), every number
kept; ``training.json`` and ``streaming.json`` already hold ``HeldoutCurve``'s fields.

    python scripts/convert_curves.py                 # course_utils/saved/diloco.json in place
    python scripts/convert_curves.py OLD.json --out NEW.json

A protocol run (``LrRun``: lr, seed, heldout_loss, train_loss) becomes the baseline's curve at
the plan's batch size with its ``lr``; a sweep curve (``SweepCurve``: strategy, local_steps,
skewed, seed, heldout_loss, train_loss) the same fields at the plan's batch size. A file that
is already converted is left as it is.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from course_utils.results.records import from_json, save, saved_path


def converted(data: dict) -> dict:
    """``diloco.json``'s dicts with every run a ``HeldoutCurve``'s."""
    from course_utils.results.diloco import DP

    batch = data["plan"]["batch_size"]
    lr_runs = [{"strategy": DP, "batch_size": batch, "heldout_loss": r["heldout_loss"],
                "seed": r["seed"], "lr": r["lr"], "train_loss": r["train_loss"]}
               for r in data["lr_runs"]]
    curves = [{"strategy": c["strategy"], "batch_size": batch,
               "heldout_loss": c["heldout_loss"], "seed": c["seed"],
               "local_steps": c["local_steps"], "skewed": c["skewed"],
               "train_loss": c["train_loss"]} for c in data["curves"]]
    return {**data, "lr_runs": lr_runs, "curves": curves}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", default=str(saved_path("diloco.json")))
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    from course_utils.results.diloco import DilocoResults

    data = json.loads(Path(args.path).read_text())
    if all("batch_size" in c for c in data["curves"] + data["lr_runs"]):
        print(f"convert_curves: {args.path} holds HeldoutCurve records already")
        return 0
    try:
        results = from_json(DilocoResults, converted(data), args.path)
    except (KeyError, ValueError) as exc:
        print(f"convert_curves: {args.path}: {exc}", file=sys.stderr)
        return 2
    save(results, args.out or args.path)
    print(f"convert_curves: wrote {args.out or args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
