"""Re-train the held-out curves of a ``training.json`` from several seeds, in this process, without
the cluster (the curves do not depend on the link); the timed rows stay as they are, and the
file's ``curves_meta`` records this command, its version, commit and time.

    python scripts/retrain_curves.py course_utils/saved/training.json --seeds 3
    python scripts/retrain_curves.py training.json --seeds 3 --batch-sizes 128 --steps 512=200

Each curve of the file (row, batch size, its steps and its evaluation interval) is trained from
seeds 0 … N − 1 on the cluster's hosts × devices as logical CPU devices, on the stream task
(``tools.cluster.training.train_curves``); every curve asked for is trained again.
``--batch-sizes`` re-trains only those batch sizes (the others keep their curves);
``--steps B=S`` trains batch size B's curves for S steps; ``--strategies`` only those rows.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace

from course_utils.results.meta import this_run
from course_utils.results.records import load, save
from course_utils.results.training import TrainingResults
from course_utils.tools.cluster.training import train_curves


def _steps(text: str) -> tuple[int, int]:
    batch, _, steps = text.partition("=")
    if not (batch.isdigit() and steps.isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r}: give BATCH=STEPS, e.g. 512=200")
    return int(batch), int(steps)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch-sizes", type=lambda s: {int(b) for b in s.split(",")})
    parser.add_argument("--strategies", type=lambda s: set(s.split(",")))
    parser.add_argument("--steps", type=_steps, action="append", default=[])
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error(f"--seeds must be at least 1, got {args.seeds}")
    try:
        results = load(TrainingResults, args.path)
    except ValueError as exc:
        print(f"retrain_curves: {exc}", file=sys.stderr)
        return 2
    steps = dict(args.steps)
    plan = {}  # (row, batch size) → (steps, every), in the file's order
    for c in results.curves:
        key = (c.strategy, c.batch_size)
        if (args.batch_sizes is None or c.batch_size in args.batch_sizes) and (
                args.strategies is None or c.strategy in args.strategies):
            plan.setdefault(key, (steps.get(c.batch_size, c.heldout_loss[-1][0]),
                                  c.heldout_loss[0][0]))
    if not plan:
        print("retrain_curves: no curve of the file matches --batch-sizes / --strategies",
              file=sys.stderr)
        return 2
    start = time.perf_counter()
    trained = train_curves([(*key, *plan[key]) for key in plan],
                           results.cluster.hosts * results.cluster.devices_per_host,
                           seeds=range(args.seeds))
    new = {(c.strategy, c.batch_size): [] for c in trained}
    for c in trained:
        new[c.strategy, c.batch_size].append(c)
    curves, done = [], set()
    for c in results.curves:  # the file's order; a re-trained key's seeds in its place
        key = (c.strategy, c.batch_size)
        if key not in new:
            curves.append(c)
        elif key not in done:
            curves.extend(new[key])
            done.add(key)
    seconds = time.perf_counter() - start
    save(replace(results, curves=tuple(curves),
                 curves_meta=this_run("python scripts/retrain_curves.py", seconds)), args.path)
    print(f"retrain_curves: {len(plan)} curves × {args.seeds} seeds in "
          f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
