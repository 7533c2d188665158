"""Step 23's slow-start model (``models.window``) and its exercise check: one fresh connection's
time from connect() to the receiver's reply, right in every natural form, each slip named at
every case, the package's model refused."""

import itertools
import math
import random

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from notebook_cell import answer

from course_utils.checks import check_transfer_time, transfer
from course_utils.checks.helpers import ExerciseFailed
from course_utils.models.window import (
    INITIAL_WINDOW,
    MSS,
    bdp_bytes,
    slow_start_s,
    window_rate,
)

IW = 14_480  # 10 segments of 1448 bytes, written out as a student would

# the model


def test_the_window_is_ten_full_segments():
    assert (MSS, INITIAL_WINDOW) == (1448, IW)


def test_the_time_grows_with_the_size_across_every_switch():
    sizes = np.linspace(1, 40 * IW, 4001)  # inside slow start, at the BDP (8 IW), past it
    times = [slow_start_s(s, 1e7, 0.01) for s in sizes]
    assert np.all(np.diff(times) > 0)


def test_a_link_whose_bdp_the_first_window_covers_runs_at_its_rate_from_the_start():
    size, rate, rtt = 5e6, 1e5, 0.1  # BDP 10,000 bytes < 14,480
    assert bdp_bytes(rate, rtt) < INITIAL_WINDOW
    assert slow_start_s(size, rate, rtt) == pytest.approx(rtt + size / rate + rtt, rel=1e-12)


def test_two_hand_worked_cases():
    # a BDP far above the size: rounds of 1, 2 and 4 windows, then 1,000 bytes are left
    size, rate, rtt = 7 * IW + 1000, 1e9, 0.02
    assert slow_start_s(size, rate, rtt) == pytest.approx(rtt + 3 * rtt + 1000 / rate + rtt)
    # a BDP of 3 windows: rounds of 1 and 2 windows; the next (4) covers it: the rate from there
    rate, rtt = 3 * IW / 0.05, 0.05
    size = 1e6
    assert slow_start_s(size, rate, rtt) == pytest.approx(
        rtt + 2 * rtt + (size - 3 * IW) / rate + rtt)


def test_a_round_whose_window_holds_what_is_left_is_the_last():
    rate, rtt = 1e9, 0.02
    at = slow_start_s(3 * IW, rate, rtt)  # 1 window, then 2 left in a window of 2: the last
    assert at == pytest.approx(rtt + rtt + 2 * IW / rate + rtt)
    assert slow_start_s(3 * IW + 1, rate, rtt) - at == pytest.approx(rtt - 2 * IW / rate, rel=1e-3)


def test_window_rate_and_the_bdp():
    assert window_rate(IW, 0.1, 1e9) == pytest.approx(IW / 0.1)
    assert window_rate(IW, 0.1, 1e5) == 1e5  # the link limits
    assert window_rate(IW, 0.1, 1e9, connections=3) == pytest.approx(3 * IW / 0.1)
    assert bdp_bytes(1e6, 0.25) == 250_000


