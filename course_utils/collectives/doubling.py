"""Recursive doubling, built from ``jax.lax.ppermute``: an all-reduce in log₂ p steps.

In step k (0, 1, …) device i exchanges everything it holds with device i XOR 2ᵏ and adds what it
receives: after step k each device holds the sum over a group of 2ᵏ⁺¹ devices, after log₂ p
steps the sum over all p. Each step sends the whole vector, so it sends more bytes than the ring
(log₂ p · n against 2(p − 1)/p · n) in fewer messages (log₂ p against 2(p − 1)): the algorithm of
small messages (Thakur, Rabenseifner & Gropp, 2005, *Optimization of Collective Communication
Operations in MPICH*). Every device adds the same numbers in the same pairs, so every device
ends with the same bits.
"""

from __future__ import annotations

import jax


def doubling_permutation(p: int, k: int) -> list[tuple[int, int]]:
    """Step ``k``'s ``(source, destination)`` pairs for ``ppermute``: device j and j XOR 2ᵏ
    swap.

    Examples:
        >>> doubling_permutation(4, 0), doubling_permutation(4, 1)
        ([(0, 1), (1, 0), (2, 3), (3, 2)], [(0, 2), (1, 3), (2, 0), (3, 1)])
    """
    return [(j, j ^ (1 << k)) for j in range(p)]


def doubling_steps(p: int) -> int:
    """log₂ p, the steps of recursive doubling over ``p`` devices.

    Raises:
        ValueError: ``p`` is not a power of two (the pairs of a step would not match up).

    Examples:
        >>> doubling_steps(8)
        3
    """
    if isinstance(p, bool) or not isinstance(p, int) or p < 1 or p & (p - 1):
        raise ValueError(f"recursive doubling needs a power of two of devices, got {p!r}: use "
                         "2, 4 or 8 devices")
    return p.bit_length() - 1


def recursive_doubling_all_reduce(g, axis: str, p: int):
    """The sum over devices of ``g`` inside ``shard_map`` over ``axis`` (p devices, a power of
    two): log₂ p ``ppermute`` exchanges, each of the whole vector."""
    for k in range(doubling_steps(p)):
        g = g + jax.lax.ppermute(g, axis, doubling_permutation(p, k))
    return g
