"""Part four's goals read off ``course cluster --measure training`` runs (issue 30): the step
model against data parallelism's measured step, each compression scheme's lead over data
parallelism across step 20's band of target held-out losses at each link rate, and whether the
models call each one right. Prints figures; asserts nothing.

    python benchmarks/part_four_goals.py build/training/training.json [more runs ...]

With several runs of the same plan, every time (step, compute, own work) is the median over the
runs, and data parallelism's step is printed with its spread (the runs' lowest and highest).
"""

from __future__ import annotations

import sys

from course_utils.results.cluster import per_message_s, saved_cluster_results
from course_utils.results.curves import band_lead
from course_utils.results.records import load
from course_utils.results.training import (
    TrainingResults,
    median_compute_s,
    median_of_runs,
    modelled_step_s,
    own_work_s,
    seed_curves,
    training_band,
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

    band = training_band()
    targets = ", ".join(f"{t:.4f}" for t in band.targets)
    for b in sizes:
        strategies = list(dict.fromkeys(c.strategy for c in results.curves if c.batch_size == b))
        if DATA_PARALLEL not in strategies:
            continue
        curves = {s: list(seed_curves(results, s, b).values()) for s in strategies}
        print(f"\n2–3. batch {b}: the band of targets {targets} ({band.fractions} of the "
              "reducible loss gone, as step 20); each scheme's lead over DP (DP's time ÷ its, "
              "seeds paired, first reaching and staying), lowest–highest over the seeds and the "
              "band, measured (model)")
        for rate in rates:
            rows = {r.strategy: r for r in results.rows
                    if r.link_rate == rate and r.batch_size == b}
            if DATA_PARALLEL not in rows:
                continue
            modelled = {s: modelled_step_s(row, hosts, devices, alpha_s=alpha.get(rate, 0.0),
                                           own_s=own_work_s(results, s) if s in COMPRESSED
                                           else 0.0, compute_s=median_compute_s(results, s, b))
                        for s, row in rows.items()}
            cells, calls = [], []
            for s in (s for s in COMPRESSED if s in rows and s in curves):
                found, model = (band_lead(curves[s], curves[DATA_PARALLEL], band.targets,
                                          step_s_a=a, step_s_b=d, read="linear", stay=True)
                                for a, d in ((rows[s].step_s, rows[DATA_PARALLEL].step_s),
                                             (modelled[s], modelled[DATA_PARALLEL])))
                right = (found.holds(), found.trails()) == (model.holds(), model.trails())
                calls.append(right)
                cells.append(f"{s} {_span(found)} ({_span(model)})"
                             + ("" if right else " WRONG CALL"))
            print(f"  {rate:>8s}: " + ", ".join(cells)
                  + f"; model's call right for {sum(calls)} of {len(calls)}")


def _span(lead) -> str:
    """The lowest–highest of a ``BandLead``'s finite leads (``*``: some run never reaches a
    target)."""
    values = [x for t in lead.targets for x in lead.leads[t]]
    finite = [x for x in values if x is not None and 0 < x < float("inf")]
    never = "*" if len(finite) < len(values) else ""
    return f"{min(finite):.2f}–{max(finite):.2f}×{never}" if finite else "never"

if __name__ == "__main__":
    main(sys.argv[1:] or ["build/training/training.json"])
