"""Step 21's exercise check: the smallest H at which DiLoCo's sync across the replicas adds at
most a given fraction to an inner step's time."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np

from course_utils.checks.byte_models import BYTE_MODELS
from course_utils.checks.forbidden import public_name, uses_forbidden
from course_utils.checks.helpers import (
    call_without,
    fail,
    function_given,
    number,
    passed,
    scalar,
)

EXERCISE = "the smallest H for a link"
NAME = "my_smallest_h"
ARGS = "n_params, replicas, devices_per_replica, rate_bits_per_s, step_seconds, fraction"


def expected_h(n_params: int, replicas: int, devices_per_replica: int, rate_bits_per_s: float,
               step_seconds: float, fraction: float) -> int:
    """The smallest H ≥ 1 with (one sync's seconds) / H ≤ ``fraction`` · ``step_seconds``: a ring
    all-reduce of the ``n_params`` float32 outer gradient over the ``replicas`` (2(R−1)/R · 4n
    bytes per device, 8 bits a byte, at ``rate_bits_per_s``), in exact arithmetic. The devices
    of a replica do not matter: their all-reduce runs every step inside the replica.

    Examples:
        >>> expected_h(2**20, 2, 4, 2.0**30, 2.0**-5, 0.125)  # the sync takes 8 × 1/8 step
        8
        >>> expected_h(1000, 1, 8, 1e9, 1.0, 0.1)  # one replica: nothing crosses
        1
    """
    sync_bits = Fraction(2 * (replicas - 1), replicas) * 4 * n_params * 8
    budget = Fraction(fraction) * Fraction(step_seconds) * Fraction(rate_bits_per_s)
    return max(1, math.ceil(sync_bits / budget))


def _ratio(case: tuple) -> Fraction:
    n, r, _, rate, step, frac = case
    return Fraction(2 * (r - 1), r) * 32 * n / (Fraction(frac) * Fraction(step) * Fraction(rate))


# (n_params, replicas, devices per replica, bit/s, s per inner step, fraction) never on the page:
# odd replicas, one device per replica, fast and slow links ...
# (each at least 2 % from a whole ratio, as the drawn case: no float rounding decides the ceiling)
_UNSEEN = ((25_000_000, 3, 8, 1e9, 0.45, 0.1), (150_000_000, 8, 1, 1e10, 0.8, 0.065),
           (7_000_000, 16, 4, 4e8, 0.12, 0.3), (1_300_000, 5, 2, 3e7, 0.07, 0.2))
# ... one whose sync adds exactly the fraction at a whole H (powers of two: exact in any float
# order) ...
_EXACT = (2**20, 2, 4, 2.0**30, 2.0**-5, 0.125)
# ... and one replica: nothing crosses, so H = 1 (judged last: a formula's slips show first)
_ONE = (5_000_000, 1, 4, 1e8, 0.2, 0.1)


def _fresh_case(rng: random.Random) -> tuple:
    """One more case, drawn anew at every check, until its H is 2 to 100,000 and the exact ratio
    is not within 2 % of a whole number (so no float rounding decides the ceiling)."""
    while True:
        case = (int(10 ** rng.uniform(5, 9)), rng.randint(2, 16), rng.randint(1, 8),
                10 ** rng.uniform(7, 11), 10 ** rng.uniform(-2, 0.5), rng.uniform(0.02, 0.5))
        ratio = float(_ratio(case))
        if 2 <= expected_h(*case) <= 100_000 and 0.02 < ratio % 1 < 0.98:
            return case


def check_smallest_h(fn, *, n_params: int, replicas: int, devices_per_replica: int,
                     rate_bits_per_s: float, step_seconds: float, fraction: float) -> None:
    """Exercise 21: ``fn(n_params, replicas, devices_per_replica, rate_bits_per_s,
    step_seconds, fraction)`` → the smallest whole H ≥ 1 at which DiLoCo's sync (a ring
    all-reduce of the float32 outer gradient across the replicas, sent at the rate, not
    overlapped) adds at most ``fraction`` of an inner step's time per inner step
    (``expected_h``), exactly, at the exercise's numbers, at cases the notebook never uses (one
    on the boundary, one with a single replica) and at a case drawn anew. ``fn`` must not call
    the package's byte models or ``expected_h``."""
    function_given(EXERCISE, NAME, fn)
    forbidden = (expected_h, *BYTE_MODELS)
    if (name := uses_forbidden(fn, forbidden)) is not None:  # named as the page spells it
        name = next((public_name(f) for f in forbidden if f.__name__ == name), name)
        fail(EXERCISE, f"{NAME} uses the package's {name}, which computes the bytes or the "
                       "answer: write the sync's bytes and seconds yourself")

    def answer(case: tuple):
        call = f"{NAME}({', '.join(_exact(a) for a in case)})"
        got = number(call_without(EXERCISE, fn, case, forbidden=(), call=call, refusal=""))
        if got is None or not np.isfinite(got):
            fail(EXERCISE, f"{call} must return a whole number of inner steps H ≥ 1")
        if got != round(got):
            fail(EXERCISE, f"{call} returned {got:g}: H is a whole number of inner steps; "
                           "round up, since a smaller H would send more often")
        if got < 1:
            fail(EXERCISE, f"{call} returned {got:g}: H counts inner steps, at least 1"
                           + ("; with one replica nothing crosses, and every H fits"
                              if case[1] == 1 else ""))
        return call, int(got)

    mine = (n_params, replicas, devices_per_replica, rate_bits_per_s, step_seconds, fraction)
    cases = [mine, *_UNSEEN, _EXACT, _fresh_case(random.Random())]
    answers = [(case, *answer(case)) for case in cases]
    for case, call, got in answers:
        if got == expected_h(*case):
            continue
        where = "" if case is mine else "right at this notebook's numbers, but "
        why = (_slip([(c, g) for c, _, g in answers], case is _EXACT) or _ignored(fn, case, got)
               or _how_far(case, got))
        fail(EXERCISE, f"{where}{call} gives H = {got}: {why}")
    call, got = answer(_ONE)
    if got != 1:
        fail(EXERCISE, f"{call} gives H = {got}: with one replica no sync crosses a link, so "
                       "every H adds nothing: the smallest is 1")
    passed(EXERCISE, f"H = {answers[0][2]} here; and at {len(cases)} other cases, one "
                     "replica included")


