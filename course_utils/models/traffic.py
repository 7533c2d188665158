"""The in-process memory-traffic model: bytes an XLA:CPU collective reads and writes on one
shared memory (notebook 10, ``course bench``). A separate model from the α-β cost model
(``cost_model``): on logical CPU devices nothing crosses a network.
"""

from __future__ import annotations

from typing import Callable

# outputs this large per device page-fault on every call on XLA:CPU (measured; see course bench)
PAGE_FAULT_BYTES = 32 * 2**20
# bytes read plus written by an in-process collective over S bytes, as a multiple of S, per p
TRAFFIC_FACTORS: dict[str, Callable[[int], int]] = {
    "psum": lambda p: 3 * p - 1,
    "psum_scatter": lambda p: p + 1,
    "all_gather": lambda p: 2 * p,
    "rs_ag_calls": lambda p: 3 * p + 1,
    "rs_ag_fused": lambda p: 3 * p + 1,
}


def _check(variant: str) -> None:
    if variant not in TRAFFIC_FACTORS:
        raise ValueError(f"variant must be one of {', '.join(TRAFFIC_FACTORS)}, got {variant!r}")


def traffic_bytes(variant: str, nbytes: float, devices: int) -> float:
    """Bytes read plus written by an in-process collective over S = ``nbytes``.

    all-reduce ≈ (3p−1)S, reduce-scatter ≈ (p+1)S, all-gather ≈ 2pS; reduce-scatter followed by
    all-gather is the sum of those two, (3p+1)S. Counted over all p devices of one shared memory:
    reduce-scatter reads the p partials (pS) and writes the S/p-byte sums (S in all); all-gather
    reads S per device and writes S per device (2pS); all-reduce is a reduce-scatter (p+1)S plus
    each device copying the p−1 other slices, read and written: 2(p−1)S.

    Examples:
        >>> traffic_bytes("psum", 100, 4)
        1100
        >>> [traffic_bytes(v, 1, 4) for v in TRAFFIC_FACTORS]
        [11, 5, 8, 13, 13]
    """
    _check(variant)
    return TRAFFIC_FACTORS[variant](devices) * nbytes


def output_bytes_per_device(variant: str, nbytes: float, devices: int) -> float:
    """Bytes each device ends with: S, except S/p after ``psum_scatter``.

    Examples:
        >>> (output_bytes_per_device("psum_scatter", 1024, 4),
        ...  output_bytes_per_device("all_gather", 1024, 4))
        (256.0, 1024.0)
    """
    _check(variant)
    return nbytes / devices if variant == "psum_scatter" else float(nbytes)


def in_page_fault_regime(variant: str, nbytes: float, devices: int) -> bool:
    """Whether each device's output is ≥ 32 MiB, where every call page-faults its fresh output.

    Examples:
        >>> in_page_fault_regime("psum", 2**25, 4), in_page_fault_regime("psum_scatter", 2**25, 4)
        (True, False)
    """
    return output_bytes_per_device(variant, nbytes, devices) >= PAGE_FAULT_BYTES
