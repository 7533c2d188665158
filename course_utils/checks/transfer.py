"""Step 23's exercise check: the time one fresh TCP connection takes to send a sync, from
``connect()`` to the receiver's reply, through slow start."""

from __future__ import annotations

import math
import random

from course_utils.checks.helpers import (
    call_without,
    fail,
    function_given,
    number,
    off_by,
    passed,
    scalar,
)
from course_utils.models.window import (
    INITIAL_WINDOW,
    MSS,
    bdp_bytes,
    slow_start_s,
    window_rate,
)

EXERCISE = "one connection's transfer time"
NAME = "my_transfer_time"
ARGUMENTS = ("size_bytes", "rate_bits", "rtt_s")
TOLERANCE = 1e-6  # relative: the right time, and a slip's, in any float order


def expected_seconds(size_bytes: float, rate_bits: float, rtt_s: float) -> float:
    """The model's seconds (``models.window.slow_start_s``) at a rate given in bits per second.

    Examples:
        >>> round(expected_seconds(2**20, 50e6, 0.1), 4)  # 1 MiB at 50 Mbit/s over 100 ms
        0.8218
    """
    return slow_start_s(size_bytes, rate_bits / 8, rtt_s)


# (bytes, bit/s, s) the page never uses: the transfer ends inside slow start; the window covers
# the BDP from the first round (BDP 10,000 bytes); a round's window equals what is left exactly
# (1 + 2 + 4 windows sent, 8 left: the rounds stop there, in any float order); a long transfer
# past the BDP; a size that takes 3 rounds of 1448-byte segments but 2 of 1460-byte ones.
# Together with the page's case they tell every slip of ``_SLIPS`` from the right time and from
# each other (tests/test_transfer_check.py).
_IN_SLOW_START = (120_000, 1e9, 0.05)
_BDP_AT_ONCE = (3_000_000, 2e6, 0.04)
_EXACT = (15 * INITIAL_WINDOW, 1e8, 0.02)
_LONG = (50_000_000, 1e9, 0.03)
_SEGMENT = (101_800, 1e9, 0.02)
_UNSEEN = (_IN_SLOW_START, _BDP_AT_ONCE, _EXACT, _LONG, _SEGMENT)


def _fresh_case(rng: random.Random) -> tuple:
    """One more case, drawn anew at every check: answers looked up in a table made beforehand
    cannot know it. Drawn again until it has a slow-start round, reaches the BDP before the end
    and what is left is not within a millionth of a round's window (no rounding decides it)."""
    while True:
        case = (int(10 ** rng.uniform(5, 9)), float(f"{10 ** rng.uniform(6.5, 10):.3g}"),
                float(f"{10 ** rng.uniform(-2.5, -0.5):.3g}"))
        size, rate, rtt = case[0], case[1] / 8, case[2]
        if not INITIAL_WINDOW < rate * rtt < size / 4:
            continue
        rounds = math.log2(size / INITIAL_WINDOW + 1)  # a whole number: left == window
        if abs(rounds - round(rounds)) > 1e-6:
            return case


