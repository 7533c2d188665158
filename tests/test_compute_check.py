"""Steps 18 and 20's exercise checks, the balanced batch and the break-even rate: right at the
notebook's numbers and at unseen ones, each common slip named, the package's model refused."""

import math

import pytest

from course_utils.checks import check_balanced_rows, check_break_even
from course_utils.checks.helpers import ExerciseFailed
from course_utils.models.cost_model import Topology
from course_utils.models.step import balanced_rows, break_even_bits
from course_utils.training.traffic import strategy_traffic

STEP_18 = {"weights": 1_114_112, "hosts": 2, "devices": 2, "rate_bits": 200e6,
           "alpha_s": 4e-4, "flops_per_s": 3e10}


def _rows(*, bytes_per_weight=4, passes=2, own=True, per_byte=1.0, alpha_steps=None,
          flops=6, seconds=False, devices_share=False):
    """The balanced rows written by hand, with one slip switched on by its argument."""

    def my_balanced_rows(weights, hosts, devices, rate_bits, alpha_s, flops_per_s):
        p = hosts * devices
        share = (p - 1) / p if own else 1.0
        link_s = passes * share * bytes_per_weight * weights / (rate_bits / 8) * per_byte
        if devices_share:
            link_s *= devices
        steps = 2 * (p - 1) if alpha_steps is None else alpha_steps(p)
        communication_s = steps * alpha_s + link_s
        return communication_s if seconds else communication_s / (flops * weights / flops_per_s)

    return my_balanced_rows


def test_the_right_rows_pass_and_each_slip_is_named(capsys):
    check_balanced_rows(_rows(), **STEP_18)
    assert "PASSED: the balanced batch" in capsys.readouterr().out
    for fn, message in [  # (the page's common wrong answers: tests/test_mistakes.py)
        (None, "my_balanced_rows is not defined"),
        (lambda *args: "many", "must return one finite number of rows"),
        (_rows(per_byte=1 / 64), "bits per second: divide it by 8"),  # rate_bits * 8
        (_rows(bytes_per_weight=1), "4 bytes per float32 weight"),
        (_rows(passes=1), "two passes of the ring"),
        (_rows(own=False), "never sends its own chunk"),
        (_rows(devices_share=True), "crosses a host's link once"),
        (_rows(alpha_steps=lambda p: 0), "add the latency: 2\\(p-1\\) message steps"),
        (_rows(alpha_steps=lambda p: 1), "2\\(p-1\\) message steps, each paying alpha_s"),
        (_rows(flops=2), "is the forward pass only"),
        (lambda w, h, d, bits, a, f: _rows()(w, h, 1, bits, a, f), "not the hosts alone"),
        (lambda w, h, d, bits, a, f: _rows()(w, h, d, bits, a, f) * h * d, "rows per device"),
        (_rows(per_byte=1 / 0.956), "leave out the headers' share"),
        (_rows(per_byte=0.956), "leave out the headers' share"),
        (_rows(passes=1, own=False), "not the gradient once"),
        (lambda w, h, d, bits, a, f: 5000.0, "the communication time"),
        (lambda w, h, d, bits, a, f: balanced_rows(
            strategy_traffic("data_parallel", w, Topology(h, d)), [(w, 1)], flops_per_s=f,
            alpha_s=a, bytes_per_s=bits / 8), "uses the package's balanced_rows"),
    ]:
        with pytest.raises(ExerciseFailed, match=message):
            check_balanced_rows(fn, **STEP_18)


def test_an_answer_worked_out_once_fails_at_unseen_cases():
    right = _rows()(*STEP_18.values())
    with pytest.raises(ExerciseFailed, match="right at this notebook's numbers, but not at"):
        check_balanced_rows(lambda *args: right, **STEP_18)


STEP_20 = {"dp_steps": 140, "dp_bytes": 6.7e6, "scheme_steps": 100, "scheme_bytes": 2.7e5,
           "compute_s": 0.03, "own_s": 0.05}


