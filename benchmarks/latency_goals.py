"""Part six's goals read off a ``course cluster --measure latency`` run (issue 55): the delay
line's round trips and α, each cell's crossover and TCP connection, the share of the all-reduce
cells within 15 % of the α-β model (textbook and gloo's) where every message is at least 4
bandwidth-delay products, each miss beside it, and the crossover against both models. Medians
over the file's runs. Prints figures; asserts nothing.

    python benchmarks/latency_goals.py [build/latency/latency.json]   # default: the saved run
"""

from __future__ import annotations

import sys

from course_utils.results import round_trips as rt
from course_utils.results.latency import LatencyResults, saved_latency_results
from course_utils.results.records import load


def main(argv: list[str]) -> int:
    results = load(LatencyResults, argv[0]) if argv else saved_latency_results()
    m = results.meta
    print(f"{m.runs} run(s), {results.cluster.hosts} hosts, {m.seconds / 60:.0f} minutes, "
          f"jax {m.machine.jax}, commit {(m.commit or '?')[:7]}")
    for line in rt.round_trip_lines(results):
        print(line)
    print("\ncells with messages of at least 4 BDP, model / measured − 1 (the misses first):")
    cells = sorted((c for c in rt.allreduce_cells(results) if c.long_messages),
                   key=lambda c: -abs(c.error("gloo")))
    for c in cells:
        print(f"{c.link_rate:>8s} {c.delay_ms:4g} ms {c.algorithm:8s} {c.size / 2**10:7.0f} KiB: "
              f"measured {c.measured_ms.median:8.1f} ms [{c.measured_ms.low:.1f}–"
              f"{c.measured_ms.high:.1f}], gloo {c.error('gloo'):+6.1%}, textbook "
              f"{c.error('textbook'):+6.1%}")
    every = rt.allreduce_cells(results)
    for name in rt.MODELLED:
        mine = [c for c in every if c.algorithm == name]
        print(f"all {name} cells within 15 % of gloo's model: "
              f"{rt.share_within(mine, 'gloo'):.0%} of {len(mine)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
