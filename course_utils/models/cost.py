"""What the cost model (``cost_model``) tabulates for the notebooks: the communication budget
of step 8, a size every rank gets an equal share of, and nccl-tests' bandwidths (GB/s, the
unit nccl-tests and ``course bench`` print).

The ring model is a model of the payload and steps of a ring algorithm (Patarasuk & Yuan, 2009),
not a measurement: on logical CPU devices nothing crosses a network.
"""

from __future__ import annotations

from typing import Sequence

from course_utils.models.cost_model import COLLECTIVES, bus_factor, ring_bytes
from course_utils.validate import positive_int


def divisible_size(n: int, ranks: int) -> int:
    """The smallest multiple of ``ranks`` that is at least ``n``: a size every rank gets an
    equal share of.

    Examples:
        >>> divisible_size(1024, 4), divisible_size(1024, 3), divisible_size(8, 6)
        (1024, 1026, 12)
    """
    n, ranks = positive_int("n", n), positive_int("ranks", ranks)
    return -(-n // ranks) * ranks


def communication_budget(nbytes: int = 2**20, ranks: Sequence[int] = (2, 4, 8)) -> list[dict]:
    """The whole cycle per rank count: all-reduce bytes = reduce-scatter + all-gather bytes.

    Args:
        nbytes: size N of the gradient in bytes; must divide by every rank count.
        ranks: the rank counts p to tabulate.

    Returns:
        One dict per p with integer ``ranks``, ``all_reduce_bytes``, ``scatter_gather_bytes``
        and ``shard_storage_bytes`` (N/p, what each rank keeps after reduce-scatter): the
        exercise's row, which a student writes as a dict.

    Examples:
        >>> [row['all_reduce_bytes'] for row in communication_budget()]
        [1048576, 1572864, 1835008]
    """
    nbytes = positive_int("nbytes", nbytes, low=0)
    budget = []
    for p in ranks:
        p = positive_int("ranks", p)
        if nbytes % p:
            raise ValueError(
                f"{nbytes} bytes do not divide over {p} ranks; use a size that is a multiple of {p}"
            )
        ring = ring_bytes(nbytes, p)
        budget.append(
            dict(
                ranks=p,
                all_reduce_bytes=round(ring.all_reduce),
                scatter_gather_bytes=round(ring.reduce_scatter + ring.all_gather),
                shard_storage_bytes=nbytes // p,
            )
        )
    return budget


def algbw_gbps(nbytes: float, time_us: float) -> float:
    """nccl-tests algorithm bandwidth S/t, in GB/s, from a time in µs (as ``course bench``
    saves).

    Examples:
        >>> algbw_gbps(4_000_000, 1000.0)
        4.0
    """
    return nbytes / time_us / 1e3


def busbw_gbps(algbw: float, kind: str, devices: int) -> float:
    """nccl-tests bus bandwidth: algbw · ``bus_factor(kind, devices)`` (2(p−1)/p for
    all-reduce, (p−1)/p for the other two), in algbw's unit.

    Examples:
        >>> (busbw_gbps(4.0, "all_reduce", 4), busbw_gbps(4.0, "reduce_scatter", 4),
        ...  busbw_gbps(4.0, "all_gather", 2))
        (6.0, 3.0, 2.0)
    """
    if kind not in COLLECTIVES:
        raise ValueError(f"kind must be one of {', '.join(COLLECTIVES)}, got {kind!r}")
    return algbw * bus_factor(kind, devices)
