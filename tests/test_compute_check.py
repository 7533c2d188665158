"""Steps 18 and 20's exercise checks, the micro-batches before one all-reduce and the break-even
rate: right at the notebook's numbers and at unseen ones, each common slip named, the package's
model refused."""

import math

import numpy as np
import pytest
from notebook_cell import answer

from course_utils.checks import check_break_even, check_micro_batches
from course_utils.checks.helpers import ExerciseFailed
from course_utils.models.cost_model import Topology
from course_utils.models.step import balanced_rows, break_even_bits
from course_utils.training.traffic import strategy_traffic

STEP_18 = {"weights": 1_114_112, "hosts": 2, "devices": 2, "rate_bits": 200e6,
           "alpha_s": 1.4e-4, "flops_per_s": 7.3e10, "rows": 512}


def _k(*, bytes_per_weight=4, passes=2, own=True, per_byte=1.0, alpha_steps=None, flops=6,
       devices_share=False, hosts_only=False, rounding=math.ceil, result=None):
    """K written by hand, with one slip switched on by its argument; ``result(k, ratio, rows,
    communication_s, row_s)`` returns something other than K."""

    def my_micro_batches(weights, hosts, devices, rate_bits, alpha_s, flops_per_s, rows):
        p = hosts if hosts_only else hosts * devices
        share = (p - 1) / p if own else 1.0
        link_s = passes * share * bytes_per_weight * weights / (rate_bits / 8) * per_byte
        if devices_share:
            link_s *= devices
        steps = 2 * (p - 1) if alpha_steps is None else alpha_steps(p)
        communication_s = steps * alpha_s + link_s
        row_s = flops * weights / flops_per_s
        ratio = communication_s / (rows * row_s)
        k = max(1, rounding(ratio))
        return k if result is None else result(k, ratio, rows, communication_s, row_s)

    return my_micro_batches


RIGHT_FORMS = {  # a student's own forms, as cells
    "one line": "import math\n"
                "def my_micro_batches(weights, hosts, devices, rate_bits, alpha_s, flops_per_s,"
                " rows):\n"
                "    p = hosts * devices\n"
                "    t = 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * 4 * weights * 8 / rate_bits\n"
                "    return max(1, math.ceil(t / (rows * 6 * weights / flops_per_s)))\n",
    "a loop": "def my_micro_batches(weights, hosts, devices, rate_bits, alpha_s, flops_per_s,"
              " rows):\n"
              "    p = hosts * devices\n"
              "    send = 2 * (p - 1) * alpha_s + (2 * (p - 1) / p) * (4 * weights) / (rate_bits"
              " / 8)\n"
              "    k = 1\n"
              "    while k * rows * 6 * weights / flops_per_s < send:\n"
              "        k += 1\n"
              "    return k\n",
    "numpy": "def my_micro_batches(weights, hosts, devices, rate_bits, alpha_s, flops_per_s,"
             " rows):\n"
             "    p = hosts * devices\n"
             "    send = 2 * (p - 1) * (alpha_s + 4 * weights / p / (rate_bits / 8))\n"
             "    return np.maximum(1, np.ceil(send * flops_per_s / (6 * weights * rows)))"
             ".astype(np.int64)\n",
}


@pytest.mark.parametrize("form", RIGHT_FORMS)
def test_every_natural_form_of_the_right_k_passes(form, capsys):
    check_micro_batches(answer(RIGHT_FORMS[form], "my_micro_batches", np=np), **STEP_18)
    assert "PASSED: micro-batches before one all-reduce (K = 6 " in capsys.readouterr().out


