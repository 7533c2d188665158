"""Step 22's exercise check: the slowest link rate at which one fragment's quantized sync still
hides behind the τ inner steps it overlaps (Streaming DiLoCo)."""

from __future__ import annotations

import math
import random

import numpy as np

from course_utils.checks.forbidden import public_name, uses_forbidden
from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.links import FRAME_SHARE

TOLERANCE = 0.02  # relative: every slip below is at least 4.5 % off in each case the check tries
SCALE_EVERY = 64  # values per f32 scale (the package's ``training.quantize.BLOCK``)


def hiding_rate_bits(n_params: int, fragments: int, bits: int, hosts: int, tau: int,
                     step_s: float) -> float:
    """The slowest link rate, in payload bit/s, at which one fragment's sync ends within
    ``tau`` inner steps of ``step_s``: the fragment's ``n_params / fragments`` values sent as
    ``bits``-bit codes with one 4-byte scale per ``SCALE_EVERY`` values, through a ring
    all-reduce among ``hosts`` (a host's link carries 2(R − 1)/R of them: a reduce-scatter and
    an all-gather).

    Examples:
        >>> round(hiding_rate_bits(2**20, 4, 4, 2, 2, 0.05) / 1e6, 2)  # Mbit/s
        11.8
    """
    values = n_params / fragments
    fragment_bytes = values * bits / 8 + values / SCALE_EVERY * 4
    return 8 * 2 * (hosts - 1) / hosts * fragment_bytes / (tau * step_s)


def _with(n, f, bits, hosts, tau, step_s, *, per_byte=8.0, fragments=None, share=None,
          scales=True, value_bytes=None, steps=None, scale_bytes=4.0):
    """``hiding_rate_bits`` with one thing changed (a slip a student makes)."""
    values = n / (f if fragments is None else fragments)
    each = bits / 8 if value_bytes is None else value_bytes
    fragment_bytes = values * each + (values / SCALE_EVERY * scale_bytes if scales else 0.0)
    part = 2 * (hosts - 1) / hosts if share is None else share
    return per_byte * part * fragment_bytes / ((tau if steps is None else steps) * step_s)


_SLIPS = {
    "that is bytes per second: the rate is in bits per second, 8 per byte":
        lambda *a: _with(*a, per_byte=1.0),
    "bytes to bits is × 8, not ÷ 8: the rate is in bits per second":
        lambda *a: _with(*a, per_byte=1 / 8),
    "each value is bits / 8 bytes, not bits bytes (a 4-bit code is half a byte)":
        lambda *a: _with(*a, value_bytes=a[2]),
    "one fragment is n_params / fragments values: only that part of the model syncs at once":
        lambda *a: _with(*a, fragments=1),
    "a host never sends its own chunk to itself: the ring moves 2(R − 1)/R of the fragment, "
    "not 2 whole copies": lambda *a: _with(*a, share=2.0),
    "each pass of the ring moves (R − 1)/R of the fragment, not R − 1 copies":
        lambda *a: _with(*a, share=2.0 * (a[3] - 1)),
    "an all-reduce is two passes of the ring (reduce-scatter, then all-gather): 2(R − 1)/R, "
    "not (R − 1)/R": lambda *a: _with(*a, share=(a[3] - 1) / a[3]),
    "the ring's share is missing: a ring all-reduce puts 2(R − 1)/R of the fragment on each "
    "host's link (1 only at 2 hosts, this page's count)": lambda *a: _with(*a, share=1.0),
    "the scales travel too: one 4-byte scale per 64 values":
        lambda *a: _with(*a, scales=False),
    "one 4-byte scale per 64 values, not one per value": lambda *a: _with(*a, scale_bytes=256.0),
    "a scale is an f32: 4 bytes (32 bits), not 4 bits": lambda *a: _with(*a, scale_bytes=0.5),
    "the codes are `bits` bits each, not a whole f32": lambda *a: _with(*a, value_bytes=4.0),
    "the values go as `bits`-bit codes with their scales, not as f32 values (that is the "
    "sync unquantized)": lambda *a: _with(*a, value_bytes=4.0, scales=False),
    "the codes are `bits` bits each, not a whole byte": lambda *a: _with(*a, value_bytes=1.0),
    "a `bits`-bit code is bits / 8 bytes, not 1 / bits (8 / bits is codes per byte)":
        lambda *a: _with(*a, value_bytes=1 / a[2]),
    "that counts frame headers: the rate asked is of payload (FRAME_SHARE left out)":
        lambda *a: hiding_rate_bits(*a) / FRAME_SHARE,
    "the rate asked is the payload's, before headers: FRAME_SHARE does not belong in it":
        lambda *a: hiding_rate_bits(*a) * FRAME_SHARE,
    "the sync overlaps tau inner steps, not tau + 1": lambda *a: _with(*a, steps=a[4] + 1),
    "the sync has tau inner steps to hide behind, not one": lambda *a: _with(*a, steps=1),
    "that is Mbit/s: return bit/s": lambda *a: hiding_rate_bits(*a) / 1e6,
}

