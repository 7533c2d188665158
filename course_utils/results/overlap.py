"""Step 19's measurements (``course cluster --measure overlap``, ``overlap.json``): the backward
pass of a tower of layers and its per-layer all-reduces timed on the cluster five ways, and the
collective matmul three ways, at each link rate, in each of several runs of one plan."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import NamedTuple, Sequence

from course_utils.results.cluster import ClusterSetup
from course_utils.results.meta import RunMeta
from course_utils.results.records import load_saved


@dataclass(frozen=True)
class BackwardRow:
    """One run at one link rate: seconds of the backward pass alone (``compute_s``), of its
    all-reduces alone (``communication_s``), of the two one after the other (``serial_s``),
    with each bucket sent from the second device while the first computes (``overlapped_s``),
    sent from the computing device itself (``same_device_s``), and written in one program
    (``one_program_s``); the bytes host 0's link sent per overlapped call."""

    link_rate: str
    run: int
    compute_s: float
    communication_s: float
    serial_s: float
    overlapped_s: float
    same_device_s: float
    one_program_s: float
    link_bytes: float | None = None


@dataclass(frozen=True)
class MatmulRow:
    """One run at one link rate of the collective matmul: its partial products alone
    (``compute_s``), its ``ppermute`` steps alone (``shift_s``), all-gather then multiply
    (``gathered_s``), the loop in one program (``looped_s``) and split by hand between the two
    devices (``by_hand_s``)."""

    link_rate: str
    run: int
    compute_s: float
    shift_s: float
    gathered_s: float
    looped_s: float
    by_hand_s: float


@dataclass(frozen=True)
class OverlapSizes:
    """The plan's sizes: the tower (``layers`` layers of ``width``, ``rows`` rows per host) and
    the collective matmul's ``(m, k, n)``, A (m × k) times B (k × n)."""

    width: int
    layers: int
    rows: int
    matmul: tuple[int, int, int]


@dataclass(frozen=True)
class OverlapResults:
    """What ``overlap.json`` holds: how it was made (``meta.runs``: the runs of the plan), on
    which cluster, at which sizes, and every run's rows."""

    meta: RunMeta
    cluster: ClusterSetup
    sizes: OverlapSizes
    backward: tuple[BackwardRow, ...]
    matmul: tuple[MatmulRow, ...]


@dataclass(frozen=True)
class Spread:
    """The median of one figure over the runs, and its smallest and largest value."""

    median: float
    low: float
    high: float


def spread(values: Sequence[float]) -> Spread:
    """Median, minimum and maximum of ``values``.

    Examples:
        >>> spread([3.0, 1.0, 2.0])
        Spread(median=2.0, low=1.0, high=3.0)
    """
    return Spread(statistics.median(values), min(values), max(values))


def rates(results: OverlapResults) -> list[str]:
    """The link rates measured, in the order they ran."""
    return list(dict.fromkeys(row.link_rate for row in results.backward))


def over_runs(rows, link_rate: str, key) -> Spread:
    """``key(row)`` over the runs at ``link_rate``.

    Raises:
        ValueError: no row at that rate.
    """
    values = [key(row) for row in rows if row.link_rate == link_rate]
    if not values:
        raise ValueError(f"no run at {link_rate}; the rates measured are "
                         f"{sorted({row.link_rate for row in rows})}")
    return spread(values)


def overlap_ratio(row: BackwardRow) -> float:
    """The overlapped time over max(compute, communication): 1 is perfect overlap, and one
    after the other is (compute + communication) / max."""
    return row.overlapped_s / max(row.compute_s, row.communication_s)


def balanced_rate(results: OverlapResults) -> str:
    """The rate whose median communication time is closest to the median compute time (by
    their ratio)."""
    import math

    def distance(rate):
        comm = over_runs(results.backward, rate, lambda r: r.communication_s).median
        comp = over_runs(results.backward, rate, lambda r: r.compute_s).median
        return abs(math.log(comm / comp))

    return min(rates(results), key=distance)


class Modelled(NamedTuple):
    """The link model at one rate: the all-reduces alone, the two one after the other and the
    bucketed overlap (``bucketed_step_time``), from the measured compute alone."""

    communication_s: float
    serial_s: float
    overlapped_s: float


def modelled(results: OverlapResults, link_rate: str, alpha_s: float = 0.0) -> Modelled:
    """Each layer's gradient one bucket, all-reduced on a ring over the hosts at ``link_rate``
    (its payload share, ``FRAME_SHARE``) with ``alpha_s`` per message step; the compute is the
    runs' median backward pass alone."""
    from course_utils.models.latency import bucketed_step_time, collective_time
    from course_utils.models.links import payload_bytes_per_s

    m, hosts = results.sizes, results.cluster.hosts
    bucket = 4 * m.width * m.width
    rate = {"alpha_s": alpha_s, "bandwidth_bytes_per_s": payload_bytes_per_s(link_rate)}
    compute = over_runs(results.backward, link_rate, lambda r: r.compute_s).median
    communication = m.layers * collective_time(bucket, hosts, algorithm="ring", **rate)
    overlapped = bucketed_step_time([bucket] * m.layers, bucket, ranks=hosts,
                                    backward_s=compute, **rate)
    return Modelled(communication, compute + communication, overlapped)


def figure_data(results: OverlapResults, alpha_s: float = 0.0) -> dict:
    """One panel: the backward pass with its all-reduces against the link rate, each schedule's
    median over the runs (markers), with compute + communication and the bucketed overlap of the
    model (dashed) and max(compute, communication) measured (grey)."""
    from course_utils.models.links import rate_bytes_per_s

    measured = rates(results)
    series = []
    for k, (label, key) in enumerate((
            ("one after the other", lambda r: r.serial_s),
            ("one program", lambda r: r.one_program_s),
            ("sent from the computing device", lambda r: r.same_device_s),
            ("overlapped on a second device", lambda r: r.overlapped_s))):
        series.append({"label": label, "color": f"C{k}", "y": [
            over_runs(results.backward, rate, key).median * 1e3 for rate in measured]})
    model = [modelled(results, rate, alpha_s) for rate in measured]
    series += [
        {"label": "model, one after the other", "style": "model", "color": "C0",
         "y": [m.serial_s * 1e3 for m in model]},
        {"label": "model, overlapped", "style": "model", "color": "C3",
         "y": [m.overlapped_s * 1e3 for m in model]},
        {"label": "max(compute, communication)", "color": "0.4", "y": [
            over_runs(results.backward, rate,
                      lambda r: max(r.compute_s, r.communication_s)).median * 1e3
            for rate in measured]},
    ]
    return {"panels": [{
        "kind": "line", "title": f"backward pass and all-reduces, {results.sizes.layers} "
                                 f"buckets, {results.cluster.hosts} hosts (dashed: model)",
        "x": [rate_bytes_per_s(r) * 8 / 1e6 for r in measured], "xscale": "log",
        "yscale": "linear", "xlabel": "link rate (Mbit/s)", "ylabel": "time (ms)",
        "series": series}]}


def saved_overlap_results() -> OverlapResults:
    """The saved full runs, ``course_utils/saved/overlap.json``. Regenerate (as root, on a quiet
    machine, about 15 minutes): ``course cluster --measure overlap --plan full
    --devices-per-host 2 --link-rate 100mbit,200mbit,400mbit,1gbit --runs 3 --timeout 3000
    --out build/overlap``, then copy ``build/overlap/overlap.json`` here."""
    return load_saved(OverlapResults, "overlap.json",
                      "course cluster --measure overlap --plan full --runs 3")
