"""The α-β model with its latency term: all-reduce algorithms, buckets of gradients, and the
two-level schedule on nodes × devices. Each function is a few lines over ``cost_model``'s table
(its docstring lists the algorithms' steps and bytes).

An all-reduce of ``n`` bytes over ``p`` ranks, each message costing ``α`` to start and ``1/B`` per
byte (reduction arithmetic ignored), for ``L = ⌈log₂ p⌉``:

- ``ring``: ``2(p−1)·α + 2(p−1)/p · n/B``;
- ``recursive_doubling``: ``L·α + L · n/B``;
- ``halving_doubling`` (Rabenseifner): ``2L·α + 2(p−1)/p · n/B``;
- ``tree``: ``2L·α + 2L · n/B``.

The ring and halving-doubling send the fewest bytes; recursive doubling and the tree take the
fewest steps. Libraries choose by message size: few steps for small messages, few bytes for
large ones.

Bucketing: frameworks do not all-reduce each gradient as it is produced, but pack consecutive
gradients into buckets of about ``bucket_bytes`` and all-reduce one bucket at a time while the
backward pass goes on (PyTorch DDP: Li et al., 2020, *PyTorch Distributed: Experiences on
Accelerating Data Parallel Training*). ``bucketed_step_time`` models that overlap.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from course_utils.models.cost_model import ALGORITHMS, Topology, modelled_time
from course_utils.validate import positive_int


def collective_time(
    nbytes: float, ranks: int, *, alpha_s: float, bandwidth_bytes_per_s: float, algorithm: str
) -> float:
    """Modelled time of one all-reduce of ``nbytes`` over ``ranks`` ranks, in seconds.

    Args:
        nbytes: n, the size of the vector every rank contributes.
        ranks: p.
        alpha_s: α, the start-up cost of one message, in seconds.
        bandwidth_bytes_per_s: B, bytes per second of one link.
        algorithm: one of ``ALGORITHMS`` (formulas in the module docstring).

    Examples:
        >>> collective_time(0, 4, alpha_s=1e-6, bandwidth_bytes_per_s=1e9, algorithm="ring")
        6e-06
        >>> collective_time(1e9, 4, alpha_s=0, bandwidth_bytes_per_s=1e9, algorithm="ring")
        1.5
    """
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if nbytes < 0 or alpha_s < 0 or bandwidth_bytes_per_s <= 0:
        raise ValueError(
            "need nbytes >= 0, alpha_s >= 0 and bandwidth_bytes_per_s > 0; got "
            f"{nbytes}, {alpha_s}, {bandwidth_bytes_per_s}"
        )
    topology = Topology(1, positive_int("ranks", ranks))
    return modelled_time("all_reduce", algorithm, nbytes, topology, alpha_s=alpha_s,
                  bytes_per_s=bandwidth_bytes_per_s)


def crossover_bytes(ranks: int, *, alpha_s: float, bandwidth_bytes_per_s: float,
                    swap_factor: float = 1.0) -> float:
    """The vector size n (bytes) at which recursive doubling and the ring take the same time;
    below it recursive doubling is faster. ``math.inf`` where recursive doubling is never
    slower (p = 2: as many bytes in fewer steps). ``swap_factor``: how many times each step's
    n bytes take on the link, 2 where the two directions of a swap cross one after the other
    (gloo's pairs: ``results.round_trips``).

    Examples:
        >>> round(crossover_bytes(4, alpha_s=0.1, bandwidth_bytes_per_s=6e6))  # 8αB
        4800000
        >>> round(crossover_bytes(4, alpha_s=0.1, bandwidth_bytes_per_s=6e6, swap_factor=2))
        960000
        >>> crossover_bytes(2, alpha_s=0.1, bandwidth_bytes_per_s=6e6)
        inf
    """
    def start_and_per_byte(algorithm: str) -> tuple[float, float]:
        def seconds(n: float) -> float:
            return collective_time(n, ranks, alpha_s=alpha_s, algorithm=algorithm,
                                   bandwidth_bytes_per_s=bandwidth_bytes_per_s)

        return seconds(0), (seconds(1e9) - seconds(0)) / 1e9

    ring_start, ring_per_byte = start_and_per_byte("ring")
    doubling_start, doubling_per_byte = start_and_per_byte("recursive_doubling")
    doubling_per_byte *= swap_factor
    if doubling_per_byte <= ring_per_byte * (1 + 1e-12):
        return math.inf
    return max(0.0, (ring_start - doubling_start) / (doubling_per_byte - ring_per_byte))


def plan_buckets(sizes: Sequence[int], bucket_bytes: int) -> list[list[int]]:
    """Group consecutive gradients (their byte sizes, in the order they are produced) into
    buckets: a bucket is closed once it holds ``bucket_bytes`` or more.

    Examples:
        >>> plan_buckets([4, 4, 4, 4, 8], 8)
        [[0, 1], [2, 3], [4]]
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
    buckets, current, filled = [], [], 0
    for i, size in enumerate(sizes):
        current.append(i)
        filled += size
        if filled >= bucket_bytes:
            buckets.append(current)
            current, filled = [], 0
    if current:
        buckets.append(current)
    return buckets


def bucketed_step_time(
    sizes: Sequence[int],
    bucket_bytes: int,
    *,
    ranks: int,
    alpha_s: float,
    bandwidth_bytes_per_s: float,
    backward_s: float,
    algorithm: str = "ring",
) -> float:
    """Modelled time from the start of the backward pass until the last bucket is all-reduced.

    The gradients (``sizes`` in bytes, in the order the backward pass produces them) become ready
    at a constant rate over ``backward_s`` seconds, in proportion to their bytes. A bucket can be
    sent once its last gradient is ready and the previous bucket's all-reduce has finished (one
    at a time, as in DDP). Small buckets start early but pay α often; one big bucket pays α once
    but only starts when the backward pass ends.
    """
    total = sum(sizes)
    ready, finished, produced = 0.0, 0.0, 0
    for bucket in plan_buckets(sizes, bucket_bytes):
        nbytes = sum(sizes[i] for i in bucket)
        produced += nbytes
        ready = backward_s * produced / total
        start = max(ready, finished)
        finished = start + collective_time(
            nbytes, ranks, alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s,
            algorithm=algorithm,
        )
    return max(finished, backward_s)


class TwoLevelTime(NamedTuple):
    """Seconds of an all-reduce three ways: one flat ring (one network adapter per node), ``l``
    flat rings side by side (NCCL's channels, one per adapter) and the two-level schedule.

    Examples:
        >>> TwoLevelTime(flat=2.0, parallel_rings=1.0, hierarchical=0.5).parallel_rings
        1.0
    """

    flat: float
    parallel_rings: float
    hierarchical: float


def hierarchical_time(
    nbytes: float,
    nodes: int,
    local: int,
    *,
    alpha_s: float,
    local_bytes_per_s: float,
    node_bytes_per_s: float,
) -> TwoLevelTime:
    """Modelled seconds of an all-reduce of ``nbytes`` over ``nodes · local`` ranks, each node
    with ``local`` network adapters at ``node_bytes_per_s`` and links inside at
    ``local_bytes_per_s`` (``cost_model``'s table on ``Topology(nodes, local, adapters=local)``):

    - ``flat``: one ring over all ranks; one chunk leaves a node per step, on one adapter;
    - ``parallel_rings``: ``local`` rings at once, each over all ranks with ``nbytes/local`` and
      its own adapter (NCCL's channels): the fair flat baseline;
    - ``hierarchical``: ring phases inside the nodes, a ring all-reduce of ``nbytes/local``
      across the nodes per device, the ``local`` devices of a node on their own adapters.

    Against ``parallel_rings`` the bandwidth gain is at most ((p−1)/p)/((n−1)/n); the rest of
    the two-level schedule's gain is its fewer steps, 2(l−1) + 2(n−1) against 2(p−1).

    Examples:
        >>> t = hierarchical_time(2**30, 2, 4, alpha_s=0, local_bytes_per_s=1e11,
        ...                       node_bytes_per_s=1e10)
        >>> round(t.flat / t.hierarchical, 2), round(t.parallel_rings / t.hierarchical, 2)
        (4.38, 1.09)
    """
    topology = Topology(nodes, local, adapters=local)
    rates = {"alpha_s": alpha_s, "bytes_per_s": node_bytes_per_s,
             "local_bytes_per_s": local_bytes_per_s}
    return TwoLevelTime(*(modelled_time("all_reduce", a, nbytes, topology, **rates)
                          for a in ("ring", "parallel_rings", "two_level")))
