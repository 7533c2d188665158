"""Part five's timed runs (``course cluster --measure diloco``, ``diloco_cluster.json``): time
per inner step and the bytes over a host's link, for the step with nothing sent, data
parallelism, DiLoCo (float32, int8, int4) and Streaming DiLoCo, at each H and link rate, in
each of several runs of one plan; and each method's one sync alone.

The model of a round (H inner steps, F syncs of one fragment each): H steps of compute + the
part of each sync not hidden, a sync overlapping τ steps hiding min(sync, τ steps of compute)
(``round_time``). The compute is the measured step with nothing sent; a sync's seconds are its
bytes over a host's link (``sync_link_bytes``, from ``diloco.sync_traffic``; data parallelism's:
``dp_adamw``'s step traffic) at the rate's payload share (``models.step.step_time``). A method is
a registry name (``MethodRow``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from course_utils.models.cost_model import Topology
from course_utils.models.link_traffic import Traffic
from course_utils.results.cluster import ClusterSetup
from course_utils.results.meta import RunMeta
from course_utils.results.overlap import Spread, spread
from course_utils.results.records import load, load_saved
from course_utils.training.strategies import DATA_PARALLEL, DILOCO, Sync, saved_in, spec

NOTHING_SENT = "nothing_sent"
# the registry's inner steps (DiLoCo's) and the DATA_PARALLEL rounds' (the curves' baseline)
INNER, (BASELINE,) = DILOCO, saved_in("streaming.json", "baseline")
SAVED = "diloco_cluster.json"
COMMAND = ("course cluster --measure diloco --plan full --link-rate 10mbit,50mbit,200mbit,1gbit "
           "--runs 3")


@dataclass(frozen=True)
class Measured:
    """What a method's sync was when it was measured: the format (``dtype``), F
    (``fragments``) and τ (``overlap``); α is the run's ``DilocoSizes.mixing``."""

    dtype: str
    fragments: int
    overlap: int

    @classmethod
    def of(cls, sync: Sync) -> Measured:
        """The settings of the registry's ``sync``."""
        return cls(sync.dtype, sync.fragments, sync.overlap)


@dataclass(frozen=True)
class MethodRow:
    """One method of syncing every H inner steps: the registry's strategy ``name``, whose
    ``Sync`` (``sync``, the one lookup) says the rest: what each outer-gradient value crosses
    the link as (``dtype``: float32, int8, or int4 two codes a byte, with an f32 scale per
    block: ``training.quantize``), the F fragments synced one at a time (``fragments``), the τ
    inner steps each sync overlaps (``overlap``; 0: the compute waits) and the local share α
    when a fragment merges (``mixing``). A saved run keeps what it measured (``measured``);
    a registry that says otherwise now is refused in one line, not modelled anew.

    Examples:
        >>> m = MethodRow("streaming_diloco")
        >>> m.dtype, m.fragments, m.overlap, m.mixing
        ('int4', 4, 1, 0.5)
        >>> MethodRow("streaming_diloco", Measured("int4", 2, 1))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: streaming_diloco was measured as ...fragments=2..., the registry now says ...
    """

    name: str
    measured: Measured | None = None

    def __post_init__(self):
        if self.measured is not None and self.measured != Measured.of(self.sync):
            raise ValueError(f"{self.name} was measured as {self.measured}, the registry now "
                             f"says {Measured.of(self.sync)}: measure it again (course cluster "
                             "--measure diloco)")

    @property
    def sync(self) -> Sync:
        """The strategy's ``Sync`` in the registry (``training.strategies.spec``)."""
        return spec(self.name).sync

    @property
    def dtype(self) -> str:
        """``Sync.dtype``: what the outer gradient crosses the link as."""
        return self.sync.dtype

    @property
    def fragments(self) -> int:
        """``Sync.fragments``: F."""
        return self.sync.fragments

    @property
    def overlap(self) -> int:
        """``Sync.overlap``: τ."""
        return self.sync.overlap

    @property
    def mixing(self) -> float:
        """``Sync.mixing``: α."""
        return self.sync.mixing


@dataclass(frozen=True)
class RoundRow:
    """One run at one link rate of ``method`` at H = ``local_steps`` (data parallelism: 1):
    the median seconds per inner step, and the bytes host 0's link sent per inner step
    (``None`` without its counter)."""

    method: str
    local_steps: int
    link_rate: str
    run: int
    step_s: float
    link_bytes: float | None = None


