"""The link model as a prediction (issue 50): every saved cluster run's time per call, step or
inner step against the model from bytes, the link's rate and the measured compute alone (no
timed sync or collective is an input), in the cells where the link limits: the modelled link
time is at least half the measured time, the message is larger than tbf's bucket
(``links.link_limits``) and the rate is 10–200 Mbit/s. Prints the count within 15 % (by run,
where the file keeps its runs) and every miss. Asserts nothing.

    python benchmarks/link_model.py [FOLDER]   # FOLDER holds the runs' files; default: saved
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import NamedTuple

from course_utils.models.cost_model import Topology
from course_utils.models.latency import bucketed_step_time
from course_utils.models.links import link_bytes, link_limits, payload_bytes_per_s, rate_bytes_per_s
from course_utils.results import diloco_cluster as dc
from course_utils.results import training as tr
from course_utils.results.cluster import ClusterResults
from course_utils.results.overlap import OverlapResults
from course_utils.results.records import load, saved_path
from course_utils.training.traffic import strategy_traffic

TOLERANCE, LOWEST, HIGHEST = 0.15, 10e6 / 8, 200e6 / 8  # bytes/s: the rates the goal covers


class Cell(NamedTuple):
    step: str
    what: str
    rate: str
    run: int | None  # None: the file holds the median of its runs
    measured_s: float
    modelled_s: float
    link_s: float  # the model's link time inside modelled_s
    message: float  # the bytes of the call, step or sync over a host's link

    def counts(self) -> bool:
        return (LOWEST <= rate_bytes_per_s(self.rate) <= HIGHEST
                and self.link_s >= 0.5 * self.measured_s and link_limits(self.message, self.rate))

    def within(self) -> bool:
        return abs(self.modelled_s / self.measured_s - 1) <= TOLERANCE


def collective_cells(results: ClusterResults, name: str) -> list[Cell]:
    """Step 17: each collective and the two-level all-reduce, every size, against its ring
    bytes at the rate."""
    cells = []
    for run in results.runs:
        h, d = run.hosts, run.devices_per_host
        for row in run.collectives:
            for kind in ("all_reduce", "reduce_scatter", "all_gather"):
                sent = link_bytes(kind, row.bytes, h, d)
                cells.append(Cell(f"17 {name}", f"{kind} {row.bytes >> 10} KiB", run.link_rate,
                                  None, row.time(kind), sent / payload_bytes_per_s(run.link_rate),
                                  sent / payload_bytes_per_s(run.link_rate), sent))
        for row in run.hierarchy:
            sent = link_bytes("hierarchical", row.bytes, h, d)
            cells.append(Cell(f"17 {name}", f"two-level {row.bytes >> 10} KiB", run.link_rate,
                              None, row.hierarchical, sent / payload_bytes_per_s(run.link_rate),
                              sent / payload_bytes_per_s(run.link_rate), sent))
    return cells


def overlap_cells(results: OverlapResults) -> list[Cell]:
    """Step 19: the buckets' all-reduces alone, the backward pass then its all-reduces, and
    the two overlapped (``bucketed_step_time``, α = 0), from the measured compute."""
    s, hosts, cells = results.sizes, results.cluster.hosts, []
    bucket = 4 * s.width ** 2
    for row in results.backward:
        rate = payload_bytes_per_s(row.link_rate)
        link = s.layers * link_bytes("all_reduce", bucket, hosts, 1) / rate
        over = bucketed_step_time([bucket] * s.layers, bucket, ranks=hosts, alpha_s=0.0,
                                  bandwidth_bytes_per_s=rate, backward_s=row.compute_s)
        for what, measured, modelled in (("all-reduces alone", row.communication_s, link),
                                         ("one after the other", row.serial_s,
                                          row.compute_s + link),
                                         ("overlapped", row.overlapped_s, over)):
            cells.append(Cell("19", what, row.link_rate, row.run, measured, modelled, link,
                              bucket))
    return cells


def training_cells(results: tr.TrainingResults) -> list[Cell]:
    """Step 20: every strategy's step from its measured compute (and a scheme's own work) and
    its bytes at the rate."""
    h, d, cells = results.cluster.hosts, results.cluster.devices_per_host, []
    for row in results.rows:
        own = tr.own_work_s(results, row.strategy)
        modelled = tr.modelled_step_s(row, h, d, own_s=own)
        link = modelled - row.compute_s - own
        sent = tr.part_four_traffic(row.strategy, h, d).link_bytes
        cells.append(Cell("20", f"{row.strategy} batch {row.batch_size}", row.link_rate, None,
                          row.step_s, modelled, link, sent))
    return cells


def diloco_cells(results: dc.DilocoClusterResults) -> list[Cell]:
    """Step 22: every method's inner step at every H, run by run, from the inner step with
    nothing sent and each sync's bytes at the rate (``modelled_step_s``)."""
    hosts, n, cells = results.cluster.hosts, results.sizes.n, []
    for r in results.rounds:
        if r.method == dc.NOTHING_SENT:
            continue
        modelled = dc.modelled_step_s(results, r.method, r.local_steps, r.link_rate)
        if r.method == dc.DATA_PARALLEL:
            sent = strategy_traffic(dc.BASELINE, n, Topology(hosts, 1)).link_bytes
            link, h = sent / payload_bytes_per_s(r.link_rate), 1
        else:
            sent = dc.sync_link_bytes(dc.method(results, r.method), n, hosts)
            link, h = sent / payload_bytes_per_s(r.link_rate) / r.local_steps, r.local_steps
        cells.append(Cell("22", f"{r.method} H={h}", r.link_rate, r.run, r.step_s, modelled,
                          link, sent))
    return cells


