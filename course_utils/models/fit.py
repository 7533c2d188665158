"""Fitting the α-β model ``T = α + S/B`` to measured times (notebook 10, ``course bench``,
``course cluster``), in SI units; saved JSON keeps µs and GB/s (``fit_from_json``)."""

from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np


class Fit(NamedTuple):
    """A fit of ``T = α + S/B``: ``alpha_s`` in seconds, ``bytes_per_s`` (``None`` when the
    times do not grow with S), the worst relative error over the points and their number.

    Examples:
        >>> fit = Fit(alpha_s=1e-4, bytes_per_s=5e9, max_rel_error=0.0, n_points=20)
        >>> round(fit.time_s(5e6), 9)
        0.0011
    """

    alpha_s: float
    bytes_per_s: float | None
    max_rel_error: float
    n_points: int

    def time_s(self, nbytes: float) -> float:
        """``α + S/B`` in seconds (α alone when the fit found no per-byte cost)."""
        return self.alpha_s + (0.0 if self.bytes_per_s is None else nbytes / self.bytes_per_s)


def fit_alpha_beta(nbytes: Sequence[float], times_s: Sequence[float]) -> Fit:
    """Least-squares fit of ``T = α + S/B`` on relative residuals (each point weighs 1/T).

    Relative weights let the small sizes (which set α, the floor) count as much as the large ones
    (which set B); plain least squares would fit only the largest two or three sizes.

    Args:
        nbytes: the sizes S, in bytes.
        times_s: one measured time per size, in seconds.

    Examples:
        >>> sizes = [2.0**k for k in range(5, 25)]
        >>> fit = fit_alpha_beta(sizes, [1e-4 + s / 5e9 for s in sizes])  # 100 µs, 5 GB/s
        >>> round(fit.alpha_s * 1e6, 6), round(fit.bytes_per_s / 1e9, 6), fit.n_points
        (100.0, 5.0, 20)
    """
    s, t = np.asarray(nbytes, dtype=float), np.asarray(times_s, dtype=float)
    if s.shape != t.shape or s.size < 2 or np.unique(s).size < 2:
        raise ValueError("fit_alpha_beta needs at least two distinct sizes and one time per size")
    design = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (alpha, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    model = alpha + per_byte * s
    # a per-byte cost below rounding noise (under 1e-9 of the largest time) is no cost at all
    grows = per_byte * s.max() > 1e-9 * t.max()
    return Fit(
        alpha_s=float(alpha),
        bytes_per_s=float(1 / per_byte) if grows else None,
        max_rel_error=float(np.max(np.abs(model - t) / t)),
        n_points=int(s.size),
    )


def fit_from_json(saved: dict) -> Fit:
    """The ``Fit`` of a saved entry (``alpha_us``, ``bandwidth_gbps``, …: JSON keeps µs and
    GB/s); ``fit_to_json`` writes them.

    Examples:
        >>> fit_from_json({"alpha_us": 100.0, "bandwidth_gbps": 5.0, "max_rel_error": 0.1,
        ...                "n_points": 9}).bytes_per_s
        5000000000.0
        >>> fit_to_json(Fit(1e-4, None, 0.0, 2))
        {'alpha_us': 100.0, 'bandwidth_gbps': None, 'max_rel_error': 0.0, 'n_points': 2}
    """
    gbps = saved["bandwidth_gbps"]
    return Fit(alpha_s=saved["alpha_us"] * 1e-6, bytes_per_s=None if gbps is None else gbps * 1e9,
               max_rel_error=saved.get("max_rel_error", 0.0), n_points=saved.get("n_points", 0))


def fit_to_json(fit: Fit) -> dict:
    """The saved form of ``fit``: µs and GB/s, the keys ``fit_from_json`` reads."""
    return {
        "alpha_us": fit.alpha_s * 1e6,
        "bandwidth_gbps": None if fit.bytes_per_s is None else fit.bytes_per_s / 1e9,
        "max_rel_error": fit.max_rel_error,
        "n_points": fit.n_points,
    }
