"""Self-check of step 10: a bus bandwidth predicted from a fit of ``T = α + S/B``."""

from __future__ import annotations

import math

from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.cost import busbw_gbps
from course_utils.models.cost_model import bus_factor
from course_utils.models.fit import fit_alpha_beta

TOLERANCE = 0.01  # relative: answers rounded to 3 digits pass; the slips below are ≥ 50 % off
KINDS = ("all_reduce", "reduce_scatter", "all_gather")
# (bytes, α in s, B in bytes/s, kind, p) the notebook never uses; both regimes, every kind
_UNSEEN = (
    (2**20, 1e-4, 6e9, "all_gather", 3),
    (2**24, 2e-4, 4e9, "reduce_scatter", 8),
    (2**26, 5e-5, 2e10, "all_reduce", 16),
    (4096, 1.5e-4, 5e9, "all_reduce", 2),
    (2**22, 3e-5, 1e10, "all_gather", 2),
)


def _want(nbytes: float, alpha_s: float, bytes_per_s: float, kind: str, p: int) -> float:
    return nbytes / (alpha_s + nbytes / bytes_per_s) * bus_factor(kind, p) / 1e9


def _slip(got: float, nbytes: float, alpha_s: float, bytes_per_s: float, kind: str,
          p: int) -> str:
    """Every likely slip behind a wrong ``got``, or a general hint."""
    want = _want(nbytes, alpha_s, bytes_per_s, kind, p)
    algbw = want / bus_factor(kind, p)
    two = 2 * (p - 1) / p if kind == "all_reduce" else (p - 1) / p
    slips = (
        (algbw, "that is the algorithm bandwidth S/t; the bus bandwidth multiplies it by the "
                "collective's bus factor"),
        (want * p / (p - 1), "a rank never sends its own chunk: the factor has p − 1 where you "
                             "have p"),
        (want * 8, "GB/s counts bytes, not bits: do not multiply by 8"),
        (want * 1e9, "give GB/s (10^9 bytes per second), not bytes per second"),
        (want * 1e3, "give GB/s (10^9 bytes per second), not MB/s"),
        (want * 1e9 / 2**30, "GB/s here is 10^9 bytes per second, not GiB/s"),
        (nbytes / (alpha_s * 1e6 + nbytes / bytes_per_s) * two / 1e9,
         "alpha_s is already in seconds: do not convert it from µs"),
        (bytes_per_s * two / 1e9, "the time of a call is α + S/B: the fixed cost α is missing "
                                  "(or made a millionth: alpha_s is in seconds already)"),
        (want * 2 if kind != "all_reduce" else want / 2,
         "all-reduce's bus factor is 2(p − 1)/p; reduce-scatter's and all-gather's are (p − 1)/p"),
    )
    causes = [why for value, why in slips if math.isclose(got, value, rel_tol=TOLERANCE)]
    if causes:  # S/t and (p−1)/p with p for p − 1 are the same number: name both
        return " — or ".join(causes)
    return "the time is α + S/B, algbw = S/time, and busbw = algbw · the collective's bus factor"


def check_busbw_prediction(fn) -> None:
    """Exercise 10: ``fn(n_bytes, alpha_s, bytes_per_s, kind, p) -> GB/s``, the bus bandwidth a
    collective (``kind`` one of ``KINDS``) of ``n_bytes`` on ``p`` devices shows if its time is
    exactly ``α + S/B``; within ``TOLERANCE`` at sizes, fits, collectives and device counts the
    notebook never uses. ``fn`` must not be or call the package's ``fit_alpha_beta``,
    ``busbw_gbps`` or ``bus_factor``."""
    exercise = "bus bandwidth from a fit"
    function_given(exercise, "predicted_busbw_gbps", fn)
    for nbytes, alpha_s, bytes_per_s, kind, p in _UNSEEN:
        call = f"predicted_busbw_gbps({nbytes}, {alpha_s:g}, {bytes_per_s:g}, {kind!r}, {p})"
        got = call_without(exercise, fn, (nbytes, alpha_s, bytes_per_s, kind, p),
                           forbidden=(fit_alpha_beta, busbw_gbps, bus_factor),
                           refusal="predicted_busbw_gbps uses the package's {}, which computes "
                                   "the answer: write the time, S/t and the bus factor yourself",
                           call=call)
        value = number(got)
        if value is None or not math.isfinite(value):
            fail(exercise, f"{call} must return one finite number of GB/s, got {got!r}")
        want = _want(nbytes, alpha_s, bytes_per_s, kind, p)
        if not math.isclose(value, want, rel_tol=TOLERANCE):
            fail(exercise, f"{call}: {off_by(value, want)}; "
                           f"{_slip(value, nbytes, alpha_s, bytes_per_s, kind, p)}")
    passed(exercise, f"{len(_UNSEEN)} sizes, fits, collectives and device counts")