def check_transfer_time(fn, *, size_bytes: float, rate_bits: float, rtt_s: float) -> None:
    """Exercise 23: ``fn(size_bytes, rate_bits, rtt_s)`` → seconds from ``connect()`` until the
    sender reads the receiver's reply saying it has all ``size_bytes``, on one fresh connection
    (the initial window 10 segments of 1448 bytes, doubling every round trip until it covers the
    bandwidth-delay product, then the link's rate; ``expected_seconds``), within ``TOLERANCE``,
    at the exercise's numbers, at cases the page never uses (one that ends inside slow start, one
    whose window covers the BDP at once, one where a round's window equals what is left) and at a
    case drawn anew. ``fn`` must not call ``models.window``'s functions; a wrong answer is matched
    against each known slip at every case."""
    function_given(EXERCISE, NAME, fn)
    forbidden = (slow_start_s, window_rate, bdp_bytes, expected_seconds)
    page = (size_bytes, rate_bits, rtt_s)
    cases = (page, *_UNSEEN, _fresh_case(random.Random()))
    answers = []
    for case in cases:
        call = f"{NAME}({', '.join(_written(v) for v in case)})"
        got = call_without(EXERCISE, fn, case, forbidden=forbidden, call=call,
                           refusal=f"{NAME} uses the package's {{}}, one of the window models "
                                   "this exercise asks you to write: write the handshake, the "
                                   "slow-start rounds and the rest at the link's rate yourself")
        value = number(got)
        if value is None or not math.isfinite(value) or value <= 0:
            fail(EXERCISE, f"{call} must return one number of seconds above 0, got {got!r}")
        answers.append((case, call, value))
    wrong = [(case, call, value) for case, call, value in answers
             if not _close(value, expected_seconds(*case))]
    if not wrong:
        passed(EXERCISE, f"{_figure(expected_seconds(*page))} s for the page's "
                         f"{size_bytes:,.0f} bytes at {rate_bits / 1e6:g} Mbit/s, rtt "
                         f"{rtt_s * 1e3:g} ms; right at {len(cases) - 1} other cases")
        return
    case, call, value = wrong[0]
    where = "" if case is page else " (a case the page never shows)"
    why, how = _slip(answers, page), off_by(value, expected_seconds(*case))
    rounding = ": close, so check for rounding too early"
    if how.endswith(rounding):  # a slip named is not a rounding; nor is a gap above 1e-4
        tiny = abs(value / expected_seconds(*case) - 1) < 1e-4
        how = how.removesuffix(rounding) + ("" if why != _WHAT else rounding if tiny else
                                            ": close, so check each constant and term (the "
                                            "segment's 1448 bytes, rtt_s, the rate, the last "
                                            "bytes) and any rounding")
    fail(EXERCISE, f"{call}: {how}{where}; {why}")


def _written(value) -> str:
    """An argument as short as Python reads it back exactly: the call can be re-run."""
    short = f"{value:g}"
    return short if float(short) == value else repr(scalar(value))


def _figure(seconds: float) -> str:
    """Seconds to 3 significant digits, without an exponent for a figure the page prints."""
    return format(float(f"{seconds:.3g}"), ",g")


def _close(value: float, want: float) -> bool:
    return math.isclose(value, want, rel_tol=TOLERANCE)


def _model(size, rate_bits, rtt, *, bits=(8, 8), window=INITIAL_WINDOW, doubling=True,
           switch=True, last=False, wire=False, handshake=1.0, reply=1.0) -> float:
    """The transfer's seconds with one slip switched on: ``bits`` the divisors of ``rate_bits``
    in the BDP and in the time at the rate, the initial ``window``, linear growth, no switch at
    the BDP, a round where the window equals what is left (``last``), a round's bytes' time on
    the wire added, the handshake's and the reply's round trips."""
    bdp, rate = rate_bits / bits[0] * rtt, rate_bits / bits[1]
    seconds, left = handshake * rtt, size
    while (left >= window if last else left > window) and (not switch or window < bdp):
        seconds += rtt + (window / rate if wire else 0.0)
        left -= window
        window = 2 * window if doubling else window + MSS
    return seconds + left / rate + reply * rtt


def _rounds_only(size, rate_bits, rtt) -> float:
    """Every byte in slow-start rounds, the last one too, each a round trip; the handshake."""
    seconds, left, window = rtt, size, INITIAL_WINDOW
    while left > 0:
        seconds, left, window = seconds + rtt, left - window, 2 * window
    return seconds


def _last_as_round(size, rate_bits, rtt) -> float:
    """Slow-start rounds until every byte is out, the last window a round trip too, then one
    round trip for the reply."""
    seconds, left, window, rate = rtt, size, INITIAL_WINDOW, rate_bits / 8
    while left > 0 and window < rate * rtt:
        seconds, left, window = seconds + rtt, left - window, 2 * window
    return seconds + max(left, 0.0) / rate + rtt


_ROUND_TRIP = ("rtt_s is the round trip already: the handshake, each round and the last byte "
               "with its reply take rtt_s each, not half of it")
