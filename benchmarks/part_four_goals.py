"""Part four's goals read off ``course cluster --measure training`` runs (issue 30): the step
model against data parallelism's measured step, time to a target held-out loss at each link rate,
and whether the models call each compression scheme right. Prints figures; asserts nothing.

    python benchmarks/part_four_goals.py build/training/training.json [more runs ...]

With several runs of the same plan, every time (step, compute, own work) is the median over the
runs, and data parallelism's step is printed with its spread (the runs' lowest and highest).
"""

from __future__ import annotations

import sys

from course_utils.results.cluster import per_message_s, saved_cluster_results
from course_utils.results.records import load
from course_utils.results.training import (
    TrainingResults,
    mean_steps,
    median_compute_s,
    median_of_runs,
    modelled_step_s,
    own_work_s,
    steps_by_seed,
    target_loss,
)
from course_utils.training.part_four import COMPRESSED
from course_utils.training.strategies import DATA_PARALLEL


def main(paths: list[str]) -> None:
    runs = [load(TrainingResults, p) for p in paths]
    results = median_of_runs(runs) if len(runs) > 1 else runs[0]
    m, machine, setup = results.meta, results.meta.machine, results.cluster
    hosts, devices = setup.hosts, setup.devices_per_host
    try:  # α by rate from the saved collectives run of the same shape (step 17), else 0
        alpha = per_message_s(saved_cluster_results(f"{hosts}x{devices}"),
                              2 * (hosts * devices - 1))
    except (OSError, ValueError):
        alpha = {}
    rates = list(dict.fromkeys(r.link_rate for r in results.rows))
    sizes = sorted({r.batch_size for r in results.rows})
    minutes = ", ".join(f"{r.meta.seconds / 60:.1f}" for r in runs)
    made = (f"the medians of {m.runs} runs, {m.seconds / 60:.1f} min in all" if m.runs > 1 and
            len(runs) == 1 else f"{len(runs)} run(s) of {minutes} min")
    print(f"{hosts} hosts × {devices} devices, plan {setup.plan}, jax {machine.jax}, "
          f"{machine.cores} cores, {made}; each time the median of the plan's repeats"
          + (", then the median over the runs" if m.runs > 1 else ""))

    if results.own_work:
        own = ", ".join(f"{s} {own_work_s(results, s) * 1e3:.0f} ms" for s in COMPRESSED)
        print(f"each scheme's own work per step (its step minus DP's in one process): {own}")
    print(f"one device's rate while all compute: {results.flops_per_s / 1e9:.1f} GFLOP/s")
    print("\n1. data parallelism: measured step against compute + α + link model")
    print(f"{'rate':>8s} {'batch':>6s} {'step ms':>8s} {'model ms':>9s} {'error':>7s}  "
          "link limits (link time > compute)")
    within = []
    for row in (r for r in results.rows if r.strategy == DATA_PARALLEL):
        compute = median_compute_s(results, row.strategy, row.batch_size)
        model = modelled_step_s(row, hosts, devices, alpha_s=alpha.get(row.link_rate, 0.0),
                                compute_s=compute)
        error = model / row.step_s - 1
        limits = modelled_step_s(row, hosts, devices, compute_s=0.0) > compute  # the link
        if limits:
            within.append((row.link_rate, row.batch_size, abs(error) <= 0.15))
        spread = [r.step_s * 1e3 for run in runs for r in run.rows
                  if (r.strategy, r.link_rate, r.batch_size) == (
                      row.strategy, row.link_rate, row.batch_size)]
        print(f"{row.link_rate:>8s} {row.batch_size:6d} {row.step_s * 1e3:8.1f} "
              f"{model * 1e3:9.1f} {error:+7.1%}  {'yes' if limits else 'no':3s}"
              + (f"  runs {min(spread):.1f}–{max(spread):.1f}" if len(runs) > 1 else ""))
    good = [(r, b) for r, b, ok in within if ok]
    print(f"within 15 % where the link limits: {len(good)} of {len(within)} "
          f"({len({b for _, b in good})} batch sizes × {len({r for r, _ in good})} rates)")

    for b in sizes:
        strategies = list(dict.fromkeys(c.strategy for c in results.curves if c.batch_size == b))
        if DATA_PARALLEL not in strategies:
            continue
        target = target_loss(results, b)
        print(f"\n2–3. batch {b}: target held-out loss {target:.4f} (DP's seed-mean loss where "
              "its curve still falls, as step 20); time to it, measured (model), from the "
              "seed-mean interpolated steps")
        steps = {s: mean_steps(results, s, b, target) for s in strategies}
        spread = {s: [v for v in steps_by_seed(results, s, b, target).values() if v is not None]
                  for s in strategies}
        print("steps to it (seed mean, range): " + ", ".join(
            f"{s} {n:.1f} [{min(spread[s]):.1f}, {max(spread[s]):.1f}]" if n is not None
            else f"{s} never" for s, n in steps.items()))
        for rate in rates:
            rows = {r.strategy: r for r in results.rows
                    if r.link_rate == rate and r.batch_size == b}
            if DATA_PARALLEL not in rows or steps[DATA_PARALLEL] is None:
                continue
            dp = steps[DATA_PARALLEL] * rows[DATA_PARALLEL].step_s
            dp_model = steps[DATA_PARALLEL] * modelled_step_s(
                rows[DATA_PARALLEL], hosts, devices, alpha_s=alpha.get(rate, 0.0),
                compute_s=median_compute_s(results, DATA_PARALLEL, b))
            cells, calls = [], []
            for s in COMPRESSED:
                if s not in rows or steps.get(s) is None:
                    cells.append(f"{s} never" if s in rows else f"{s} —")
                    continue
                t = steps[s] * rows[s].step_s
                t_model = steps[s] * modelled_step_s(
                    rows[s], hosts, devices, alpha_s=alpha.get(rate, 0.0),
                    own_s=own_work_s(results, s), compute_s=median_compute_s(results, s, b))
                right = (t < dp) == (t_model < dp_model)
                calls.append(right)
                cells.append(f"{s} {t:.1f} s ({t_model:.1f}){'' if right else ' WRONG CALL'}")
            best = min((steps[s] * rows[s].step_s for s in COMPRESSED
                        if s in rows and steps.get(s)), default=None)
            gain = f"; DP / best compressed {dp / best:.2f}×" if best else ""
            print(f"  {rate:>8s}: DP {dp:.1f} s ({dp_model:.1f}); " + ", ".join(cells) + gain
                  + f"; model's call right for {sum(calls)} of {len(calls)}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["build/training/training.json"])