def _exact(value) -> str:
    """An argument as Python writes it back (a float's every digit): the call can be re-run."""
    value = scalar(value)
    return repr(int(value) if isinstance(value, (int, np.integer)) else float(value))


def _slip(answers: list, boundary: bool) -> str:
    """The slip whose H equals the answer in every judged case, or ``""``."""

    def h(factor, *, rounding=math.ceil, over=lambda r, d: r, share=lambda d: 1):
        def wrong(n, r, d, rate, step, frac):
            ring = over(r, d)
            cost = Fraction(2 * (ring - 1), ring) * factor * n * share(d) / Fraction(rate)
            return max(1, rounding(cost / (Fraction(frac) * Fraction(step))))
        return wrong

    def ring_factor(n, r, d, rate, step, frac):
        return max(1, math.ceil(Fraction(2) * 32 * n / (Fraction(rate) * Fraction(frac)
                                                         * Fraction(step))))

    def no_ring(n, r, d, rate, step, frac):  # the outer gradient's bytes once, any R
        return max(1, math.ceil(Fraction(32 * n) / (Fraction(rate) * Fraction(frac)
                                                     * Fraction(step))))

    def one_pass(n, r, d, rate, step, frac):
        return max(1, math.ceil(Fraction(r - 1, r) * 32 * n / (Fraction(rate) * Fraction(frac)
                                                                * Fraction(step))))

    def strict(n, r, d, rate, step, frac):
        ratio = _ratio((n, r, d, rate, step, frac))
        return max(1, math.floor(ratio) + 1)

    slips = (
        (h(4), "the rate is in bits per second: a sync of B bytes takes 8 · B / rate seconds"),
        (h(Fraction(1, 2)), "bytes to bits is × 8, not ÷ 8"),
        (h(8), "n_params counts float32 values: 4 bytes each"),
        (h(32, over=lambda r, d: r * d), "only the all-reduce across the replicas crosses the "
         "link (a ring of the R replicas); the one inside a replica runs every step on its own "
         "links, and step_seconds already holds it"),
        (h(32, share=lambda d: Fraction(1, d)), _ONE_SLICE),
        (no_ring, "a ring all-reduce among R replicas sends 2(R − 1)/R of the outer gradient's "
         "bytes, not the bytes once: at this page's R = 2 the factor is 1, so its numbers cannot "
         "tell; at R = 3 it is 4/3"),
        (ring_factor, "a device keeps its own chunk: the ring's factor counts the R − 1 other "
         "replicas, not R"),
        (one_pass, "half the bytes: count both passes of the ring all-reduce (reduce-scatter, then "
         "all-gather), each of 4-byte float32 values"),
        (h(32, rounding=math.floor), "round up, not down: with the H below the ceiling the sync "
         "adds more than the fraction"),
        (h(32, rounding=round), "round up, not to the nearest: the smallest H that keeps within "
         "the fraction"),
    )
    for slip, why in slips:
        if all(slip(*case) == got for case, got in answers):
            return why
    if boundary and all(strict(*case) == got for case, got in answers):
        return "at most the fraction: an H at which the sync adds exactly the fraction fits"
    return ""