@dataclass(frozen=True)
class SyncRow:
    """One run at one link rate of ``method``'s one sync alone (Streaming DiLoCo's: one
    fragment's): its median seconds and the bytes host 0's link sent for it."""

    method: str
    link_rate: str
    run: int
    sync_s: float
    sync_bytes: float | None = None

    @property
    def link_limited(self) -> bool | None:
        """Whether the sync does not fit in tbf's bucket (``links.link_limits``)."""
        from course_utils.models.links import link_limits

        return None if self.sync_bytes is None else link_limits(self.sync_bytes, self.link_rate)


@dataclass(frozen=True)
class DilocoSizes:
    """The flat parameter vector's length ``n`` (padded), the rows per host and inner step, and
    the share of its own values a replica keeps when a fragment is merged after an overlap."""

    n: int
    batch_size: int
    mixing: float


@dataclass(frozen=True)
class DilocoClusterResults:
    """What ``diloco_cluster.json`` holds: how it was made (``meta.runs``: the runs of the
    plan), on which cluster, the sizes, the methods, and every run's rounds and syncs."""

    meta: RunMeta
    cluster: ClusterSetup
    sizes: DilocoSizes
    methods: tuple[MethodRow, ...]
    rounds: tuple[RoundRow, ...]
    syncs: tuple[SyncRow, ...]


def rates(results: DilocoClusterResults) -> list[str]:
    """The link rates measured, in the order they ran."""
    return list(dict.fromkeys(row.link_rate for row in results.rounds))


def local_steps(results: DilocoClusterResults) -> list[int]:
    """The H values of the rounds."""
    return sorted({r.local_steps for r in results.rounds if r.method == NOTHING_SENT})


def method(results: DilocoClusterResults, name: str) -> MethodRow:
    """The method ``name`` of the run.

    Raises:
        ValueError: the run has no such method (the message lists those it has).
    """
    found = next((m for m in results.methods if m.name == name), None)
    if found is None:
        raise ValueError(f"no method {name!r} in this run; it has "
                         f"{', '.join(m.name for m in results.methods)}")
    return found


def _over_runs(values: list[float], what: str) -> Spread:
    if not values:
        raise ValueError(f"no run of {what}")
    return spread(values)


def step(results: DilocoClusterResults, name: str, h: int, link_rate: str) -> Spread:
    """Seconds per inner step of ``name`` at H = ``h`` (data parallelism: any ``h``) and
    ``link_rate``: the median over the runs, with their smallest and largest."""
    h = 1 if name == DATA_PARALLEL else h
    return _over_runs([r.step_s for r in results.rounds
                       if (r.method, r.local_steps, r.link_rate) == (name, h, link_rate)],
                      f"{name} at H = {h} and {link_rate}")


def counted_bytes(results: DilocoClusterResults, name: str, h: int, link_rate: str) -> Spread:
    """Bytes host 0's link sent per inner step of ``name`` at H = ``h`` and ``link_rate``, over
    the runs (a run without the counter is left out)."""
    h = 1 if name == DATA_PARALLEL else h
    return _over_runs([r.link_bytes for r in results.rounds if r.link_bytes is not None
                       and (r.method, r.local_steps, r.link_rate) == (name, h, link_rate)],
                      f"{name}'s counted bytes at H = {h} and {link_rate}")


def sync(results: DilocoClusterResults, name: str, link_rate: str, key: str = "sync_s"
         ) -> Spread:
    """``name``'s one sync alone at ``link_rate`` over the runs: its seconds (``key``
    ``"sync_s"``) or its bytes over host 0's link (``"sync_bytes"``)."""
    return _over_runs([getattr(r, key) for r in results.syncs if getattr(r, key) is not None
                       and (r.method, r.link_rate) == (name, link_rate)],
                      f"{name}'s sync at {link_rate}")


def sync_link_bytes(m: MethodRow, n: int, hosts: int) -> float:
    """The model's bytes over one host's link for one sync of ``m``: the exchange of one
    fragment (n/F values) among the hosts, one device each (``diloco.sync_traffic``: a ring
    all-reduce in float32; in int8 or int4, codes and a scale per block both ways).

    Examples:
        >>> sync_link_bytes(MethodRow("diloco"), 1024, 2)  # 2 · (1/2) · 4 KiB
        4096.0
        >>> sync_link_bytes(MethodRow("streaming_diloco"), 1024, 2)  # 256 int4: 128 B + 4 scales
        144.0
    """
    return _sync_traffic(m, n, hosts).link_bytes


