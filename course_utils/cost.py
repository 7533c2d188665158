"""The idealized ring model: payload bytes each rank sends, and bytes each rank stores.

This is a model of the payload of a ring algorithm (Patarasuk & Yuan, 2009), not a measurement:
on logical CPU devices nothing crosses a network.
"""
from __future__ import annotations

import numbers


def _check(name: str, value, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def ring_bytes(nbytes: int, ranks: int) -> dict:
    """Bytes each rank sends in a ring collective over an array of ``nbytes``.

    Reduce-scatter and all-gather each send (p−1)/p·N; all-reduce, being both, sends 2(p−1)/p·N.

    Args:
        nbytes: size N of the whole array in bytes. ranks: number of ranks p.

    Returns:
        ``{'reduce_scatter': …, 'all_gather': …, 'all_reduce': …}`` as floats.

    Examples:
        >>> ring_bytes(32, 4)
        {'reduce_scatter': 24.0, 'all_gather': 24.0, 'all_reduce': 48.0}
    """
    nbytes, ranks = _check("nbytes", nbytes, 0), _check("ranks", ranks, 1)
    one_pass = (ranks - 1) / ranks * nbytes
    return {"reduce_scatter": one_pass, "all_gather": one_pass, "all_reduce": 2 * one_pass}


def communication_budget(nbytes: int = 2**20, ranks=(2, 4, 8)) -> list[dict]:
    """The whole cycle per rank count: all-reduce bytes = reduce-scatter + all-gather bytes.

    Args:
        nbytes: size N of the gradient in bytes; must divide by every rank count.
        ranks: the rank counts p to tabulate.

    Returns:
        One dict per p with integer ``ranks``, ``all_reduce_bytes``, ``scatter_gather_bytes``
        and ``shard_storage_bytes`` (N/p, what each rank keeps after reduce-scatter).

    Examples:
        >>> [row['all_reduce_bytes'] for row in communication_budget()]
        [1048576, 1572864, 1835008]
    """
    nbytes = _check("nbytes", nbytes, 0)
    budget = []
    for p in ranks:
        p = _check("ranks", p, 1)
        if nbytes % p:
            raise ValueError(f"{nbytes} bytes do not divide over {p} ranks; use a size that is a multiple of {p}")
        ring = ring_bytes(nbytes, p)
        budget.append({"ranks": p, "all_reduce_bytes": round(ring["all_reduce"]),
                       "scatter_gather_bytes": round(ring["reduce_scatter"] + ring["all_gather"]),
                       "shard_storage_bytes": nbytes // p})
    return budget