_ONE_SLICE = ("the replica's link carries every device's slice: D slices of n/D values, the "
              "whole outer gradient")


def _ignored(fn, case: tuple, got: int) -> str:
    """The argument the answer should follow and does not (or should not and does), found by
    calling ``fn`` again with that argument changed; ``""`` if none."""
    names = ARGS.split(", ")
    changed = {0: case[0] * 3, 1: case[1] + 1, 3: case[3] / 3, 4: case[4] / 3, 5: case[5] / 3,
               2: 1 if case[2] > 1 else 4}  # the devices of a replica: one, or several
    for i, value in changed.items():
        other = list(case)
        other[i] = value
        try:
            again = number(fn(*other))
        except Exception:  # noqa: BLE001 - a probe only: the main call already ran
            continue
        if again is None:
            continue
        moves, should = again != got, expected_h(*other) != expected_h(*case)
        if should and not moves and i in (4, 5):
            return (f"your H does not change with the argument {names[i]}: the sync may add "
                    "only fraction of a step: divide its seconds by fraction · step_seconds")
        if should and not moves:
            return (f"your H does not change with the argument {names[i]}: use the arguments, "
                    "not this notebook's numbers")
        if i == 2 and moves and not should and (again - got) * (value - case[2]) < 0:
            return f"your H falls as {names[i]} grows: {_ONE_SLICE}"
        if i == 2 and moves and not should:
            return (f"your H changes with {names[i]}, which it should not: the devices of a "
                    "replica all-reduce inside it every step, and only the sync across the "
                    "replicas crosses the link")
    return ""


def _how_far(case: tuple, got: int) -> str:
    """What ``got`` does, in the case's terms, without the answer."""
    added = float(_ratio(case)) * case[5] / got  # the sync's share of an inner step at H = got
    if added > case[5]:
        return (f"at that H the sync adds {added:.4g} of an inner step, more than the "
                f"fraction {case[5]:g}: a larger H is needed")
    if got <= expected_h(*case) + 1:  # one more than the smallest: the rounding
        return "a smaller H also keeps the sync within the fraction: return the smallest"
    return (f"at that H the sync adds only {added:.4g} of an inner step, under the fraction "
            f"{case[5]:g} by more than one step's rounding: the sync's seconds are overcounted "
            "(its bytes: the ring's share 2(R − 1)/R, no headers; or the rate's units)")