@pytest.mark.parametrize("call, message", [
    (lambda: slow_start_s(0, 1e6, 0.1), "size_bytes must be a finite number above 0, got 0"),
    (lambda: slow_start_s(1e6, -1e6, 0.1), "rate_bytes_per_s must be a finite number above 0"),
    (lambda: slow_start_s(1e6, 1e6, math.nan), "rtt_s must be a finite number above 0"),
    (lambda: slow_start_s(1e6, 1e6, "0.1"), "rtt_s must be a finite number above 0, got '0.1'"),
    (lambda: slow_start_s(True, 1e6, 0.1), "size_bytes must be a finite number above 0"),
    (lambda: slow_start_s(1e6, 1e6, 0.1, initial_window=0), "initial_window must be a finite"),
    (lambda: bdp_bytes(1e6, 0), "rtt_s must be a finite number above 0"),
    (lambda: window_rate(IW, 0.1, 1e6, connections=0), "connections must be a positive integer"),
])
def test_bad_input_to_the_model_says_what_to_give(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# the check

STEP_23 = {"size_bytes": 4_456_448, "rate_bits": 200e6, "rtt_s": 0.05}

RIGHT_FORMS = {  # a student's own forms, as cells
    "a while loop": "def my_transfer_time(size_bytes, rate_bits, rtt_s):\n"
                    "    rate = rate_bits / 8\n"
                    "    t, left, window = rtt_s, size_bytes, 10 * 1448\n"
                    "    while left > window and window < rate * rtt_s:\n"
                    "        t += rtt_s\n"
                    "        left -= window\n"
                    "        window *= 2\n"
                    "    return t + left / rate + rtt_s\n",
    "a closed form with logs": "import math\n"
                               "def my_transfer_time(size_bytes, rate_bits, rtt_s):\n"
                               "    rate, iw = rate_bits / 8, 14480\n"
                               "    k_size = math.ceil(math.log2(size_bytes / iw + 1)) - 1\n"
                               "    k_bdp = max(0, math.ceil(math.log2(rate * rtt_s / iw)))\n"
                               "    k = min(k_size, k_bdp)\n"
                               "    sent = iw * (2 ** k - 1)\n"
                               "    return (k + 2) * rtt_s + (size_bytes - sent) / rate\n",
    "numpy": "def my_transfer_time(size_bytes, rate_bits, rtt_s):\n"
             "    rate = rate_bits / 8\n"
             "    windows = 14480 * 2.0 ** np.arange(60)\n"
             "    before = np.concatenate([[0.0], np.cumsum(windows)[:-1]])\n"
             "    stop = (size_bytes - before <= windows) | (windows >= rate * rtt_s)\n"
             "    k = np.argmax(stop)\n"
             "    return rtt_s * (k + 2) + (size_bytes - before[k]) / rate\n",
    "the BDP's boundary either way": "def my_transfer_time(size_bytes, rate_bits, rtt_s):\n"
                                     "    rate = rate_bits / 8\n"
                                     "    t, left, window = rtt_s, size_bytes, 14480\n"
                                     "    while left > window and window <= rate * rtt_s:\n"
                                     "        t, left, window = t + rtt_s, left - window, "
                                     "2 * window\n"
                                     "    return t + left / rate + rtt_s\n",
}


@pytest.mark.parametrize("form", RIGHT_FORMS)
def test_every_natural_form_of_the_right_time_passes(form, capsys):
    check_transfer_time(answer(RIGHT_FORMS[form], "my_transfer_time", np=np), **STEP_23)
    assert capsys.readouterr().out == (
        "PASSED: one connection's transfer time (0.555 s for the page's 4,456,448 bytes at "
        "200 Mbit/s, rtt 50 ms; right at 6 other cases)\n")


def test_numpy_and_jax_scalars_pass(capsys):
    loop = answer(RIGHT_FORMS["a while loop"], "my_transfer_time")
    check_transfer_time(lambda *case: np.float64(loop(*case)), **STEP_23)
    check_transfer_time(lambda *case: jnp.asarray(loop(*case), jnp.float32) * 1.0, **STEP_23)
    assert capsys.readouterr().out.count("PASSED") == 2


def _time(*, bits=8, bdp_bits=None, window=IW, linear=False, switch=True, last=False,
          wire=False, handshake=1.0, reply=1.0, half=False, result=None):
    """The time written by hand, with one slip switched on by its argument; ``result(t, size,
    rate_bits, rtt)`` returns something other than the time."""

    def my_transfer_time(size_bytes, rate_bits, rtt_s):
        rtt = rtt_s / 2 if half else rtt_s
        rate, bdp = rate_bits / bits, rate_bits / (bdp_bits or bits) * rtt
        t, left, w = handshake * rtt, size_bytes, window
        while (left >= w if last else left > w) and (not switch or w < bdp):
            t += rtt + (w / rate if wire else 0.0)
            left -= w
            w = w + 1448 if linear else 2 * w
        t += left / rate + reply * rtt
        return t if result is None else result(t, size_bytes, rate_bits, rtt_s)

    return my_transfer_time


def _rounds_only(size_bytes, rate_bits, rtt_s):
    t, left, w = rtt_s, size_bytes, IW
    while left > 0:
        t, left, w = t + rtt_s, left - w, 2 * w
    return t


_RIGHT = _time()
SLIPS = [  # (the page's common wrong answers, with the messages the lead quotes)
    (_time(handshake=0.0), "one round trip short: add the handshake \\(connect\\(\\) takes"),
    (_time(reply=0.0), "or, if you have it, the reply at the end"),
    (_time(reply=0.5), "the reply comes back too"),
    (_time(result=lambda t, s, b, r: r + 8 * s / b), "that is a round trip plus the bytes"),
    (_time(result=lambda t, s, b, r: r / 2 + 8 * s / b), "that is a round trip plus the bytes"),
    (_time(result=lambda t, s, b, r: 8 * s / b), "that is a round trip plus the bytes"),
    (_time(result=lambda t, s, b, r: r + 8 * s / b + r), "does not start at the link's rate"),
    (_time(bits=1), "rate_bits is in bits per second: divide it by 8"),
    (_time(bdp_bits=1), "rate_bits is in bits per second: divide it by 8"),
    (_time(bits=1, bdp_bits=8), "rate_bits is in bits per second: divide it by 8"),
    (_time(bits=1 / 8), "rate_bits / 8, not rate_bits × 8"),
    (_time(window=10), "14,480 bytes, not 10"),
    (_time(window=1448), "10 segments \\(Linux, RFC 6928\\), not one"),
    (_time(window=1), "10 segments \\(Linux, RFC 6928\\), not one"),
    (_time(linear=True), "doubles every round trip"),
    (_time(half=True), "rtt_s is the round trip already"),
    (_time(switch=False), "once the window covers the bandwidth-delay product"),
    (_rounds_only, "once the window covers the bandwidth-delay product"),
    (_time(last=True), "that round is the last"),
    (_time(wire=True), "leave out the time to put its window on the wire"),
    (lambda *case: 0.555, "the same at every case: write it from the arguments"),
    (lambda *case: 1, "the same at every case: write it from the arguments"),
    (_time(result=lambda t, s, b, r: 1000 * t), "that is milliseconds: return seconds"),
    (lambda s, b, r: _RIGHT(4_456_448, b, r), "does not change with size_bytes"),
    (lambda s, b, r: _RIGHT(s, 200e6, r), "does not change with rate_bits"),
    (lambda s, b, r: _RIGHT(s, b, 0.05), "does not change with rtt_s"),
    (_time(result=lambda t, s, b, r: t + r / 4), "one round trip to connect; then rounds"),
    (_time(result=lambda t, s, b, r: round(t, 2)), "close, so check each constant and term "
                                                   "\\(the segment's 1448 bytes, rtt_s, the rate, "
                                                   "the last bytes\\) and any rounding; one round"),
    (_time(result=lambda t, s, b, r: t * (1 + 3e-6)), "close, so check for rounding too early; one "
                                                     "round trip"),
    (_time(window=10 * 1460), "a segment carries 1448 bytes here"),
]


@pytest.mark.parametrize("fn, message", SLIPS, ids=[m for _, m in SLIPS])
def test_each_slip_is_named(fn, message, capsys):
    with pytest.raises(ExerciseFailed, match=message) as failed:
        check_transfer_time(fn, **STEP_23)
    assert "\n" not in str(failed.value)
    assert "rounding" in message or "rounding" not in str(failed.value)  # a slip named
    assert "PASSED" not in capsys.readouterr().out


def test_every_slip_differs_from_the_right_time_and_from_the_others_at_the_fixed_cases():
    forms = [(why, form) for why, slip_forms in transfer._SLIPS for form in slip_forms]
    cases = transfer._UNSEEN
    right = [transfer.expected_seconds(*case) for case in cases]

    def apart(a, b):  # the largest relative difference over the cases
        return max(abs(x - y) / max(abs(x), abs(y)) for x, y in zip(a, b))

    values = [(why, [form(*case) for case in cases]) for why, form in forms]
    assert all(apart(v, right) > 1e-3 for _, v in values)
    for (why, v), (other, w) in itertools.combinations(values, 2):
        assert why == other or apart(v, w) > 1e-3, (why, other)


def test_a_right_answer_only_at_the_fixed_cases_fails_at_the_one_drawn_anew():
    table = {case: transfer.expected_seconds(*case)
             for case in (tuple(STEP_23.values()), *transfer._UNSEEN)}

    def looked_up(*case):
        return table.get(case, 1.0)

    with pytest.raises(ExerciseFailed, match="a case the page never shows"):
        check_transfer_time(looked_up, **STEP_23)


def test_the_drawn_case_reaches_the_bdp_after_a_round_and_away_from_a_window_boundary():
    rng = random.Random(0)
    for _ in range(200):
        size, rate_bits, rtt = transfer._fresh_case(rng)
        assert INITIAL_WINDOW < bdp_bytes(rate_bits / 8, rtt) < size / 4
        rounds = math.log2(size / INITIAL_WINDOW + 1)
        assert abs(rounds - round(rounds)) > 1e-6


def test_the_package_model_is_refused_and_bad_input_gets_a_short_message():
    def shortcut(size_bytes, rate_bits, rtt_s):
        from course_utils.models.window import slow_start_s
        return slow_start_s(size_bytes, rate_bits / 8, rtt_s)

    def through_the_module(size_bytes, rate_bits, rtt_s):
        import course_utils.models.window as window
        return window.slow_start_s(size_bytes, rate_bits / 8, rtt_s)

    def with_the_bdp(size_bytes, rate_bits, rtt_s):
        bdp = bdp_bytes(rate_bits / 8, rtt_s)
        return _RIGHT(size_bytes, rate_bits, rtt_s) + 0 * bdp

    class Model:  # the model behind a callable instance and a bound method
        def __call__(self, size_bytes, rate_bits, rtt_s):
            return slow_start_s(size_bytes, rate_bits / 8, rtt_s)

        def time(self, size_bytes, rate_bits, rtt_s):
            return self(size_bytes, rate_bits, rtt_s)

    class Mine:  # a callable instance of the student's own rounds passes
        def __call__(self, size_bytes, rate_bits, rtt_s):
            return _RIGHT(size_bytes, rate_bits, rtt_s)

    class Held:  # the model kept on the class or on the instance
        static = staticmethod(slow_start_s)

        def __init__(self, model):
            self.model = model

        def __call__(self, size_bytes, rate_bits, rtt_s):
            return self.model(size_bytes, rate_bits / 8, rtt_s)

    check_transfer_time(Mine(), **STEP_23)
    for fn, message in [
        (Held(slow_start_s), "uses the package's slow_start_s"),
        (Held(Held.static), "uses the package's slow_start_s"),
        (jax.custom_jvp(shortcut), "uses the package's slow_start_s"),
        (Model(), "uses the package's slow_start_s"),
        (Model().time, "uses the package's slow_start_s"),
        (shortcut, "uses the package's slow_start_s, one of the window models this "
                   "exercise asks you to write: write the handshake, the slow-start rounds"),
        (through_the_module, "uses the package's slow_start_s"),
        (with_the_bdp, "uses the package's bdp_bytes"),
        (transfer.expected_seconds, "uses the package's expected_seconds"),
        (None, "my_transfer_time is not defined"),
        (0.555, "not a function"),
        (lambda *case: None, "must return one number of seconds above 0, got None"),
        (lambda *case: "slow", "must return one number of seconds above 0, got 'slow'"),
        (lambda *case: [0.555], "must return one number of seconds"),
        (lambda *case: -0.5, "must return one number of seconds above 0"),
        (lambda *case: math.inf, "must return one number of seconds above 0"),
        (lambda *case: 1 / 0, "raised ZeroDivisionError"),
    ]:
        with pytest.raises(ExerciseFailed, match=message) as failed:
            check_transfer_time(fn, **STEP_23)
        assert "\n" not in str(failed.value)
