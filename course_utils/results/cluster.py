"""Reading a ``course cluster`` run against the link models (``links``): the table, the goals and
the figure that ``course cluster`` prints and step 17 shows.

A ``course cluster`` run (``ClusterResults``, what ``cluster.json`` holds) has one
``ClusterRun`` per link rate: ``hosts``, ``devices_per_host``, ``link_rate``, ``tcp`` (the hosts'
TCP congestion control) and the times in seconds (``collectives``, ``hierarchy``, ``ring16``,
``buckets``, ``training``). ``load_cluster_results`` reads the file; ``to_json``
(``results.records``) gives back its JSON.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from course_utils.display import format_bytes
from course_utils.models.fit import Fit
from course_utils.models.latency import collective_time
from course_utils.models.links import (
    COLLECTIVES,
    fitted_link_rate,
    link_bytes,
    link_time_s,
    rate_bytes_per_s,
    rate_label,
)
from course_utils.results.meta import RunMeta
from course_utils.results.records import load, load_saved

# the goals of the cluster measurements (issue: "a cluster on one machine")
RATE_TOLERANCE = 0.15  # fitted rate within 15 % of the configured one
RATIO_TOLERANCE = 0.15  # all-reduce / reduce-scatter within 15 % of 2 (at 4 MiB per device)
HIERARCHY_GOAL = 1.4  # two-level ≥ 1.4× faster than flat (at 4 MiB per device)
RING16_GOAL, RING16_TOLERANCE = 0.5, 0.1  # u16 ring / f32 ring: time about halved
GOAL_BYTES = 4 * 2**20  # the size at which the ratios are read
GOAL_RATE = "200mbit"  # the goals are set at this link rate


@dataclass(frozen=True)
class CollectiveTimes:
    """One size (bytes per device): each collective's median seconds, and the bytes host 0's
    link sent per call (``None`` in a run without the link's counter)."""

    bytes: int
    all_reduce: float
    reduce_scatter: float
    all_gather: float
    link_bytes: dict[str, float] | None = None

    def time(self, kind: str) -> float:
        """The seconds of collective ``kind`` (one of ``COLLECTIVES``)."""
        return getattr(self, kind)


@dataclass(frozen=True)
class TwoLevelTimes:
    """One size: the flat and the two-level all-reduce, and the two-level's bytes over host 0's
    link per call (``None`` without the counter)."""

    bytes: int
    flat: float
    hierarchical: float
    link_bytes: float | None = None


@dataclass(frozen=True)
class RingTimes:
    """One size: the hand-built ring all-reduce with f32 messages and with u16 ones."""

    bytes: int
    f32: float
    u16: float


@dataclass(frozen=True)
class BucketTimes:
    """``count`` all-reduces of ``bytes`` each: as separate calls, and as one bucket."""

    count: int
    bytes: int
    separate: float
    one_bucket: float


@dataclass(frozen=True)
class TrainingTimes:
    """Seconds of one data-parallel step, one local SGD step, one averaging, and local SGD's
    step with the averaging spread over ``local_steps``."""

    dp_step: float
    local_step: float
    averaging: float
    local_steps: int
    local_sgd_step: float


@dataclass(frozen=True)
class ClusterRun:
    """The plan timed at one link rate."""

    hosts: int
    devices_per_host: int
    link_rate: str
    tcp: str
    collectives: tuple[CollectiveTimes, ...]
    hierarchy: tuple[TwoLevelTimes, ...]
    ring16: tuple[RingTimes, ...]
    buckets: BucketTimes
    training: TrainingTimes

    def link_limited(self, kind: str, nbytes: int) -> bool:
        """Whether the link's rate can set the time of collective ``kind`` (or
        ``"hierarchical"``) over ``nbytes`` per device: the bytes it sends over a host's link
        do not fit in tbf's bucket (``links.link_limits``). A call that fits was not limited by
        the link: after an idle gap it leaves on the bucket's credit."""
        from course_utils.models.links import link_limits

        return link_limits(link_bytes(kind, nbytes, self.hosts, self.devices_per_host),
                           self.link_rate)


@dataclass(frozen=True)
class ClusterSetup:
    """The cluster a ``course cluster`` measurement ran on (any ``--measure``): hosts × devices
    per host, the plan, the TCP congestion control set between the hosts (``--tcp``) and the
    machine's default (/proc/sys/net/ipv4/tcp_congestion_control), the links' tbf bucket in
    milliseconds of their bytes (``models.links.bucket_bytes``; ``None``: 256 KiB), and with
    ``--delay`` the delay line's kind (``netem`` or ``tun``) and its one-way delay in ms (when
    the run used one; a run of several delays keeps each in its rows)."""

    hosts: int
    devices_per_host: int
    plan: str
    tcp: str
    default_tcp: str
    bucket_ms: float | None = None
    delay_line: str | None = None
    delay_ms: float | None = None


@dataclass(frozen=True)
class ClusterResults:
    """A ``course cluster`` run: every link rate of ``--link-rate``, what ``cluster.json``
    holds."""

    meta: RunMeta
    cluster: ClusterSetup
    runs: tuple[ClusterRun, ...]


@dataclass(frozen=True)
class Goal:
    """One goal: the measured figure (per collective for the fitted rates), the target as text,
    whether it is met, and the size it was read at where that matters."""

    value: float | dict[str, float | None]
    target: str
    met: bool
    bytes: int | None = None


def _shape(run: ClusterRun) -> tuple[int, int, float]:
    return run.hosts, run.devices_per_host, rate_bytes_per_s(run.link_rate)


def _at_goal_size(rows):
    """The row whose size is ``GOAL_BYTES``, or the nearest to it."""
    return min(rows, key=lambda r: abs(r.bytes - GOAL_BYTES))


def fits(run: ClusterRun) -> dict:
    """Per collective, the link rate fitted from the measured times and its gap to the
    configured rate (a fraction): ``gap`` from the bytes the host's link counted (when the run
    has them, else from the ring model's bytes) and ``model_gap`` from the ring model's bytes."""
    hosts, devices, rate = _shape(run)
    rows = run.collectives
    sizes = [r.bytes for r in rows]
    counted = all(r.link_bytes is not None for r in rows)
    out = {}
    for kind in COLLECTIVES:
        times = [r.time(kind) for r in rows]
        model = fitted_link_rate(kind, sizes, times, hosts, devices)
        fit = fitted_link_rate(kind, sizes, times, hosts, devices,
                               [r.link_bytes[kind] for r in rows]) if counted else model
        out[kind] = {**fit._asdict(), "gap": _gap(fit, rate), "model_gap": _gap(model, rate),
                     "counted": counted}
    return out


def _gap(fit: Fit, rate: float) -> float | None:
    return None if fit.bytes_per_s is None else fit.bytes_per_s / rate - 1


def _gaps_text(gaps: dict) -> str:
    """``all_reduce -4.2%, reduce_scatter none, …``: gaps as signed percentages."""
    return ", ".join(f"{k} {v:+.1%}" if v is not None else f"{k} none" for k, v in gaps.items())


def counted_against_model(run: ClusterRun, nbytes: int | None = None) -> dict | None:
    """At ``nbytes`` per device (default: ``GOAL_BYTES`` or the nearest size): per collective,
    and for the two-level all-reduce when the run counted it, the bytes host 0's link counted per
    call and the model's ``link_bytes``; ``None`` for a run saved without counts."""
    rows = run.collectives
    row = _at_goal_size(rows) if nbytes is None else next(r for r in rows if r.bytes == nbytes)
    if row.link_bytes is None:
        return None
    hosts, devices, _ = _shape(run)
    counted = dict(row.link_bytes)
    two_level = next(r for r in run.hierarchy if r.bytes == row.bytes)
    if two_level.link_bytes is not None:
        counted["hierarchical"] = two_level.link_bytes
    return {"bytes": row.bytes,
            **{kind: {"counted": c, "model": link_bytes(kind, row.bytes, hosts, devices)}
               for kind, c in counted.items()}}


def goals(run: ClusterRun) -> dict[str, Goal]:
    """Each goal's measured figure and whether it is met; ratios at ``GOAL_BYTES`` (or the size
    nearest to it)."""
    row = _at_goal_size(run.collectives)
    ratio = row.all_reduce / row.reduce_scatter
    gaps = {k: f["gap"] for k, f in fits(run).items()}
    target = _at_goal_size(run.hierarchy)
    speedup = target.flat / target.hierarchical
    rings = _at_goal_size(run.ring16)
    halved = rings.u16 / rings.f32
    return {
        "fitted rates": Goal(gaps, f"each within {RATE_TOLERANCE:.0%} of the rate",
                             all(g is not None and abs(g) <= RATE_TOLERANCE
                                 for g in gaps.values())),
        "all-reduce / reduce-scatter": Goal(ratio, f"2 within {RATIO_TOLERANCE:.0%}",
                                            abs(ratio / 2 - 1) <= RATIO_TOLERANCE),
        "hierarchical speed-up": Goal(speedup, f"at least {HIERARCHY_GOAL}",
                                      speedup >= HIERARCHY_GOAL, target.bytes),
        "u16 ring / f32 ring": Goal(halved, f"{RING16_GOAL} ± {RING16_TOLERANCE}",
                                    abs(halved - RING16_GOAL) <= RING16_TOLERANCE),
    }


def summary_lines(run: ClusterRun) -> list[str]:
    """The measured times beside the models, then the goals."""
    hosts, devices, rate = _shape(run)
    lines = [f"{hosts} hosts × {devices} devices, each host's link {rate_label(run.link_rate)} "
             f"({rate / 1e6:.1f} MB/s, TCP {run.tcp}); times in ms, measured / model"]
    for row, hier, ring in zip(run.collectives, run.hierarchy, run.ring16):
        n = row.bytes
        cells = [f"{k} {row.time(k) * 1e3:.1f}/"
                 f"{link_time_s(k, n, hosts, devices, rate) * 1e3:.1f}" for k in COLLECTIVES]
        model = link_time_s("hierarchical", n, hosts, devices, rate)
        flat = collective_time(n, hosts * devices, alpha_s=0.0, bandwidth_bytes_per_s=rate,
                               algorithm="ring")
        lines.append(f"{format_bytes(n):>8s}: " + ", ".join(cells)
                     + f"; two-level {hier.hierarchical * 1e3:.1f}/{model * 1e3:.1f}"
                     + f"; ring f32 {ring.f32 * 1e3:.1f}, u16 {ring.u16 * 1e3:.1f}"
                     + f" (collective_time ring {flat * 1e3:.1f})")
    b = run.buckets
    lines.append(f"bucketing: {b.count} all-reduces of {format_bytes(b.bytes)} "
                 f"{b.separate * 1e3:.1f} ms, one bucket {b.one_bucket * 1e3:.1f} ms")
    counts = counted_against_model(run)
    if counts is not None:
        lines.append(f"bytes over host 0's link per call at {format_bytes(counts['bytes'])}, "
                     "counted / ring model: " + ", ".join(
                         f"{k} {c['counted'] / 2**20:.2f}/{c['model'] / 2**20:.2f} MiB "
                         f"({c['counted'] / c['model']:.2f})"
                         for k, c in counts.items() if k != "bytes"))
        lines.append("rates fitted from the ring model's bytes instead: "
                     + _gaps_text({k: f["model_gap"] for k, f in fits(run).items()}))
    t = run.training
    lines.append(f"training step: data parallelism {t.dp_step * 1e3:.1f} ms, local SGD "
                 f"H={t.local_steps} {t.local_sgd_step * 1e3:.1f} ms (local step "
                 f"{t.local_step * 1e3:.1f} ms + averaging {t.averaging * 1e3:.1f} ms "
                 f"/ {t.local_steps})")
    for name, goal in goals(run).items() if run.link_rate == GOAL_RATE else ():
        value = goal.value
        # four decimals: a ratio a hair below its goal must not print as the goal itself
        shown = _gaps_text(value) if isinstance(value, dict) else f"{value:.4f}"
        lines.append(f"goal {name} ({goal.target}): {shown} — "
                     f"{'MET' if goal.met else 'NOT MET'}")
    return lines


PANELS = ("collectives", "hierarchy", "rings", "speedup")


def figure_data(results: ClusterResults, rate: str | None = None,
                panels: tuple[str, ...] = PANELS) -> dict:
    """The run at ``rate`` (default: the first): the collectives, flat against two-level, the two
    rings, measured (markers) against the link model (dashed, in the measurement's colour; one
    grey labelled line where two collectives share a model); with several rates a fourth panel,
    the two-level schedule's speed-up against the rate. ``panels`` picks some of ``PANELS``."""
    unknown = sorted(set(panels) - set(PANELS))
    if unknown:
        raise ValueError(f"panels must be among {', '.join(PANELS)}; got {', '.join(unknown)}")
    run = next(r for r in results.runs if rate in (None, r.link_rate))
    hosts, devices, bytes_per_s = _shape(run)
    sizes = [r.bytes for r in run.collectives]

    def model(kind):
        return [link_time_s(kind, n, hosts, devices, bytes_per_s) * 1e3 for n in sizes]

    def panel(title, series):
        return {"kind": "line", "title": title, "x": sizes, "xscale": "log", "yscale": "log",
                "xunit": "bytes", "xlabel": "vector per device", "ylabel": "time (ms)",
                "series": series}

    def pair(label, measured, modelled, color):
        line = {"label": label, "y": [t * 1e3 for t in measured], "color": color}
        dashed = {"label": f"{label}, link model", "y": modelled, "style": "model", "color": color}
        return [line] + ([dashed] if modelled else [])

    collectives = [s for i, k in enumerate(COLLECTIVES)
                   for s in pair(k, [r.time(k) for r in run.collectives], None, f"C{i}")]
    sharing = {}  # kinds by model curve: reduce-scatter's and all-gather's are the same line
    for k in COLLECTIVES:
        sharing.setdefault(tuple(model(k)), []).append(k)
    for curve, kinds in sharing.items():
        alone = len(kinds) == 1
        collectives.append({"y": list(curve), "style": "model",
                            "color": f"C{COLLECTIVES.index(kinds[0])}" if alone else "0.4",
                            "label": "link model: " + " = ".join(kinds)})
    hierarchy = (pair("flat", [r.flat for r in run.hierarchy], model("all_reduce"), "C0")
                 + pair("two-level", [r.hierarchical for r in run.hierarchy],
                        model("hierarchical"), "C1"))
    rings = (pair("f32 messages", [r.f32 for r in run.ring16], model("all_reduce"), "C0")
             + pair("u16 messages", [r.u16 for r in run.ring16],
                    [t / 2 for t in model("all_reduce")], "C1"))
    where = f"{hosts} hosts × {devices}, {rate_label(run.link_rate)}"
    chosen = {"collectives": panel(f"collectives, {where} (dashed: model)", collectives),
              "hierarchy": panel(f"flat against two-level, {hosts} × {devices}, "
                                 f"{rate_label(run.link_rate)}", hierarchy),
              "rings": panel("hand-built ring all-reduce", rings)}
    if len(results.runs) > 1 and "speedup" in panels:
        rates = [rate_bytes_per_s(r.link_rate) * 8 / 1e6 for r in results.runs]
        rows = [_at_goal_size(r.hierarchy) for r in results.runs]
        speedup = [h.flat / h.hierarchical for h in rows]
        chosen["speedup"] = {
            "kind": "line", "title": f"two-level speed-up at {format_bytes(rows[0].bytes)}",
            "x": rates, "xscale": "log", "hline": 1, "xlabel": "link rate (Mbit/s)",
            "ylabel": "flat time / two-level time",
            "series": [{"label": "two-level speed-up, measured", "y": speedup},
                       {"label": "two-level speed-up, link model", "style": "model",
                        "y": [link_bytes("all_reduce", GOAL_BYTES, hosts, devices)
                              / link_bytes("hierarchical", GOAL_BYTES, hosts, devices)]
                        * len(rates)}]}
    return {"panels": [chosen[name] for name in panels if name in chosen]}


def load_cluster_results(path: str | Path) -> ClusterResults:
    """The ``course cluster`` run saved in ``path`` (a ``cluster.json``).

    Raises:
        ValueError: the file is missing or not a ``course cluster`` run (the message names the
            file and the field).
    """
    return load(ClusterResults, path)


def saved_cluster_results(shape: str) -> ClusterResults:
    """A saved ``course cluster --plan full`` run, ``shape`` ``"2x2"`` or ``"2x4"`` (hosts ×
    devices per host), or ``"2x2_bbr"``, from ``course_utils/saved/cluster_<shape>.json``.
    Regenerate (as root): ``course cluster --plan full --link-rate 50mbit,200mbit,1gbit,10gbit
    --out build/c22`` (and ``--devices-per-host 4 --link-rate 200mbit,1gbit``; ``--tcp bbr
    --link-rate 200mbit``), then copy ``cluster.json``."""
    return load_saved(ClusterResults, f"cluster_{shape}.json", "course cluster --plan full")


def per_message_s(results: ClusterResults, messages: int) -> dict[str, float]:
    """α by link rate, for a collective of ``messages`` message steps: the fixed cost of one more
    all-reduce call in the run's bucket test (many small calls against one bucket of the same
    bytes), spread evenly over the call's message steps. It mixes per-call setup with
    per-message latency, which the test does not separate (step 17)."""
    if messages < 1:
        raise ValueError(f"messages must be at least 1, got {messages}")
    return {run.link_rate: (run.buckets.separate - run.buckets.one_bucket)
            / (run.buckets.count - 1) / messages for run in results.runs}
