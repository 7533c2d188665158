"""Self-check of step 10: the message size at which a fit of ``T = α + S/B`` reaches a given
fraction of its bandwidth ``B``."""

from __future__ import annotations

import math

from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.cost import busbw_gbps
from course_utils.models.cost_model import bus_factor
from course_utils.models.fit import fit_alpha_beta

TOLERANCE = 0.01  # relative: answers rounded to 3 digits pass; the slips below are ≥ 10 % off
# (α in s, B in bytes/s, fraction) the notebook never uses; a fraction ≠ 1/2 first, so the slips
# that only show away from one half are named
_UNSEEN = (
    (1e-4, 6e9, 0.9),
    (2e-4, 4e9, 0.25),
    (5e-5, 2e10, 0.5),
    (3e-5, 1e10, 0.99),
    (1.5e-4, 5e9, 0.75),
)
# the page's all-reduce on 4 devices and other all-reduce bus factors 2(p − 1)/p, p > 2
_BUS_FACTORS = (1.5, 4 / 3, 1.6, 5 / 3, 1.75)


def _want(alpha_s: float, bytes_per_s: float, fraction: float) -> float:
    return alpha_s * bytes_per_s * fraction / (1 - fraction)


def _slip(got: float, alpha_s: float, bytes_per_s: float, fraction: float) -> str:
    """Every likely slip behind a wrong ``got``, or ``""``."""
    want = _want(alpha_s, bytes_per_s, fraction)
    half = alpha_s * bytes_per_s
    slips = (
        (want * 1e6, "alpha_s is already in seconds: do not convert it from µs"),
        (want * 1e-6, "alpha_s is in seconds, not µs"),
        (want * 8, "S is in bytes, not bits: do not multiply by 8"),
        (want / 8, "bytes_per_s is in bytes per second, not bits: do not divide by 8"),
        (want * 1e-9, "bytes_per_s is in bytes per second, not GB/s: give S in bytes"),
        (want / 2**20, "return S in bytes, not MiB"),
        (want / 1e6, "return S in bytes, not MB"),
        (want * 2, "the fixed cost is α once per call, not 2α"),
        (want / 2, "the fixed cost is α once per call: do not halve it"),
        (half * (1 - fraction) / fraction, "fraction and 1 − fraction are swapped"),
        (half, "that is right for one fraction only: the size must depend on fraction"),
        (half * fraction, "S/(α + S/B) = f·B has S on both sides: collect the S terms "
                          "before dividing"),
        (half / (1 - fraction), "S/(α + S/B) = f·B has S on both sides: collect the S terms "
                                "before dividing"),
        *((want * c, "the bus factor multiplies the bus bandwidth and its limit alike: it "
                     "does not change the size, leave it out") for c in _BUS_FACTORS),
        *((want / c, "the bus factor multiplies the bus bandwidth and its limit alike: it "
                     "does not change the size, leave it out") for c in _BUS_FACTORS),
    )
    causes = list(dict.fromkeys(why for value, why in slips
                                if math.isclose(got, value, rel_tol=TOLERANCE)))
    return " — or ".join(causes)


def _ignored(fn, case: tuple, got: float) -> str:
    """The fit's arguments ``fn`` does not read (its answer stays the same when one changes:
    the notebook's fit, ``alpha_s`` and ``bytes_per_s`` above, used instead) while it reads
    ``fraction``, or ``""`` (for a constant too: the formula is the slip there)."""
    unread = []
    for index, name in ((0, "alpha_s"), (1, "bytes_per_s"), (2, "fraction")):
        other = tuple(v * (2 if index < 2 else 0.5) if k == index else v
                      for k, v in enumerate(case))
        try:  # a probe only: the call with the case's own arguments already ran
            again = number(fn(*other))
        except Exception:  # noqa: BLE001 - a probe that fails names nothing
            continue
        if again is not None and math.isclose(again, got, rel_tol=1e-9):
            unread.append(name)
    if not unread or "fraction" in unread:
        return ""
    return (f"your size does not change with the argument{'s' if len(unread) > 1 else ''} "
            f"{' and '.join(unread)}: use the function's arguments, not the notebook's fit "
            "(the alpha_s and bytes_per_s computed above)")


def check_bandwidth_fraction_size(fn) -> None:
    """Exercise 10: ``fn(alpha_s, bytes_per_s, fraction) -> bytes``, the message size ``S`` at
    which the algorithm bandwidth ``S/(α + S/B)`` is ``fraction`` of ``B`` (0 < fraction < 1);
    within ``TOLERANCE`` at fits and fractions the notebook never uses. ``fn`` must not be or
    call the package's ``fit_alpha_beta``, ``busbw_gbps`` or ``bus_factor``."""
    exercise = "size at a fraction of the bandwidth"
    function_given(exercise, "bytes_at_bandwidth_fraction", fn)
    for alpha_s, bytes_per_s, fraction in _UNSEEN:
        call = f"bytes_at_bandwidth_fraction({alpha_s:g}, {bytes_per_s:g}, {fraction:g})"
        got = call_without(exercise, fn, (alpha_s, bytes_per_s, fraction),
                           forbidden=(fit_alpha_beta, busbw_gbps, bus_factor),
                           refusal="bytes_at_bandwidth_fraction uses the package's {}, which "
                                   "the size does not need: solve S/(α + S/B) = fraction · B",
                           call=call)
        value = number(got)
        if value is None or not math.isfinite(value):
            fail(exercise, f"{call} must return one finite number of bytes, got {got!r}")
        want = _want(alpha_s, bytes_per_s, fraction)
        if not math.isclose(value, want, rel_tol=TOLERANCE):
            why = (_slip(value, alpha_s, bytes_per_s, fraction)
                   or _ignored(fn, (alpha_s, bytes_per_s, fraction), value)
                   or "set S/(α + S/B) equal to fraction · B and solve for S")
            fail(exercise, f"{call}: {off_by(value, want)}; {why}")
    passed(exercise, f"{len(_UNSEEN)} fits and fractions")
