"""Part five's timed goals read off a ``course cluster --measure diloco`` run (issue 44): every
round's time per inner step against the model, the counters' byte ratios, and Streaming
DiLoCo's inner step where its fragment's sync can hide. Medians over the file's runs with
their range. Prints figures; asserts nothing.

    python benchmarks/diloco_goals.py [build/diloco/diloco_cluster.json]   # default: the saved runs
"""

from __future__ import annotations

import sys

from course_utils.models.links import rate_bytes_per_s, rate_label
from course_utils.results.diloco_cluster import (
    DATA_PARALLEL,
    NOTHING_SENT,
    byte_goals,
    counted_bytes,
    hidden_syncs,
    load_diloco_cluster,
    local_steps,
    model_gaps,
    rates,
    saved_diloco_cluster,
    step,
)

LIMITED = (10e6, 200e6)  # bit/s: the rates where the link limits, where the model's goal is set
MODEL_TOLERANCE = 0.15


def _cell(s, scale=1e3) -> str:
    return f"{s.median * scale:.1f} [{s.low * scale:.1f}, {s.high * scale:.1f}]"


def main(argv: list[str]) -> int:
    results = load_diloco_cluster(argv[0]) if argv else saved_diloco_cluster()
    m, setup = results.meta, results.cluster
    print(f"{m.runs} run(s) of the {setup.plan} plan, {setup.hosts} hosts × "
          f"{setup.devices_per_host}, batch {results.sizes.batch_size} rows per host, jax "
          f"{m.machine.jax}, {m.machine.cores} cores; median [lowest, highest] over the runs")
    gaps = {(rate, h, name): gap for rate, h, name, gap in model_gaps(results)}
    names = (NOTHING_SENT, DATA_PARALLEL, *(x.name for x in results.methods))
    for rate in rates(results):
        for h in local_steps(results):
            print(f"{rate_label(rate)}, H = {h}: ms per inner step (model), KiB sent per step")
            for name in names:
                gap = gaps.get((rate, 1 if name == DATA_PARALLEL else h, name))
                shown = "" if gap is None else f" (model {gap:+.1%})"
                print(f"  {name:17s} {_cell(step(results, name, h, rate)):>28s}{shown}, "
                      f"{_cell(counted_bytes(results, name, h, rate), 2**-10):>26s}")
            for label, goal in byte_goals(results, h, rate).items():
                print(f"  {label}: {goal.value.median:.4f} [{goal.value.low:.4f}, "
                      f"{goal.value.high:.4f}], target {goal.target:.4f} ± 5 %: "
                      f"{'met' if goal.met else 'not met'}")
    print("Streaming DiLoCo's inner step / the step with nothing sent, where its fragment's sync "
          "needs at most half the compute of the steps it overlaps (bound 1.15):")
    for rate, h, goal in hidden_syncs(results) or [("none", 0, None)]:
        if goal is None:
            print("  no such cell")
            continue
        print(f"  {rate_label(rate)}, H = {h}: {goal.value.median:.3f} [{goal.value.low:.3f}, "
              f"{goal.value.high:.3f}]: {'met' if goal.value.median <= 1.15 else 'not met'}")
    _model_goal("model against measured", gaps)
    _model_goal("the same with each sync timed alone (not the link model's)",
                {(rate, h, name): gap for rate, h, name, gap in
                 model_gaps(results, sync_alone=True)})
    return 0


def _model_goal(what: str, gaps: dict) -> None:
    limited = [(k, g) for k, g in gaps.items()
               if LIMITED[0] <= 8 * rate_bytes_per_s(k[0]) <= LIMITED[1]]
    worst = max(limited, key=lambda kg: abs(kg[1]), default=None)
    within = sum(abs(g) <= MODEL_TOLERANCE for _, g in limited)
    print(f"{what} at 10–200 Mbit/s: {within} of {len(limited)} rounds within "
          f"{MODEL_TOLERANCE:.0%}" + ("" if worst is None else
                                       f"; the worst {worst[1]:+.1%} ({worst[0][2]}, H = "
                                       f"{worst[0][1]}, {rate_label(worst[0][0])})"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
