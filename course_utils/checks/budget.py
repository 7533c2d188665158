"""Self-check of step 08: the gradient size below which recursive doubling's all-reduce is faster
than the ring's, in the α-β model (the page gives the ring's time and describes recursive
doubling; the student writes its time and solves for the crossing)."""

from __future__ import annotations

import math

import jax

from course_utils.checks.helpers import (
    ExerciseFailed,
    call_without,
    fail,
    function_given,
    number,
    off_by,
    passed,
)
from course_utils.models import latency

TOLERANCE = 1e-3  # relative: every slip below is farther off than this in some case


def crossover_bytes(p: int, alpha_s: float, bytes_per_s: float) -> float:
    """The size N (bytes) below which recursive doubling (log₂ p steps, each sending the whole
    vector: L·α + L·N/B) beats the ring (2(p−1)·α + 2(p−1)/p·N/B); ``math.inf`` where it is
    never slower (p = 2: the same bytes, fewer steps).

    Examples:
        >>> crossover_bytes(2, 5e-6, 12.5e9), round(crossover_bytes(8, 5e-6, 12.5e9))
        (inf, 550000)
    """
    return latency.crossover_bytes(p, alpha_s=alpha_s, bandwidth_bytes_per_s=bytes_per_s)


def _crossing(p, a, b, *, rd_steps=None, rd_share=1.0, ring_steps=None, ring_share=None,
              log=math.log2) -> float:
    """The crossover with one thing changed (the slips): recursive doubling's step count and
    the share of N each of its steps sends, the ring's α steps and the share of N it sends."""
    steps = log(p) if rd_steps is None else rd_steps
    ring_steps = 2 * (p - 1) if ring_steps is None else ring_steps
    ring_share = 2 * (p - 1) / p if ring_share is None else ring_share
    per_byte = steps * rd_share - ring_share  # recursive doubling's extra bytes, per N
    extra_alpha = ring_steps - steps  # the ring's extra messages
    if per_byte <= 1e-12:
        return math.inf if extra_alpha > 0 else 0.0
    return max(0.0, a * b * extra_alpha / per_byte)


# (p, α, B): the page's numbers are added first; the rest the page never shows
_CASES = ((8, 2e-5, 1.25e9), (64, 1e-6, 2.5e10), (1024, 3e-6, 5e10), (16, 1e-5, 1e9),
          (2, 5e-6, 12.5e9))

_SLIPS = {
    "recursive doubling sends the whole vector at each of its log₂ p steps (a rank exchanges "
    "everything it has), not half of it: that is recursive halving":
        lambda p, a, b: _crossing(p, a, b, rd_share=0.5),
    "recursive doubling takes log₂ p steps, not p − 1": lambda p, a, b: _crossing(
        p, a, b, rd_steps=p - 1),
    "the logarithm is base 2: log₂ p steps (math.log2), not the natural log":
        lambda p, a, b: _crossing(p, a, b, log=math.log),
    "the logarithm is base 2: log₂ p steps (math.log2), not log₁₀":
        lambda p, a, b: _crossing(p, a, b, log=math.log10),
    "the ring takes 2(p − 1) steps, not 2p: p − 1, not p": lambda p, a, b: _crossing(
        p, a, b, ring_steps=2 * p, ring_share=2.0),
    "the ring takes 2(p − 1) steps, not 2p": lambda p, a, b: _crossing(p, a, b,
                                                                      ring_steps=2 * p),
    "p·α·B is where the ring's latency term passes its bandwidth term, not where recursive "
    "doubling wins: set the two algorithms' times equal": lambda p, a, b: p * a * b,
    "that is the time at the crossing, not its size: return N in bytes":
        lambda p, a, b: _ring_time(p, a, b, _crossing(p, a, b)),
    "the ring all-reduce is two passes: 2(p − 1) steps and 2(p − 1)/p of N, not one":
        lambda p, a, b: _crossing(p, a, b, ring_steps=p - 1, ring_share=(p - 1) / p),
    "the ring's bytes are 2(p − 1)/p of N per rank (the factor (p − 1)/p is missing)":
        lambda p, a, b: _crossing(p, a, b, ring_share=2.0),
    "the ring pays α at each of its 2(p − 1) steps, not once": lambda p, a, b: _crossing(
        p, a, b, ring_steps=1),
    "give bytes, not bits: bytes_per_s is already in bytes per second":
        lambda p, a, b: 8 * _crossing(p, a, b),
    "bytes_per_s is already in bytes per second: do not divide it by 8":
        lambda p, a, b: _crossing(p, a, b) / 8,
    "alpha_s is already in seconds": lambda p, a, b: _crossing(p, a, b) * 1e6,
    "give bytes, not MiB": lambda p, a, b: _crossing(p, a, b) / 2**20,
    "that is a time in seconds (the crossing's size over bytes_per_s): return the size N in "
    "bytes": lambda p, a, b: _crossing(p, a, b) / b,
}


