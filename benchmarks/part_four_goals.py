"""Part four's goals read off a ``course cluster --measure training`` run (issue 30): the step
model against data parallelism's measured step, time to a target held-out loss at each link rate,
and whether the models call each compression scheme right. Prints figures; asserts nothing.

    python benchmarks/part_four_goals.py build/training/training.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from course_utils.results.records import from_json
from course_utils.results.training import (
    TrainingResults,
    modelled_step_s,
    steps_to,
)
from course_utils.training.part_four import COMPRESSED


def main(path: str) -> None:
    results = from_json(TrainingResults, json.loads(Path(path).read_text()), path)
    m = results.meta
    hosts, devices = m.hosts, m.devices_per_host
    rates = list(dict.fromkeys(r.link_rate for r in results.rows))
    sizes = sorted({r.batch_size for r in results.rows})
    print(f"{hosts} hosts × {devices} devices, plan {m.plan}, jax {m.jax}, {m.cores} cores, "
          f"{m.seconds / 60:.1f} min; step times are medians of the plan's repeats")

    print("\n1. data parallelism: measured step against compute + link model (α = 0)")
    print(f"{'rate':>8s} {'batch':>6s} {'step ms':>8s} {'model ms':>9s} {'error':>7s}  link limits")
    within = []
    for row in (r for r in results.rows if r.strategy == "data_parallel"):
        model = modelled_step_s(row, hosts, devices)
        error = model / row.step_s - 1
        limits = row.communication_s > row.compute_s
        if limits:
            within.append((row.link_rate, row.batch_size, abs(error) <= 0.15))
        print(f"{row.link_rate:>8s} {row.batch_size:6d} {row.step_s * 1e3:8.1f} "
              f"{model * 1e3:9.1f} {error:+7.1%}  {'yes' if limits else 'no'}")
    good = [(r, b) for r, b, ok in within if ok]
    print(f"within 15 % where the link limits: {len(good)} of {len(within)} "
          f"({len({b for _, b in good})} batch sizes × {len({r for r, _ in good})} rates)")

    for b in sizes:
        curves = {c.strategy: c for c in results.curves if c.batch_size == b}
        if "data_parallel" not in curves:
            continue
        dp_curve = curves["data_parallel"]
        target = statistics.median(loss for _, loss in dp_curve.heldout_loss[-5:]) * 1.02
        print(f"\n2–3. batch {b}: target held-out loss {target:.4f} (DP's last 5 points' "
              "median + 2 %); time to it, measured (model)")
        steps = {s: steps_to(c, target) for s, c in curves.items()}
        print("steps to it: " + ", ".join(f"{s} {n}" for s, n in steps.items()))
        for rate in rates:
            rows = {r.strategy: r for r in results.rows
                    if r.link_rate == rate and r.batch_size == b}
            if "data_parallel" not in rows or steps["data_parallel"] is None:
                continue
            dp = steps["data_parallel"] * rows["data_parallel"].step_s
            dp_model = steps["data_parallel"] * modelled_step_s(rows["data_parallel"], hosts,
                                                                devices)
            cells, calls = [], []
            for s in COMPRESSED:
                if s not in rows or steps.get(s) is None:
                    cells.append(f"{s} never" if s in rows else f"{s} —")
                    continue
                t = steps[s] * rows[s].step_s
                t_model = steps[s] * modelled_step_s(rows[s], hosts, devices)
                right = (t < dp) == (t_model < dp_model)
                calls.append(right)
                cells.append(f"{s} {t:.1f} s ({t_model:.1f}){'' if right else ' WRONG CALL'}")
            best = min((steps[s] * rows[s].step_s for s in COMPRESSED
                        if s in rows and steps.get(s)), default=None)
            gain = f"; DP / best compressed {dp / best:.2f}×" if best else ""
            print(f"  {rate:>8s}: DP {dp:.1f} s ({dp_model:.1f}); " + ", ".join(cells) + gain
                  + f"; model's call right for {sum(calls)} of {len(calls)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "build/training/training.json")