# each slip: its message, and the forms it takes (each: the seconds at a case), in the order
# they are tried; tests/test_transfer_check.py keeps every form apart from the right time and
# from the others' at the fixed cases
_SLIPS = (
    ("that is milliseconds: return seconds",
     [lambda *c: 1e3 * expected_seconds(*c)]),
    ("one round trip short: add the handshake (connect() takes one round trip, SYN out and "
     "SYN-ACK back, before the first byte goes), or, if you have it, the reply at the end (the "
     "last byte's flight and the receiver's reply take one whole rtt_s)",
     [lambda *c: _model(*c, handshake=0.0)]),
    ("the reply comes back too: the last byte's flight (half a round trip) and the receiver's "
     "reply (the other half) take one whole rtt_s at the end",
     [lambda *c: _model(*c, reply=0.5)]),
    ("that is a round trip plus the bytes at the link's rate: a fresh connection first "
     "connects (one round trip), and its window starts at 10 segments of 1448 bytes and "
     "doubles every round trip until it covers the bandwidth-delay product",
     [lambda size, bits, rtt: rtt + 8 * size / bits, lambda size, bits, rtt: 8 * size / bits,
      lambda size, bits, rtt: rtt / 2 + 8 * size / bits]),
    ("a fresh connection does not start at the link's rate: its window starts at 10 segments "
     "of 1448 bytes and doubles every round trip until it covers the bandwidth-delay product",
     [lambda *c: _model(*c, window=math.inf)]),
    ("rate_bits is in bits per second: divide it by 8 for bytes per second, in the "
     "bandwidth-delay product and in the time at the link's rate",
     [lambda *c: _model(*c, bits=(1, 1)), lambda *c: _model(*c, bits=(1, 8)),
      lambda *c: _model(*c, bits=(8, 1))]),
    ("bytes per second are rate_bits / 8, not rate_bits × 8",
     [lambda *c: _model(*c, bits=(1 / 8, 1 / 8))]),
    ("the initial window is 10 segments of 1448 bytes: 14,480 bytes, not 10",
     [lambda *c: _model(*c, window=10)]),
    ("the initial window is 10 segments (Linux, RFC 6928), not one",
     [lambda *c: _model(*c, window=MSS), lambda *c: _model(*c, window=1)]),
    ("in slow start the window doubles every round trip (each ACK adds a segment), not one "
     "segment more per round", [lambda *c: _model(*c, doubling=False)]),
    (_ROUND_TRIP, [lambda size, bits, rtt: _model(size, bits, rtt / 2)]),
    ("once the window covers the bandwidth-delay product (rate · rtt) the link's rate limits, "
     "not the window: send the rest at the rate, with no more rounds",
     [lambda *c: _model(*c, switch=False), _rounds_only]),
    ("where a round's window holds exactly what is left, that round is the last: the rounds go "
     "on while more than the window is left (left > window)",
     [lambda *c: _model(*c, last=True)]),
    ("a round takes one rtt_s in this model: leave out the time to put its window on the wire",
     [lambda *c: _model(*c, wire=True)]),
    ("a segment carries 1448 bytes here (a 1500-byte MTU less IP, TCP and its timestamps), not "
     "1460: the initial window is 14,480 bytes", [lambda *c: _model(*c, window=10 * 1460)]),
    ("the last bytes are not a round of their own: once no more than the window is left they "
     "go at the link's rate (left / rate), and one rtt_s covers their last byte's flight and "
     "the reply", [_last_as_round, lambda size, bits, rtt: _last_as_round(size, bits, rtt) - rtt]),
)


def _matches(answers, form) -> bool:
    """Whether ``form`` gives every answer, each at its case."""
    return all(_close(value, form(*case)) for case, _, value in answers)


def _slip(answers, page) -> str:
    """The slip that explains the answers at every case, or what to compute."""
    if len({value for _, _, value in answers}) == 1:
        return ("your time is the same at every case: write it from the arguments, not a "
                "number worked out once")
    for why, forms in _SLIPS:
        if any(_matches(answers, form) for form in forms):
            return why
    for i, name in enumerate(ARGUMENTS):  # one argument fixed at the page's value
        def typed(*case, i=i):
            return expected_seconds(*(page[i] if k == i else v for k, v in enumerate(case)))

        if _matches(answers, typed):
            return f"your time does not change with {name}: use the arguments, not this page's"
    return _WHAT


_WHAT = ("one round trip to connect; then rounds of one round trip each (the window starting at "
         "10 segments of 1448 bytes and doubling) while more than the window is left and the "
         "window is below the bandwidth-delay product; then the rest at the link's rate, and one "
         "round trip for its last byte to arrive and the reply to come back")
