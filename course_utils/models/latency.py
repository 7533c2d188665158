"""The α-β model with its latency term: all-reduce algorithms, and buckets of gradients.

An all-reduce of ``n`` bytes over ``p`` ranks, each message costing ``α`` to start and ``1/B`` per
byte (reduction arithmetic ignored), for ``p`` a power of two and ``L = log₂ p``: recursive
doubling, halving-doubling and the tree after Thakur, Rabenseifner & Gropp (2005), *Optimization of
Collective Communication Operations in MPICH*; the ring after Patarasuk & Yuan (2009). For other
``p`` those algorithms need extra steps; ``L = ⌈log₂ p⌉`` is then an approximation.

- ``ring``: reduce-scatter then all-gather around a ring, 2(p−1) steps of n/p bytes:
  ``2(p−1)·α + 2(p−1)/p · n/B``;
- ``recursive_doubling``: L steps, each exchanging the whole vector with a partner:
  ``L·α + L · n/B``;
- ``halving_doubling`` (Rabenseifner): recursive-halving reduce-scatter, recursive-doubling
  all-gather: ``2L·α + 2(p−1)/p · n/B``;
- ``tree``: a binomial-tree reduce, then a broadcast, the whole vector at every step:
  ``2L·α + 2L · n/B``.

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
from typing import Sequence

ALGORITHMS = ("ring", "recursive_doubling", "halving_doubling", "tree")


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
    if not isinstance(ranks, int) or isinstance(ranks, bool) or ranks < 1:
        raise ValueError(f"ranks must be a positive integer, got {ranks!r}")
    if nbytes < 0 or alpha_s < 0 or bandwidth_bytes_per_s <= 0:
        raise ValueError(
            "need nbytes >= 0, alpha_s >= 0 and bandwidth_bytes_per_s > 0; got "
            f"{nbytes}, {alpha_s}, {bandwidth_bytes_per_s}"
        )
    p, per_byte = ranks, nbytes / bandwidth_bytes_per_s
    steps = math.ceil(math.log2(p)) if p > 1 else 0
    if algorithm == "ring":
        return 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * per_byte
    if algorithm == "recursive_doubling":
        return steps * (alpha_s + per_byte)
    if algorithm == "halving_doubling":
        return 2 * steps * alpha_s + 2 * (p - 1) / p * per_byte
    return 2 * steps * (alpha_s + per_byte)


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
