"""The α-β cost model of the collectives: one table, in SI units (seconds, bytes, bytes/s).

For each collective (all-reduce, reduce-scatter, all-gather) and algorithm the table
(``schedule``) lists the message steps and the fraction of N (the whole vector) each rank sends
per step; everything else derives from it: the bytes each rank sends (``bytes_sent``), the
steps (``message_steps``), the time (α per step + bytes / B, ``modelled_time``), nccl-tests'
bus-bandwidth factor (``bus_factor``) and the bytes a host sends over its links
(``link_bytes_sent``); ``ring_bytes``, ``ring_steps`` and ``ring_time`` tabulate the ring's.

The algorithms, for p ranks and L = ⌈log₂ p⌉ (exact for p a power of two; for other p those
algorithms need extra steps and L is an approximation), after Patarasuk & Yuan (2009) and
Thakur, Rabenseifner & Gropp (2005):

- ``ring``: p − 1 steps of N/p per pass; the all-reduce is a reduce-scatter then an all-gather;
- ``recursive_doubling``: L steps with a partner at distance 1, 2, 4, …; the all-reduce
  exchanges the whole vector every step, the all-gather doubles what it sends (1/p, 2/p, …);
- ``halving_doubling`` (Rabenseifner): recursive-halving reduce-scatter (1/2, 1/4, … of N) and
  recursive-doubling all-gather;
- ``tree``: a binomial tree, the whole vector at every step (the all-reduce: reduce then
  broadcast);
- ``two_level`` on hosts × devices: ring inside each host, a ring across the hosts of each
  1/devices slice (all devices of a host send at once), ring inside each host again;
- ``parallel_rings`` (NCCL's channels): l = ``topology.adapters`` rings at once, each over all p
  ranks with N/l, so each host uses its l adapters.

The topology (``Topology``: hosts × devices, ranks numbered host by host, ``adapters`` links per
host) says which steps cross a host's link: a ring step sends one chunk across each host
boundary; a butterfly step at distance ≥ devices sends every rank's message across. A step takes
α plus the longer of its rank's own send (``fraction``·N at the local rate) and its host's
traffic (``crossing``·N over min(streams, adapters) links at the link rate).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Callable, NamedTuple

from course_utils.validate import positive_int

COLLECTIVES = ("all_reduce", "reduce_scatter", "all_gather")
# the flat algorithms over p ranks (``collective_time``'s choice, notebook 12's columns)
ALGORITHMS = ("ring", "recursive_doubling", "halving_doubling", "tree")
# the algorithms that use the hosts × devices topology
TOPOLOGY_ALGORITHMS = ("two_level", "parallel_rings")


class Topology(NamedTuple):
    """Ranks as ``hosts`` × ``devices`` (numbered host by host), ``adapters`` links per host.

    Examples:
        >>> Topology(2, 4).ranks
        8
    """

    hosts: int
    devices: int
    adapters: int = 1

    @property
    def ranks(self) -> int:
        """p = hosts · devices."""
        return self.hosts * self.devices


class Phase(NamedTuple):
    """``steps`` message steps alike: each rank sends ``fraction`` of N per step; ``crossing``
    of N leaves each host per step, in ``streams`` messages that can use separate adapters.

    Examples:
        >>> schedule("reduce_scatter", "ring", Topology(1, 4))
        (Phase(steps=3, fraction=0.25, crossing=0.0, streams=1),)
    """

    steps: int
    fraction: float
    crossing: float = 0.0
    streams: int = 1


def _ring(t: Topology, passes: int) -> tuple[Phase, ...]:
    p = t.ranks
    crossing = 1 / p if t.hosts > 1 else 0.0  # one chunk crosses each host boundary per step
    return (Phase(passes * (p - 1), 1 / p, crossing),) if p > 1 else ()


def _butterfly(t: Topology, fractions: list[float], distances: list[int], senders: int):
    """One step per partner distance; a step at distance ≥ devices crosses the hosts' links
    with ``senders`` of each host's ranks sending (all of them, or one in a tree)."""
    if t.ranks & (t.ranks - 1):  # p not a power of two: the same totals, spread evenly
        fractions = [sum(fractions) / len(fractions)] * len(fractions)
    phases = []
    for f, d in zip(fractions, distances):
        cross = t.hosts > 1 and d >= t.devices
        phases.append(Phase(1, f, senders * f if cross else 0.0, senders if cross else 1))
    return tuple(phases)


def _levels(p: int) -> list[int]:
    return [2**k for k in range(math.ceil(math.log2(p)))] if p > 1 else []