def _break_even(*, bits=8, steps=True, compute=True, ends=True, own=True):
    """The break-even rate written by hand, with one slip switched on by its argument."""

    def my_break_even(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s):
        if not steps:
            dp_steps = scheme_steps = 1
        if not own:
            own_s = 0.0
        saved = dp_steps * dp_bytes - scheme_steps * scheme_bytes
        extra = scheme_steps * (compute_s + own_s) - dp_steps * compute_s
        if not compute:
            extra = scheme_steps * own_s
        if ends and extra <= 0:
            return math.inf if saved > 0 else 0.0
        if ends and saved <= 0:
            return 0.0
        return bits * saved / extra

    return my_break_even


def test_the_break_even_rate_passes_and_each_slip_is_named(capsys):
    check_break_even(_break_even(), **STEP_20)
    assert "PASSED: the break-even rate" in capsys.readouterr().out
    for fn, message in [  # (the page's common wrong answers: tests/test_mistakes.py)
        (None, "my_break_even is not defined"),
        (lambda *args: "fast", "must return one number of bit/s"),
        (_break_even(bits=1 / 8), "× 8, not ÷ 8"),
        (_break_even(bits=8e-6), "that is Mbit/s: return bit/s"),
        (_break_even(compute=False), "count the compute of every step"),
        (_break_even(ends=False), "return math.inf"),
        (lambda *args: math.inf, "is infinite, but the scheme's extra compute"),
        (lambda *args: _break_even()(*STEP_20.values()), "gives the same number: write the rate"),
        (_break_even(own=False), "its own work own_s"),
        (lambda *args: break_even_bits(*args), "uses the package's break_even_bits"),
    ]:
        with pytest.raises(ExerciseFailed, match=message):
            check_break_even(fn, **STEP_20)


def test_the_break_even_rate_takes_fractional_steps_as_the_notebook_gives_them(capsys):
    interpolated = {**STEP_20, "dp_steps": 38.64, "scheme_steps": 41.17}  # seed means
    check_break_even(_break_even(), **interpolated)
    assert "PASSED: the break-even rate" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match="that is bytes per second"):
        check_break_even(_break_even(bits=1), **interpolated)
    for seed_steps in ((39.4, 37.0), (55.2, 54.1), (33.7, 32.4)):  # one seed's, not the mean
        one_seed = lambda d, db, s, sb, c, o, st=seed_steps: _break_even()(  # noqa: E731
            st[0], db, st[1], sb, c, o)
        with pytest.raises(ExerciseFailed) as failed:
            check_break_even(one_seed, **{**STEP_20, "dp_steps": 42.77, "scheme_steps": 41.19})
        assert "headers" not in str(failed.value), seed_steps


def test_an_answer_wrong_only_where_the_scheme_has_no_own_work_gets_a_message():
    """A slip seen only at an unseen case without own work, or with equal steps, is named or
    described, not a ZeroDivisionError."""
    def wrong_at_the_edges(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s):
        right = _break_even()(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s)
        return right if own_s > 0 else 1.0

    with pytest.raises(ExerciseFailed, match="right at this notebook's numbers, but not at"):
        check_break_even(wrong_at_the_edges, **STEP_20)


def test_rows_rounded_to_whole_rows_pass_at_every_case():
    for _ in range(20):  # the fresh case is drawn anew each time
        check_balanced_rows(lambda *case: int(_rows()(*case)), **STEP_18)


def test_rates_rounded_to_whole_mbit_pass_at_every_case():
    def rounded(*case):
        rate = _break_even()(*case)
        return round(rate / 1e6) * 1e6 if math.isfinite(rate) else rate

    for _ in range(50):  # the fresh case is drawn anew each time
        check_break_even(rounded, **STEP_20)


def test_a_table_of_answers_made_beforehand_fails_at_the_fresh_case():
    from course_utils.checks.compute import _UNSEEN, expected_rows

    table = {case: expected_rows(*case) for case in (tuple(STEP_18.values()), *_UNSEEN)}
    with pytest.raises(ExerciseFailed, match="raised KeyError"):
        check_balanced_rows(lambda *case: table[case], **STEP_18)