def test_each_slip_is_named(capsys):
    for fn, message in [  # (the page's common wrong answers: tests/test_mistakes.py)
        (_k(per_byte=1 / 64), "bits per second: divide it by 8"),  # rate_bits * 8
        (_k(per_byte=8), "bits per second: divide it by 8"),
        (_k(bytes_per_weight=1), "4 bytes per float32 weight"),
        (_k(passes=1), "two passes of the ring"),
        (_k(own=False), "never sends its own chunk"),
        (_k(devices_share=True), "crosses a host's link once"),
        (_k(alpha_steps=lambda p: 0), "add the latency: 2\\(p-1\\) message steps"),
        (_k(alpha_steps=lambda p: 1), "2\\(p-1\\) message steps, each paying alpha_s"),
        (_k(alpha_steps=lambda p: p - 1), "2\\(p-1\\) message steps, each paying alpha_s"),
        (_k(flops=2), "is the forward pass only"),
        (_k(flops=4), "leaves out the input's gradient"),
        (_k(hosts_only=True), "not the hosts alone"),
        (_k(per_byte=1 / 0.956), "leave out the headers' share"),
        (_k(per_byte=0.956), "leave out the headers' share"),
        (_k(passes=1, own=False), "not the gradient once"),
        (_k(rounding=math.floor), "rounded down"),
        (_k(rounding=lambda r: math.floor(r) if r >= 1 else 0), "rounded down"),
        (_k(rounding=round), "rounded to the nearest"),
        (_k(result=lambda k, r, rows, c, s: 0 if r < 1 else k), "K is 1 \\(the plain step\\)"),
        (_k(result=lambda k, r, rows, c, s: r), "round the ratio up"),
        (_k(result=lambda k, r, rows, c, s: k + 0.5), "return a whole number"),
        (_k(result=lambda k, r, rows, c, s: k * rows), "that is K · rows"),
        (_k(result=lambda k, r, rows, c, s: math.ceil(c / s)), "that is the rows per device"),
        (_k(result=lambda k, r, rows, c, s: c), "that is the all-reduce's time"),
        (lambda w, h, d, bits, a, f, rows: max(1, math.ceil(
            _k(result=lambda k, r, *_: r)(w, h, d, bits, a, f, rows) / (h * d))),
         "side by side"),
        (lambda w, h, d, bits, a, f, rows: _k()(w, h, d, bits, a, f, 512),
         "does not change with rows"),
        (lambda w, h, d, bits, a, f, rows: _k()(w, h, d, 2e8, a, f, rows),
         "does not change with rate_bits"),
        (lambda w, h, d, bits, a, f, rows: _k()(w, 2, 2, bits, a, f, rows),
         "does not change with hosts and devices"),
        (lambda *args: 6, "the same at every case"),
        (lambda *args: 1, "the same at every case"),
        (lambda *args: 5.7, "the same at every case"),
    ]:
        with pytest.raises(ExerciseFailed, match=message):
            check_micro_batches(fn, **STEP_18)
    assert "PASSED" not in capsys.readouterr().out


def test_the_package_model_is_refused_and_bad_input_gets_a_short_message():
    def shortcut(w, h, d, bits, a, f, rows):
        traffic = strategy_traffic("data_parallel", w, Topology(h, d))
        return math.ceil(balanced_rows(traffic, [(w, 1)], flops_per_s=f, alpha_s=a,
                                       bytes_per_s=bits / 8, input_gradient=True) / rows)

    def bound(w, h, d, bits, a, f, rows, _rows=balanced_rows):  # the trial's default argument
        return math.ceil(_rows(strategy_traffic("data_parallel", w, Topology(h, d)), [(w, 1)],
                               flops_per_s=f, alpha_s=a, bytes_per_s=bits / 8) / rows)

    def ring_timed(w, h, d, bits, a, f, rows):  # the student trial's ring_time(...).all_reduce
        from course_utils.models.cost_model import ring_time
        comm = ring_time(4 * w, h * d, alpha_s=a, bytes_per_s=bits / 8).all_reduce
        return math.ceil(comm / (6 * w * rows / f))

    def floor_plus_one(w, h, d, bits, a, f, rows):  # right but where K is a whole ratio
        comm = 2 * (h * d - 1) * a + 2 * (h * d - 1) / (h * d) * 4 * w * 8 / bits
        return math.floor(comm / (6 * w * rows / f)) + 1

    from course_utils.checks import compute

    for fn, message in [
        (shortcut, "uses the package.s (balanced_rows|strategy_traffic)"),
        (bound, "uses the package.s (balanced_rows|strategy_traffic)"),
        (compute.expected_micro_batches, "uses the package's"),
        (ring_timed, "uses the package's ring_time"),  # the whole communication term
        (floor_plus_one, "equals the all-reduce exactly, and that K is enough"),
        (None, "my_micro_batches is not defined"),
        (3, "not a function"),
        (lambda *args: "many", "must return one whole number of micro-batches, got 'many'"),
        (lambda *args: [6], "must return one whole number"),
        (lambda *args: None, "must return one whole number"),
        (lambda *args: math.inf, "must return one whole number"),
        (lambda *args: 1 / 0, "raised ZeroDivisionError"),
    ]:
        with pytest.raises(ExerciseFailed, match=message) as failed:
            check_micro_batches(fn, **STEP_18)
        assert "\n" not in str(failed.value)


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