# (n_params, fragments, bits, hosts, tau, step_s) the page never shows: int8 and 4-bit, 3 to 8
# hosts (so that R, R − 1 and the ring's share tell apart), τ from 1 to 8
_UNSEEN = ((1_118_208, 4, 4, 3, 2, 0.06), (4_194_304, 8, 8, 4, 4, 0.2),
           (262_144, 2, 4, 8, 1, 0.01), (65_536_000, 16, 8, 5, 8, 0.5))


def _fresh_case(rng: random.Random) -> tuple:
    """One more case, drawn anew at every check: hosts ≥ 3 (so that hosts and hosts − 1 tell
    apart), τ ≥ 2 (so that one step and τ do)."""
    fragments, hosts = rng.choice((2, 4, 8, 16)), rng.randint(3, 9)
    return (fragments * hosts * SCALE_EVERY * rng.randint(100, 5_000), fragments,
            rng.choice((4, 8)), hosts, rng.randint(2, 8), round(10 ** rng.uniform(-2.3, -0.3), 4))


def check_slowest_hidden_rate(fn, *, n_params: int, fragments: int, bits: int, hosts: int,
                              tau: int, step_s: float) -> None:
    """Exercise 22: ``fn(n_params, fragments, bits, hosts, tau, step_s)`` → the slowest link
    rate in payload bit/s at which one fragment's quantized sync hides behind ``tau`` inner
    steps (``hiding_rate_bits``), within ``TOLERANCE``, at the exercise's numbers and at cases
    the page never shows (one drawn anew at every call). The check's own model and the
    package's byte and time models (``byte_models.BYTE_MODELS``: the registry's model of one
    sync, ``sync_link_bytes``, ``exchange_bytes``, the ring's models, …) are refused."""
    exercise = "the slowest rate that still hides a fragment's sync"
    function_given(exercise, "my_slowest_rate", fn)
    from course_utils.checks.byte_models import BYTE_MODELS

    if uses_forbidden(fn, (hiding_rate_bits,)) is not None:
        fail(exercise, "my_slowest_rate uses the check's own hiding_rate_bits, which computes "
                       "the answer: write the fragment's bytes and its time yourself")
    if (name := uses_forbidden(fn, BYTE_MODELS)) is not None:
        name = next(public_name(f) for f in BYTE_MODELS if f.__name__ == name)  # as on the page
        fail(exercise, f"my_slowest_rate uses the package's {name}, which counts the sync's "
                       "bytes for you: count the codes, the scales and the ring's share "
                       "yourself")
    first = (n_params, fragments, bits, hosts, tau, step_s)
    cases = (first, *_UNSEEN, _fresh_case(random.Random()))
    answers = []
    for case in cases:
        call = "my_slowest_rate({}, {}, {}, {}, {}, {:g})".format(*case)
        raw = call_without(exercise, fn, case, forbidden=(), call=call, refusal="")
        got = number(raw)
        if got is None or not math.isfinite(got) or got <= 0:
            fail(exercise, f"{call} must return one positive number of bit/s, got {raw!r}")
        answers.append((case, call, got))
    for case, call, got in answers:
        want = hiding_rate_bits(*case)
        if not np.isclose(got, want, rtol=TOLERANCE):
            if case is not first and np.isclose(got, answers[0][2], rtol=1e-9):
                fail(exercise, f"right at this notebook's numbers, but {call} gives the same "
                               "number: compute the rate from the arguments")
            where = "" if case is first else f" (a case the page never shows: {call})"
            fail(exercise, f"{off_by(got, want)}{where}; {_slip(answers)}")
    passed(exercise, f"{answers[0][2] / 1e6:,.1f} Mbit/s at the exercise's numbers; and at "
                     f"{len(cases) - 1} other cases")


def _slip(answers: list) -> str:
    """The slip that explains the answers in every case, else a hint that does not give the
    model away."""
    for why, model in _SLIPS.items():
        if all(np.isclose(got, model(*case), rtol=TOLERANCE / 2) for case, _, got in answers):
            return why
    if np.isclose(answers[0][2], hiding_rate_bits(*answers[0][0]), rtol=TOLERANCE):
        return "right at this notebook's numbers only: use the function's arguments"
    return ("the rate at which the bits one host's link carries for one fragment's sync take "
            "exactly the seconds of tau inner steps")
