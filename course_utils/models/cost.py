"""Cost models: the ring payload, the α-β time model, nccl-tests bandwidths,
in-process memory traffic.

The ring model is a model of the payload and steps of a ring algorithm (Patarasuk & Yuan, 2009),
not a measurement: on logical CPU devices nothing crosses a network. The α-β model
``T = α + S/B`` is fitted to measured times (notebook 10, ``course bench``); the bus bandwidth
follows nccl-tests' convention; the memory-traffic model counts the bytes an in-process
collective reads and writes.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from course_utils.validate import positive_int

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


def ring_bytes(nbytes: int, ranks: int) -> dict:
    """Bytes each rank sends in a ring collective over an array of ``nbytes``.

    Reduce-scatter and all-gather each send (p−1)/p·N; all-reduce, being both, sends 2(p−1)/p·N.

    Args:
        nbytes: size N of the whole array in bytes.
        ranks: number of ranks p.

    Returns:
        ``{'reduce_scatter': …, 'all_gather': …, 'all_reduce': …}`` as floats.

    Examples:
        >>> ring_bytes(32, 4)
        {'reduce_scatter': 24.0, 'all_gather': 24.0, 'all_reduce': 48.0}
    """
    nbytes, ranks = positive_int("nbytes", nbytes, low=0), positive_int("ranks", ranks)
    one_pass = (ranks - 1) / ranks * nbytes
    return {"reduce_scatter": one_pass, "all_gather": one_pass, "all_reduce": 2 * one_pass}


def ring_steps(ranks: int) -> dict:
    """Message steps of the ring collectives on ``ranks`` ranks: the latency term's multiplier.

    Reduce-scatter and all-gather pass one chunk around the ring p−1 times; the ring all-reduce
    does both, 2(p−1) steps. Each step costs at least one latency α, whatever the message size.

    Examples:
        >>> ring_steps(4)
        {'reduce_scatter': 3, 'all_gather': 3, 'all_reduce': 6}
    """
    ranks = positive_int("ranks", ranks)
    return {"reduce_scatter": ranks - 1, "all_gather": ranks - 1, "all_reduce": 2 * (ranks - 1)}


def ring_time_us(nbytes: int, ranks: int, *, alpha_us: float, bandwidth_gbps: float) -> dict:
    """The α-β time of the ring collectives: steps·α + bytes per rank / B.

    For the all-reduce, T = 2(p−1)·α + 2(p−1)/p·N/B (Patarasuk & Yuan, 2009; Thakur,
    Rabenseifner & Gropp, 2005); reduce-scatter and all-gather take half of each term.

    Args:
        nbytes: size N of the whole array in bytes.
        ranks: number of ranks p.
        alpha_us: latency α of one step, µs.
        bandwidth_gbps: link bandwidth B, GB/s.

    Returns:
        ``{'reduce_scatter': …, 'all_gather': …, 'all_reduce': …}`` in µs.

    Examples:
        >>> ring_time_us(4_000_000, 4, alpha_us=10.0, bandwidth_gbps=1.0)
        {'reduce_scatter': 3030.0, 'all_gather': 3030.0, 'all_reduce': 6060.0}
    """
    steps, sent = ring_steps(ranks), ring_bytes(nbytes, ranks)
    return {kind: steps[kind] * alpha_us + sent[kind] / bandwidth_gbps / 1e3 for kind in steps}


def divisible_size(n: int, ranks: int) -> int:
    """The smallest multiple of ``ranks`` that is at least ``n``: a size every rank gets an
    equal share of.

    Examples:
        >>> divisible_size(1024, 4), divisible_size(1024, 3), divisible_size(8, 6)
        (1024, 1026, 12)
    """
    n, ranks = positive_int("n", n), positive_int("ranks", ranks)
    return -(-n // ranks) * ranks


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
            {
                "ranks": p,
                "all_reduce_bytes": round(ring["all_reduce"]),
                "scatter_gather_bytes": round(ring["reduce_scatter"] + ring["all_gather"]),
                "shard_storage_bytes": nbytes // p,
            }
        )
    return budget


def algbw_gbps(nbytes: float, time_us: float) -> float:
    """nccl-tests algorithm bandwidth S/t, in GB/s.

    Examples:
        >>> algbw_gbps(4_000_000, 1000.0)
        4.0
    """
    return nbytes / time_us / 1e3


def busbw_gbps(algbw: float, kind: str, devices: int) -> float:
    """nccl-tests bus bandwidth: algbw·2(p−1)/p for all-reduce, algbw·(p−1)/p for the other two.

    Examples:
        >>> (busbw_gbps(4.0, "all_reduce", 4), busbw_gbps(4.0, "reduce_scatter", 4),
        ...  busbw_gbps(4.0, "all_gather", 2))
        (6.0, 3.0, 2.0)
    """
    factors = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}
    if kind not in factors:
        raise ValueError(f"kind must be one of {', '.join(factors)}, got {kind!r}")
    return algbw * factors[kind] * (devices - 1) / devices


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
    if variant not in TRAFFIC_FACTORS:
        raise ValueError(f"variant must be one of {', '.join(TRAFFIC_FACTORS)}, got {variant!r}")
    return TRAFFIC_FACTORS[variant](devices) * nbytes


def output_bytes_per_device(variant: str, nbytes: float, devices: int) -> float:
    """Bytes each device ends with: S, except S/p after ``psum_scatter``.

    Examples:
        >>> (output_bytes_per_device("psum_scatter", 1024, 4),
        ...  output_bytes_per_device("all_gather", 1024, 4))
        (256.0, 1024.0)
    """
    if variant not in TRAFFIC_FACTORS:
        raise ValueError(f"variant must be one of {', '.join(TRAFFIC_FACTORS)}, got {variant!r}")
    return nbytes / devices if variant == "psum_scatter" else float(nbytes)


def in_page_fault_regime(variant: str, nbytes: float, devices: int) -> bool:
    """Whether each device's output is ≥ 32 MiB, where every call page-faults its fresh output.

    Examples:
        >>> in_page_fault_regime("psum", 2**25, 4), in_page_fault_regime("psum_scatter", 2**25, 4)
        (True, False)
    """
    return output_bytes_per_device(variant, nbytes, devices) >= PAGE_FAULT_BYTES


def fit_alpha_beta(nbytes: Sequence[float], times_us: Sequence[float]) -> dict:
    """Least-squares fit of ``T = α + S/B`` on relative residuals (each point weighs 1/T).

    Relative weights let the small sizes (which set α, the floor) count as much as the large ones
    (which set B); plain least squares would fit only the largest two or three sizes.

    Returns:
        ``alpha_us``, ``bandwidth_gbps`` (``None`` when the times do not grow with S),
        ``max_rel_error`` (the worst |fit − T|/T over the points) and ``n_points``.

    Examples:
        >>> sizes = [2.0**k for k in range(5, 25)]
        >>> fit = fit_alpha_beta(sizes, [100 + s / 5e3 for s in sizes])  # α = 100 µs, B = 5 GB/s
        >>> (round(fit["alpha_us"], 6), round(fit["bandwidth_gbps"], 6),
        ...  round(fit["max_rel_error"], 6))
        (100.0, 5.0, 0.0)
    """
    s, t = np.asarray(nbytes, dtype=float), np.asarray(times_us, dtype=float)
    if s.shape != t.shape or s.size < 2 or np.unique(s).size < 2:
        raise ValueError("fit_alpha_beta needs at least two distinct sizes and one time per size")
    design = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (alpha, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    model = alpha + per_byte * s
    # a per-byte cost below rounding noise (under 1e-9 of the largest time) is no cost at all
    grows = per_byte * s.max() > 1e-9 * t.max()
    return {
        "alpha_us": float(alpha),
        "bandwidth_gbps": float(1e-3 / per_byte) if grows else None,
        "max_rel_error": float(np.max(np.abs(model - t) / t)),
        "n_points": int(s.size),
    }


def model_time_us(fit: dict, nbytes: float) -> float:
    """``α + S/B`` in µs for a fit from ``fit_alpha_beta``.

    Examples:
        >>> model_time_us({"alpha_us": 100.0, "bandwidth_gbps": 5.0}, 5e6)
        1100.0
    """
    slope = 0.0 if fit["bandwidth_gbps"] is None else nbytes / fit["bandwidth_gbps"] / 1e3
    return fit["alpha_us"] + slope