def _sync_traffic(m: MethodRow, n: int, hosts: int) -> Traffic:
    """One sync of ``m`` among ``hosts`` of one device: the registry's model of the strategy's
    one sync (``diloco.sync_traffic``, which its per-step ``StrategySpec.traffic`` reads)."""
    return m.sync.outer.traffic(n, Topology(hosts, 1))


def round_time(compute_s: float, sync_s: float, *, local_steps: int, fragments: int,
               overlap: int) -> float:
    """Seconds of one round: ``local_steps`` inner steps of ``compute_s`` and ``fragments``
    syncs of ``sync_s`` each, every one hiding behind the ``overlap`` inner steps it overlaps
    as much as it can (min(sync, τ · compute)).

    Examples:
        >>> round_time(0.1, 0.5, local_steps=16, fragments=1, overlap=0)  # DiLoCo: 1.6 + 0.5
        2.1
        >>> round_time(0.1, 0.15, local_steps=16, fragments=4, overlap=2)  # each sync hidden
        1.6
        >>> round(round_time(0.1, 0.25, local_steps=16, fragments=4, overlap=2), 6)  # 0.05 not
        1.8
    """
    hidden = min(sync_s, overlap * compute_s)
    return local_steps * compute_s + fragments * (sync_s - hidden)


def modelled_step_s(results: DilocoClusterResults, name: str, h: int, link_rate: str,
                    alpha_s: float = 0.0, *, sync_alone: bool = False) -> float:
    """The model's seconds per inner step of ``name`` at H = ``h`` and ``link_rate``: the
    measured step with nothing sent (its median over the runs at that H; data parallelism's:
    over every H) and each sync's bytes over the link at the rate's payload share, with
    ``alpha_s`` per message step (``models.step.step_time``), in ``round_time``. With
    ``sync_alone``, each sync's seconds are its sync timed alone at that rate (the median over
    the runs): what the link and TCP gave it, so that only how the round adds up is modelled
    (data parallelism has no sync timed alone: a ``ValueError``)."""
    from course_utils.models.links import payload_bytes_per_s
    from course_utils.models.step import step_time
    from course_utils.training.traffic import strategy_traffic

    hosts, n = results.cluster.hosts, results.sizes.n
    bytes_per_s = payload_bytes_per_s(link_rate)
    if name == NOTHING_SENT:
        return step(results, name, h, link_rate).median
    if name == DATA_PARALLEL:  # the registry's data parallelism: its step's traffic, every step
        compute = statistics.median(step(results, NOTHING_SENT, k, link_rate).median
                                    for k in local_steps(results))
        m, h = MethodRow(BASELINE), 1
        traffic = strategy_traffic(BASELINE, n, Topology(hosts, 1))
    else:
        compute, m = step(results, NOTHING_SENT, h, link_rate).median, method(results, name)
        traffic = _sync_traffic(m, n, hosts)
    sync_s = (sync(results, name, link_rate).median if sync_alone else step_time(
        traffic, 0.0, alpha_s=alpha_s, bytes_per_s=bytes_per_s).communication_s)
    return round_time(compute, sync_s, local_steps=h, fragments=m.fragments,
                      overlap=m.overlap) / h


class Figure(NamedTuple):
    """A figure measured in every run (``value``: median and range over the runs) against
    its ``target``, met when the median is within ``tolerance`` of it (as a fraction)."""

    value: Spread
    target: float
    tolerance: float

    @property
    def met(self) -> bool:
        """Whether the median is within the tolerance of the target."""
        return abs(self.value.median / self.target - 1) <= self.tolerance


def _run_values(results: DilocoClusterResults, key, link_rate: str) -> dict[int, dict]:
    """By run: ``key(row)`` of every round (by (method, H)) and sync (by method) at the rate."""
    runs: dict[int, dict] = {}
    for r in results.rounds:
        if r.link_rate == link_rate:
            runs.setdefault(r.run, {})[(r.method, r.local_steps)] = key(r)
    for r in results.syncs:
        if r.link_rate == link_rate:
            runs.setdefault(r.run, {})[r.method] = key(r)
    return runs


def ratio(results: DilocoClusterResults, top, bottom, link_rate: str, key) -> Spread:
    """``key`` of ``top`` over ``key`` of ``bottom`` in each run at ``link_rate`` (a round is
    ``(method, H)``, data parallelism's ``(DATA_PARALLEL, 1)``; a sync alone its method's
    name; ``key(row)`` a row's figure), over the runs.

    Raises:
        ValueError: no run has both.
    """
    values = [v[top] / v[bottom] for v in _run_values(results, key, link_rate).values()
              if v.get(top) is not None and v.get(bottom) is not None]
    return _over_runs(values, f"{top} and {bottom} at {link_rate}")