def sync_bounds(results: dc.DilocoClusterResults) -> list[str]:
    """Step 22's syncs alone against the traced mechanism: a host's connection carries its
    bytes at the rate, and the exchange's two directions overlap fully (1× its bytes at the
    rate) or not at all (2×). Each method at each rate of 10–200 Mbit/s where the sync does not
    fit in the bucket:
    the measured seconds over its bytes' time at the rate, run by run."""
    hosts, n, lines = results.cluster.hosts, results.sizes.n, []
    for m in results.methods:
        sent = dc.sync_link_bytes(m, n, hosts)
        for rate in dc.rates(results):
            if not (link_limits(sent, rate) and LOWEST <= rate_bytes_per_s(rate) <= HIGHEST):
                continue
            ratios = [r.sync_s * payload_bytes_per_s(rate) / sent for r in results.syncs
                      if (r.method, r.link_rate) == (m.name, rate)]
            inside = sum(0.85 <= x <= 2.15 for x in ratios)
            lines.append(f"    {m.name:17s} {rate:>8s}: sync / its bytes at the rate "
                         + ", ".join(f"{x:.2f}" for x in ratios)
                         + f" ({inside} of {len(ratios)} within 1–2× ± 15 %)")
    return lines


def report(cells: list[Cell]) -> list[str]:
    lines = []
    for step in dict.fromkeys(c.step for c in cells):
        mine = [c for c in cells if c.step == step and c.counts()]
        runs = sorted({c.run for c in mine}, key=lambda r: -1 if r is None else r)
        counts = [sum(c.within() for c in mine if c.run == r) for r in runs]
        totals = [sum(1 for c in mine if c.run == r) for r in runs]
        shown = ", ".join(f"{k}/{t}" for k, t in zip(counts, totals))
        share = sum(counts) / max(1, sum(totals))
        lines.append(f"step {step}: {shown} cells within 15 % "
                     f"({'by run' if runs != [None] else 'medians of the runs'}; "
                     f"{share:.0%} in all); {len([c for c in cells if c.step == step])} cells, "
                     f"{len(mine)} where the link limits")
        by_cell: dict = {}
        for c in mine:
            by_cell.setdefault((c.what, c.rate), []).append(c.modelled_s / c.measured_s)
        for (what, rate), ratios in by_cell.items():
            if any(abs(x - 1) > TOLERANCE for x in ratios):
                lines.append(f"    miss: {what} at {rate}: model / measured "
                             + ", ".join(f"{x:.2f}" for x in ratios))
    return lines


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv else None

    def path(name):
        return folder / name if folder is not None else saved_path(name)

    cells = []
    for shape in ("2x2", "2x4", "2x2_bbr"):
        if path(f"cluster_{shape}.json").exists():
            cells += collective_cells(load(ClusterResults, path(f"cluster_{shape}.json")), shape)
    if path("overlap.json").exists():
        cells += overlap_cells(load(OverlapResults, path("overlap.json")))
    if path("training.json").exists():
        cells += training_cells(load(tr.TrainingResults, path("training.json")))
    syncs = []
    if path("diloco_cluster.json").exists():
        diloco = dc.load_diloco_cluster(path("diloco_cluster.json"))
        cells += diloco_cells(diloco)
        syncs = ["step 22's syncs alone, where they do not fit in the bucket:",
                 *sync_bounds(diloco)]
    print("\n".join(report(cells) + syncs))
    counted = [c for c in cells if c.counts()]
    print(f"in all: {sum(c.within() for c in counted)} of {len(counted)} cells within 15 %; "
          f"median |model / measured − 1| "
          f"{statistics.median(abs(c.modelled_s / c.measured_s - 1) for c in counted):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