def test_the_break_even_rate_in_other_right_forms_passes_and_disguised_shortcuts_do_not(capsys):
    """Step 20's case is the seeds' mean steps to the band's hardest target (fractional); a right
    answer written as the two times set equal, or returning NumPy or int values, passes; the
    package's rate bound as a default argument or fetched by importlib is refused (the student
    trial's item 6); an exception inside gets one line."""
    import importlib

    band_case = {**STEP_20, "dp_steps": 129.6, "scheme_steps": 127.1}

    def as_times(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s):
        slope = scheme_steps * (compute_s + own_s) - dp_steps * compute_s  # s, rate-free part
        bits = 8 * (dp_steps * dp_bytes - scheme_steps * scheme_bytes)  # bits saved
        if bits <= 0:
            return 0
        return np.float64(bits / slope) if slope > 0 else float("inf")

    def as_numpy(*case):
        return np.asarray(_break_even()(*case))

    for fn in (_break_even(), as_times, as_numpy):
        check_break_even(fn, **band_case)
        assert "PASSED: the break-even rate" in capsys.readouterr().out

    def bound(a, b, c, d, e, f, _rate=break_even_bits):
        return _rate(a, b, c, d, e, f)

    def fetched(*case):
        return importlib.import_module("course_utils.models.step").break_even_bits(*case)

    def broken(*case):
        raise ZeroDivisionError("division by zero")

    for fn, message in [(bound, "uses the package's break_even_bits"),
                        (fetched, "uses the package's break_even_bits"),
                        (broken, "raised ZeroDivisionError: division by zero"),
                        (lambda *case: None, "must return one number of bit/s"),
                        (lambda *case: [1e9], "must return one number of bit/s")]:
        with pytest.raises(ExerciseFailed, match=message):
            check_break_even(fn, **band_case)


def test_an_answer_wrong_only_where_the_scheme_has_no_own_work_gets_a_message():
    """A slip seen only at an unseen case without own work, or with equal steps, is named or
    described, not a ZeroDivisionError."""
    def wrong_at_the_edges(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s):
        right = _break_even()(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s)
        return right if own_s > 0 else 1.0

    with pytest.raises(ExerciseFailed, match="right at this notebook's numbers, but not at"):
        check_break_even(wrong_at_the_edges, **STEP_20)


def test_rates_rounded_to_whole_mbit_pass_at_every_case():
    def rounded(*case):
        rate = _break_even()(*case)
        return round(rate / 1e6) * 1e6 if math.isfinite(rate) else rate

    for _ in range(50):  # the fresh case is drawn anew each time
        check_break_even(rounded, **STEP_20)


def test_a_table_of_answers_made_beforehand_fails_at_the_fresh_case():
    from course_utils.checks.compute import _UNSEEN, expected_micro_batches

    table = {case: expected_micro_batches(*case)
             for case in (tuple(STEP_18.values()), *_UNSEEN)}
    with pytest.raises(ExerciseFailed, match="raised KeyError"):
        check_micro_batches(lambda *case: table[case], **STEP_18)


def test_the_fresh_case_is_drawn_away_from_a_whole_ratio():
    import random

    from course_utils.checks.compute import _fresh_case, _ratio, _right

    for seed in range(200):
        case = _fresh_case(random.Random(seed))
        ratio = _ratio(case)
        assert 1 < ratio < 2000 and abs(ratio - round(ratio)) > 1e-6
        assert _right(math.ceil(ratio), case) and not _right(math.ceil(ratio) + 1, case)


def test_the_fixed_cases_tell_every_slip_from_the_right_k_and_from_each_other():
    from course_utils.checks.compute import _UNSEEN, _ratio, _slipped

    cases = (tuple(STEP_18.values()), *_UNSEEN)
    right = [max(1, math.ceil(_ratio(c))) for c in cases]
    ks = {(why, j): tuple(max(1, math.ceil(_slipped(c)[why][j])) for c in cases)
          for why, forms in _slipped(cases[0]).items() for j in range(len(forms))}
    assert all(list(k) != right for k in ks.values())
    assert [max(1, round(_ratio(c))) for c in cases] != right
    assert all(ks[a] != ks[b] for a in ks for b in ks if a[0] != b[0])