def check_rd_crossover(fn, *, alpha_s: float, bytes_per_s: float) -> None:
    """Exercise 08: ``fn(p, alpha_s, bytes_per_s)`` → the gradient size in bytes below which
    recursive doubling's all-reduce is faster than the ring's (``crossover_bytes``), within
    ``TOLERANCE``, at the page's α and B for this run's p (or 4) and at cases the page never
    shows, p = 2 (``math.inf``: never slower) included. The package's time models are refused."""
    from course_utils.models.cost_model import modelled_time, ring_time
    from course_utils.models.latency import collective_time

    exercise = "the ring against recursive doubling"
    function_given(exercise, "rd_crossover_bytes", fn)
    p_run = jax.device_count()
    page = (p_run if p_run >= 4 and p_run & (p_run - 1) == 0 else 4, alpha_s, bytes_per_s)
    forbidden = (collective_time, modelled_time, ring_time, crossover_bytes,
                 latency.crossover_bytes)
    answers = []
    for case in (page, *_CASES):
        call = "rd_crossover_bytes({}, {:g}, {:g})".format(*case)
        try:
            got = call_without(exercise, fn, case, forbidden=forbidden, call=call,
                               refusal="rd_crossover_bytes uses the package's {}: write both "
                                       "algorithms' times from the α-β model and solve for N")
        except ExerciseFailed as failed:
            message = str(failed)
            if case[0] != 2 or "ZeroDivisionError" not in message:
                raise
        else:
            message = ""
        if message:  # outside the except: no traceback chained into the package
            fail(exercise, message.split(": ", 1)[1] + "; at p = 2 both send the same bytes "
                 "(log₂ 2 = 1 = 2(p − 1)/p) and recursive doubling takes fewer steps: return "
                 "math.inf")
        value = number(got)
        if value is None or math.isnan(value) or value < 0:
            fail(exercise, f"{call} must return one number of bytes ≥ 0 (math.inf where "
                 f"recursive doubling is never slower); got {got!r}")
        answers.append((case, call, value))
    for case, call, value in answers:
        want = crossover_bytes(*case)
        if math.isinf(want) or math.isinf(value):
            if math.isinf(want) != math.isinf(value):
                fail(exercise, f"{call} gives {value:g}, but at p = {case[0]} "
                     + ("recursive doubling is never slower: the same bytes (2(p − 1)/p = 1 "
                        "of N, log₂ 2 = 1 step's whole vector) in fewer steps; return math.inf"
                        if math.isinf(want) else "the two cross at a finite size")
                     + _slip(answers))
            continue
        if not math.isclose(value, want, rel_tol=TOLERANCE):
            where = "" if case is page else " (a case the page never shows)"
            fail(exercise, f"{call}: {off_by(value, want)}{where}{_slip(answers)}")
    passed(exercise, f"{crossover_bytes(*page):,.0f} bytes at p = {page[0]} with the page's α "
                     f"and B; right at {len(_CASES)} cases more, p = 2 (never slower) included")


def _ring_time(p, a, b, nbytes):
    return 2 * (p - 1) * a + 2 * (p - 1) / p * nbytes / b


def _slip(answers: list) -> str:
    """``"; "`` and the slip that explains the answers in every finite case, or a hint."""
    for why, slip in _SLIPS.items():
        if all(_close(value, slip(*case)) for case, _, value in answers):
            return f"; {why}"
    (p0, a0, b0), _, _ = answers[0]
    typed = {"p": lambda p, a, b: crossover_bytes(p0, a, b),
             "alpha_s and bytes_per_s": lambda p, a, b: crossover_bytes(p, a0, b0),
             "alpha_s": lambda p, a, b: crossover_bytes(p, a0, b),
             "bytes_per_s": lambda p, a, b: crossover_bytes(p, a, b0)}
    for name, slip in typed.items():
        if all(_close(value, slip(*case)) for case, _, value in answers):
            return (f"; that is the crossover at the page's {name} in every case: use the "
                    f"argument{'s' if ' and ' in name else ''} {name}")
    return ("; write each algorithm's time, α per step and N/B per byte sent, set them equal "
            "and solve for N")


def _close(a: float, b: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return math.isinf(a) and math.isinf(b)
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-9)