def _recursive(t: Topology, collective: str) -> tuple[Phase, ...]:
    p, up = t.ranks, _levels(t.ranks)
    if collective == "all_reduce":  # the whole vector, L steps
        return _butterfly(t, [1.0] * len(up), up, t.devices)
    if collective == "all_gather":  # 1/p, 2/p, … at distance 1, 2, …
        return _butterfly(t, [d / p for d in up], up, t.devices)
    raise ValueError("recursive_doubling has no reduce-scatter here; use halving_doubling")


def _halving(t: Topology, collective: str) -> tuple[Phase, ...]:
    p, up = t.ranks, _levels(t.ranks)
    halve = _butterfly(t, [d / p for d in reversed(up)], list(reversed(up)), t.devices)
    double = _butterfly(t, [d / p for d in up], up, t.devices)
    return {"reduce_scatter": halve, "all_gather": double, "all_reduce": halve + double}[
        collective
    ]


def _tree(t: Topology, collective: str) -> tuple[Phase, ...]:
    up = _levels(t.ranks)
    reduce = _butterfly(t, [1.0] * len(up), up, 1)
    broadcast = _butterfly(t, [1.0] * len(up), list(reversed(up)), 1)
    if collective != "all_reduce":
        raise ValueError("tree is an all-reduce here (reduce, then broadcast); use ring")
    return reduce + broadcast


def _two_level(t: Topology, collective: str) -> tuple[Phase, ...]:
    h, d = t.hosts, t.devices
    inside = (Phase(d - 1, 1 / d),) if d > 1 else ()
    passes = 2 if collective == "all_reduce" else 1
    # each device sends its 1/d slice around the hosts' ring: d messages leave a host per step
    across = (Phase(passes * (h - 1), 1 / (d * h), 1 / h, d),) if h > 1 else ()
    return {"reduce_scatter": inside + across, "all_gather": across + inside,
            "all_reduce": inside + across + inside}[collective]


def _parallel_rings(t: Topology, collective: str) -> tuple[Phase, ...]:
    lanes = t.adapters
    return tuple(ph._replace(streams=lanes) for ph in _ring(t, _PASSES[collective]))


_PASSES = {"all_reduce": 2, "reduce_scatter": 1, "all_gather": 1}
_TABLE: dict[str, Callable[[Topology, str], tuple[Phase, ...]]] = {
    "ring": lambda t, c: _ring(t, _PASSES[c]),
    "recursive_doubling": _recursive,
    "halving_doubling": _halving,
    "tree": _tree,
    "two_level": _two_level,
    "parallel_rings": _parallel_rings,
}


