"""Step 19's goal read off a ``course cluster --measure overlap`` run (issue 31): at the link rate
where communication is closest to compute, the overlapped backward pass against max(compute,
communication), the median over the file's runs with its spread. Prints figures; asserts nothing.

    python benchmarks/overlap_goal.py [build/overlap/overlap.json]   # default: the saved runs
"""

from __future__ import annotations

import sys

from course_utils.models.links import rate_label
from course_utils.results.overlap import (
    OverlapResults,
    balanced_rate,
    modelled,
    over_runs,
    overlap_ratio,
    rates,
    saved_overlap_results,
)
from course_utils.results.records import load

BOUND = 1.15  # the goal: overlapped ≤ 1.15 × max(compute, communication)


def main(argv: list[str]) -> int:
    results = load(OverlapResults, argv[0]) if argv else saved_overlap_results()
    m, setup = results.meta, results.cluster
    print(f"{m.runs} run(s) of the {setup.plan} plan, {setup.hosts} hosts × "
          f"{setup.devices_per_host}, jax {m.machine.jax}, {m.machine.cores} cores; ms, median "
          "[lowest, highest] over the runs")
    for rate in rates(results):
        def cell(key, rate=rate):
            s = over_runs(results.backward, rate, key)
            return f"{s.median * 1e3:6.0f} [{s.low * 1e3:5.0f}, {s.high * 1e3:5.0f}]"

        ratio = over_runs(results.backward, rate, overlap_ratio)
        print(f"{rate_label(rate):>10s}: compute {cell(lambda r: r.compute_s)}, "
              f"communication {cell(lambda r: r.communication_s)}, "
              f"overlapped {cell(lambda r: r.overlapped_s)} "
              f"(model {modelled(results, rate).overlapped_s * 1e3:.0f}); "
              f"ratio {ratio.median:.3f} [{ratio.low:.3f}, {ratio.high:.3f}]")
    rate = balanced_rate(results)
    ratio = over_runs(results.backward, rate, overlap_ratio)
    verdict = ("met" if ratio.high <= BOUND else "not met" if ratio.low > BOUND
               else "the spread straddles the bound")
    print(f"goal at {rate_label(rate)} (communication closest to compute): overlapped / "
          f"max(compute, communication) = {ratio.median:.3f}, runs {ratio.low:.3f} to "
          f"{ratio.high:.3f}, bound {BOUND}: {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