def byte_goals(results: DilocoClusterResults, h: int, link_rate: str) -> dict[str, Figure]:
    """The counters' goals at H = ``h`` and ``link_rate``, each within 5 %: DiLoCo's bytes per
    inner step against data parallelism's / H; Streaming DiLoCo's largest single sync (one
    fragment) against DiLoCo's in the same format / F; DiLoCo's int8 and int4 syncs against
    its float32 sync, whose target is the model's ratio (1/4 and 1/8 plus the scales)."""
    streaming = next(m for m in results.methods if m.fragments > 1)
    whole = next(m for m in results.methods if m.fragments == 1 and m.dtype == streaming.dtype)
    n, hosts = results.sizes.n, results.cluster.hosts

    def counted(row):
        return row.link_bytes if isinstance(row, RoundRow) else row.sync_bytes

    f32 = next(m for m in results.methods if m.fragments == 1 and m.dtype == "float32")
    goals = {
        "DiLoCo / data parallelism, bytes per inner step": Figure(ratio(
            results, (f32.name, h), (DATA_PARALLEL, 1), link_rate, counted), 1 / h, 0.05),
        f"Streaming / DiLoCo ({streaming.dtype}), largest single sync": Figure(ratio(
            results, streaming.name, whole.name, link_rate, counted), 1 / streaming.fragments,
            0.05)}
    for m in results.methods:
        if m.fragments == 1 and m.dtype != "float32":
            goals[f"{m.dtype} / float32, one sync"] = Figure(
                ratio(results, m.name, f32.name, link_rate, counted),
                sync_link_bytes(m, n, hosts) / sync_link_bytes(f32, n, hosts), 0.05)
    return goals


def hidden_syncs(results: DilocoClusterResults) -> list[tuple[str, int, Figure]]:
    """``(rate, H, Streaming DiLoCo's inner step / the step with nothing sent)`` where its
    fragment's sync alone (median) needs at most half the compute of the τ inner steps it
    overlaps; the target is 1, the tolerance 15 %."""
    streaming = next(m for m in results.methods if m.fragments > 1)
    found = []
    for rate in rates(results):
        for h in local_steps(results):
            compute = step(results, NOTHING_SENT, h, rate).median
            if sync(results, streaming.name, rate).median <= 0.5 * streaming.overlap * compute:
                found.append((rate, h, Figure(ratio(
                    results, (streaming.name, h), (NOTHING_SENT, h), rate,
                    lambda r: getattr(r, "step_s", None)), 1.0, 0.15)))
    return found


def model_gaps(results: DilocoClusterResults, *, sync_alone: bool = False
               ) -> list[tuple[str, int, str, float]]:
    """``(rate, H, method, model / measured − 1)`` of every round (data parallelism's once a
    rate, at H = 1; with ``sync_alone``, not at all): the model's seconds per inner step
    (``modelled_step_s``) against the median of the runs."""
    cells = [(rate, 1, DATA_PARALLEL) for rate in rates(results)] + [
        (rate, h, m.name) for rate in rates(results) for h in local_steps(results)
        for m in results.methods]
    return [(rate, h, name, modelled_step_s(results, name, h, rate, sync_alone=sync_alone)
             / step(results, name, h, rate).median - 1) for rate, h, name in cells
            if not (sync_alone and name == DATA_PARALLEL)]


def load_diloco_cluster(path: str | Path) -> DilocoClusterResults:
    """The run saved in ``path`` (a ``diloco_cluster.json``).

    Raises:
        ValueError: the file is missing or not such a run (one line naming the file and the
            field).
    """
    return load(DilocoClusterResults, path, f"regenerate it with {COMMAND} (a run whose methods "
                "hold their dtype: python scripts/convert_diloco_cluster.py PATH)")


def saved_diloco_cluster() -> DilocoClusterResults:
    """The saved full runs, ``course_utils/saved/diloco_cluster.json``. Regenerate (as root,
    on a quiet machine): ``course cluster --measure diloco --plan full --link-rate
    10mbit,50mbit,200mbit,1gbit --runs 3 --timeout 5400 --out build/diloco``, then copy
    ``build/diloco/diloco_cluster.json`` here."""
    return load_saved(DilocoClusterResults, SAVED, COMMAND)