def schedule(collective: str, algorithm: str, topology: Topology) -> tuple[Phase, ...]:
    """The table: the phases of ``collective`` run by ``algorithm`` on ``topology``.

    Args:
        collective: one of ``COLLECTIVES``.
        algorithm: one of ``ALGORITHMS`` or ``TOPOLOGY_ALGORITHMS``.
        topology: the ranks, as ``Topology(hosts, devices, adapters)``.

    Examples:
        >>> schedule("all_reduce", "two_level", Topology(2, 2))  # doctest: +NORMALIZE_WHITESPACE
        (Phase(steps=1, fraction=0.5, crossing=0.0, streams=1),
         Phase(steps=2, fraction=0.25, crossing=0.5, streams=2),
         Phase(steps=1, fraction=0.5, crossing=0.0, streams=1))
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, got {collective!r}")
    if algorithm not in _TABLE:
        raise ValueError(f"algorithm must be one of {', '.join(_TABLE)}, got {algorithm!r}")
    for name in ("hosts", "devices", "adapters"):
        positive_int(name, getattr(topology, name))
    return _TABLE[algorithm](topology, collective)


def _flat(ranks: int) -> Topology:
    return Topology(1, positive_int("ranks", ranks))


def _times(nbytes: float, parts: list[tuple[int, float]]) -> float:
    """``nbytes`` · Σ steps · fraction, summed as exact fractions (the fractions are k/p or k/2^j),
    so that (p − 1)/p · N is the same float however the steps add up (5 · 1/6 · N is not)."""
    total = sum(steps * Fraction(f).limit_denominator(1 << 20) for steps, f in parts)
    return float(total * Fraction(nbytes))


def message_steps(collective: str, algorithm: str, topology: Topology) -> int:
    """Message steps: the latency term's multiplier.

    Examples:
        >>> flat = Topology(1, 8)
        >>> message_steps("all_reduce", "ring", flat), message_steps("all_reduce", "tree", flat)
        (14, 6)
    """
    return sum(ph.steps for ph in schedule(collective, algorithm, topology))


def bytes_sent(collective: str, algorithm: str, nbytes: float, topology: Topology) -> float:
    """Bytes each rank sends for one collective over a vector of ``nbytes``.

    Examples:
        >>> bytes_sent("all_reduce", "ring", 1024, Topology(1, 4))
        1536.0
    """
    phases = schedule(collective, algorithm, topology)
    return _times(nbytes, [(ph.steps, ph.fraction) for ph in phases])


def link_bytes_sent(collective: str, algorithm: str, nbytes: float, topology: Topology) -> float:
    """Bytes one host sends over its links (all its adapters) for one collective.

    Examples:
        >>> [link_bytes_sent("all_reduce", a, 1024, Topology(2, 2)) for a in ("ring", "two_level")]
        [1536.0, 1024.0]
    """
    phases = schedule(collective, algorithm, topology)
    return _times(nbytes, [(ph.steps, ph.crossing) for ph in phases])


def modelled_time(
    collective: str,
    algorithm: str,
    nbytes: float,
    topology: Topology,
    *,
    alpha_s: float,
    bytes_per_s: float,
    local_bytes_per_s: float | None = None,
) -> float:
    """Modelled seconds: per step α plus the longer of the rank's send at ``local_bytes_per_s``
    (default ``bytes_per_s``) and its host's crossing bytes over its links at ``bytes_per_s``.

    Examples:
        >>> modelled_time("all_reduce", "ring", 1e9, Topology(1, 4), alpha_s=0, bytes_per_s=1e9)
        1.5
    """
    local = bytes_per_s if local_bytes_per_s is None else local_bytes_per_s
    if nbytes < 0 or alpha_s < 0 or bytes_per_s <= 0 or local <= 0:
        raise ValueError(
            "need nbytes >= 0, alpha_s >= 0 and bandwidths > 0; got "
            f"{nbytes}, {alpha_s}, {bytes_per_s}, {local}"
        )
    # fractions of N per rate, summed before dividing: equal bytes give equal times exactly
    per_rate: dict[float, float] = {}
    n_steps = 0
    for ph in schedule(collective, algorithm, topology):
        links = min(ph.streams, topology.adapters) * bytes_per_s
        rate, share = max((local, ph.fraction), (links, ph.crossing),
                          key=lambda term: term[1] / term[0])
        per_rate[rate] = per_rate.get(rate, 0.0) + ph.steps * share
        n_steps += ph.steps
    return n_steps * alpha_s + sum(share * (nbytes / rate) for rate, share in per_rate.items())


def bus_factor(collective: str, ranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: the ring's bytes per rank over N, 2(p−1)/p for
    all-reduce and (p−1)/p for reduce-scatter and all-gather.

    Examples:
        >>> bus_factor("all_reduce", 4), bus_factor("all_gather", 4)
        (1.5, 0.75)
    """
    return bytes_sent(collective, "ring", 1.0, _flat(ranks))


class PerCollective(NamedTuple):
    """A quantity of each ring collective (bytes, steps or seconds).

    Examples:
        >>> ring_bytes(32, 4).all_reduce
        48.0
    """

    reduce_scatter: float
    all_gather: float
    all_reduce: float


def ring_bytes(nbytes: int, ranks: int) -> PerCollective:
    """Bytes each rank sends in a ring collective over an array of ``nbytes``: (p−1)/p·N for
    reduce-scatter and all-gather, 2(p−1)/p·N for all-reduce, being both.

    Examples:
        >>> ring_bytes(32, 4)
        PerCollective(reduce_scatter=24.0, all_gather=24.0, all_reduce=48.0)
    """
    nbytes, t = positive_int("nbytes", nbytes, low=0), _flat(ranks)
    return PerCollective(*(bytes_sent(c, "ring", nbytes, t) for c in PerCollective._fields))


def ring_steps(ranks: int) -> PerCollective:
    """Message steps of the ring collectives: p−1 per pass, 2(p−1) for the all-reduce. Each
    step costs at least one latency α, whatever the message size.

    Examples:
        >>> ring_steps(4)
        PerCollective(reduce_scatter=3, all_gather=3, all_reduce=6)
    """
    t = _flat(ranks)
    return PerCollective(*(message_steps(c, "ring", t) for c in PerCollective._fields))


def ring_time(nbytes: float, ranks: int, *, alpha_s: float, bytes_per_s: float) -> PerCollective:
    """The α-β seconds of the ring collectives: for the all-reduce
    T = 2(p−1)·α + 2(p−1)/p·N/B; reduce-scatter and all-gather take half of each term.

    Examples:
        >>> ring_time(4_000_000, 4, alpha_s=1e-5, bytes_per_s=1e9).all_reduce
        0.00606
    """
    t = _flat(ranks)
    rates = {"alpha_s": alpha_s, "bytes_per_s": bytes_per_s}
    return PerCollective(*(modelled_time(c, "ring", nbytes, t, **rates)
                           for c in PerCollective._fields))
