"""Step 19's exercise check: the slowest link rate at which the overlapped backward pass still
hides every bucket's all-reduce but the last."""

import functools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.overlap_rate import _CASES, check_overlap_rate, hidden_rate
from course_utils.models.cost_model import ring_time
from course_utils.models.latency import bucketed_step_time, collective_time
from course_utils.models.links import FRAME_SHARE, link_time_s
from course_utils.results.overlap import modelled as modelled_overlap

# about the page's numbers: the compute at 200 Mbit/s, 16 buckets of 1 MiB, 2 hosts, step 17's α
STEP_19 = {"compute_ms": 667.0, "bucket_bytes": 2**20, "buckets": 16, "hosts": 2,
           "alpha_s": 2.25e-4}


def _mine(compute_ms, bucket_bytes, buckets, hosts, alpha_s, *, steps=None, share=None,
          gaps=None, to_s=1e-3, per_byte=1.0):
    """A student's answer; the keywords make one slip each."""
    steps = 2 * (hosts - 1) if steps is None else steps
    share = 2 * (hosts - 1) / hosts if share is None else share
    gap_s = compute_ms * to_s / (buckets if gaps is None else gaps)
    left_s = gap_s - steps * alpha_s
    if left_s <= 0:
        return math.inf
    return per_byte * share * bucket_bytes / left_s


def _in_ms(compute_ms, bucket_bytes, buckets, hosts, alpha_s):
    gap_ms = compute_ms / buckets
    alpha_ms = 2 * (hosts - 1) * alpha_s * 1e3
    if alpha_ms >= gap_ms:
        return float("inf")
    return 2 * (hosts - 1) / hosts * bucket_bytes / (gap_ms - alpha_ms) * 1e3


def _recurrence_end_ms(compute_ms, bucket_bytes, buckets, hosts, alpha_s, rate):
    """Step 12's bucketed recurrence: equal buckets ready at equal steps, sent one at a time."""
    send_ms = (2 * (hosts - 1) * alpha_s + 2 * (hosts - 1) / hosts * bucket_bytes / rate) * 1e3
    end = 0.0
    for i in range(1, buckets + 1):
        end = max(compute_ms * i / buckets, end) + send_ms
    return end, send_ms


def _bisected(compute_ms, bucket_bytes, buckets, hosts, alpha_s):
    """The answer found on the recurrence itself: the slowest rate whose pass ends one send after
    the compute (a student's numerical form)."""
    def hidden(rate):
        end, send_ms = _recurrence_end_ms(compute_ms, bucket_bytes, buckets, hosts, alpha_s, rate)
        return end <= compute_ms + send_ms + 1e-9
    low, high = 1.0, 1e15
    if not hidden(high):
        return math.inf
    for _ in range(200):
        middle = math.sqrt(low * high)
        low, high = (low, middle) if hidden(middle) else (middle, high)
    return high


@pytest.mark.parametrize("fn", [
    _mine,
    _in_ms,
    _bisected,
    lambda *a: np.float32(_mine(*a)),
    lambda *a: jnp.asarray(_mine(*a)),
    lambda *a: np.inf if math.isinf(_mine(*a)) else round(_mine(*a)),
])
def test_right_answers_in_several_forms_pass(fn, capsys):
    check_overlap_rate(fn, **STEP_19)
    assert "PASSED: the slowest rate the overlap still hides" in capsys.readouterr().out


@pytest.mark.parametrize("case", [tuple(STEP_19.values()), *_CASES])
def test_the_answer_is_where_the_bucketed_recurrence_stops_hiding(case):
    rate = hidden_rate(*case)
    if math.isinf(rate):  # α alone is longer than the gap: even a very fast link piles up
        end, send_ms = _recurrence_end_ms(*case, 1e15)
        assert end > case[0] + send_ms * 1.001
        return
    end, send_ms = _recurrence_end_ms(*case, rate * 1.0001)
    assert end == pytest.approx(case[0] + send_ms, rel=1e-9)  # hidden: compute + the last send
    end, send_ms = _recurrence_end_ms(*case, rate * 0.98)
    assert end > case[0] + send_ms * 1.001  # 2 % slower: the buckets pile up
    # and the package's bucketed model agrees at that rate
    steps = bucketed_step_time([case[1]] * case[2], case[1], ranks=case[3], alpha_s=case[4],
                               bandwidth_bytes_per_s=rate * 1.0001, backward_s=case[0] / 1e3)
    assert steps * 1e3 == pytest.approx(case[0] + _recurrence_end_ms(*case, rate * 1.0001)[1])


# (the page's common wrong answers: tests/test_mistakes.py)
@pytest.mark.parametrize("fn, message", [
    (None, "slowest_hidden_rate is not defined"),
    (lambda *a: "fast", "must return one number of bytes per second"),
    (lambda *a: None, "must return one number of bytes per second"),
    (lambda *a: np.ones(2), "must return one number of bytes per second"),
    (lambda c, b: c, r"slowest_hidden_rate\(667, 1.04858e\+06, 16, 2, 0.000225\) raised"),
    (functools.partial(_mine, share=1.0), "not the whole bucket once"),
    (lambda *a: _mine(*a, share=2 * (a[3] - 1)), r"the ring's factor is 2\(h − 1\)/h, not "
     r"2\(h − 1\)"),
    (functools.partial(_mine, share=2.0), "never sends its own chunk"),
    (functools.partial(_mine, steps=0), "α is missing"),
    (lambda c, b, n, h, a: _in_ms(c, b, n, h, a / 1e3), "α counts 1000× too little: alpha_s "
     "is in seconds"),
    (lambda c, b, n, h, a: _mine(c, b, n, h, a * 1e-6), "yours scales it by 1e-6, as if it "
     "were in microseconds"),
    (lambda c, b, n, h, a: _mine(c, b, n, h, a * 1e-9), "your α counts far too little"),
    (functools.partial(_mine, steps=1), "α is paid per message step"),
    # α's steps miscounted, the bytes' share right: within 2 % at the page's numbers (α is 1 %
    # of the gap), so only the unseen cases tell; named, not blamed on the notebook's variables
    (lambda *a: _mine(*a, steps=a[3] - 1), "not h − 1 \\(that is one pass of the ring"),
    (lambda *a: _mine(*a, steps=a[3]), "2\\(h − 1\\) message steps, not h: α is paid"),
    (lambda *a: _mine(*a, steps=2 * a[3]), "not 2h \\(a host never sends to itself\\): α is paid"),
    (lambda *a: _mine(*a, share=1 / a[3]), "one chunk, bucket_bytes / h, is what one message "
     "step sends"),
    (lambda *a: _mine(*a, per_byte=a[2]), "bucket_bytes, not buckets × bucket_bytes"),
    (lambda *a: _mine(*a, steps=2 * a[3], share=2.0), "not 2h: h − 1, not h"),
    (lambda *a: _mine(*a, steps=a[3] - 1, share=(a[3] - 1) / a[3]), "one pass of the ring"),
    (functools.partial(_mine, to_s=1.0), "compute_ms is in milliseconds"),
    (lambda *a: _mine(*a) / 1e3, "bytes per millisecond"),
    (functools.partial(_mine, per_byte=8), "that is bits per second"),
    (functools.partial(_mine, per_byte=1 / 8), "do not divide by 8"),
    (functools.partial(_mine, per_byte=8e-6), "that is megabits per second"),
    (functools.partial(_mine, per_byte=1e-6), r"that is megabytes per second \(MB/s\)"),
    (functools.partial(_mine, per_byte=2**-20), "that is MiB per second"),
    (lambda *a: _mine(*a, gaps=a[2] - 1), r"not compute_ms / \(buckets − 1\)"),
    (lambda *a: _mine(*a, gaps=1), "not in the whole backward pass"),
    (lambda c, b, n, h, a: _mine(c, b, n, 4, a), "the rate for 4 hosts in every case"),
    # α added to the gap, with the inf test where α fills it and without
    (lambda *a: math.inf if math.isinf(_mine(*a)) else _mine(*a[:4], -a[4]),
     "α's time is taken from the gap, not added to it"),
    (lambda c, b, n, h, a: _mine(c, b, n, h, -a), "α's time is taken from the gap, not added"),
    (functools.partial(_mine, per_byte=1 / FRAME_SHARE), "that divides by FRAME_SHARE"),
    (functools.partial(_mine, per_byte=FRAME_SHARE), "that multiplies by FRAME_SHARE"),
    (lambda c, b, n, h, a: _mine(c, b, n, 2 * h, a), r"a ring over every device \(2 per host\)"
     r".*h = hosts ranks"),
    (lambda c, b, n, h, a: _mine(*STEP_19.values()), "your rate stays the same whatever the "
     "arguments"),
])
def test_each_slip_is_named(fn, message):
    with pytest.raises(ExerciseFailed, match=message):
        check_overlap_rate(fn, **STEP_19)


@pytest.mark.parametrize("fn, message", [
    (lambda c, b, n, h, a: _mine(c, b, n, h, STEP_19["alpha_s"]), "does not change with the "
     "argument alpha_s: use the function's arguments, not the notebook's alpha"),
    (lambda c, b, n, h, a: _mine(c, b, STEP_19["buckets"], h, a), "the argument buckets: use "
     "the function's arguments, not the notebook's BUCKETS"),
    (lambda c, b, n, h, a: _mine(c, STEP_19["bucket_bytes"], STEP_19["buckets"], h, a),
     "the arguments bucket_bytes and buckets: use the function's arguments, not the notebook's "
     "BUCKET_BYTES and BUCKETS"),
])
def test_an_argument_left_unread_is_found_by_changing_it(fn, message):
    with pytest.raises(ExerciseFailed, match=message):
        check_overlap_rate(fn, **STEP_19)


def test_right_at_the_page_only_while_reading_every_argument_is_not_blamed_on_variables():
    def halves(c, b, n, h, a):  # the share as h / 2: 1 at the page's 2 hosts, as the ring's
        return _mine(c, b, n, h, a) * (h / 2) / (2 * (h - 1) / h)
    with pytest.raises(ExerciseFailed, match="right at the page's numbers only, and your rate "
                       "moves with every argument: there h = 2 and α is 1 % of the gap") as failed:
        check_overlap_rate(halves, **STEP_19)
    assert "notebook's" not in str(failed.value)
    assert "2(h − 1)" not in str(failed.value)  # a hint, not the model


def test_a_probe_that_raises_names_nothing():
    def fussy(c, b, n, h, a):  # right at the cases; fails at the probes' changed arguments
        if (c, b, n, h, a) != tuple(STEP_19.values()):
            raise ValueError("only the page")
        return _mine(c, b, n, h, a)
    with pytest.raises(ExerciseFailed, match="raised ValueError: only the page"):
        check_overlap_rate(fussy, **STEP_19)


def _no_inf(*a):  # the formula alone: a negative rate where α is too slow
    share, steps = 2 * (a[3] - 1) / a[3], 2 * (a[3] - 1)
    return share * a[1] / (a[0] / 1e3 / a[2] - steps * a[4])


@pytest.mark.parametrize("fn, message", [
    (_no_inf, "a rate is positive"),
    (lambda *a: min(_mine(*a), 1e15), "α alone takes longer than the compute between two "
     "buckets: no rate hides them; return math.inf"),
    (lambda *a: math.inf, "there a finite rate hides the buckets"),
    (lambda *a: 1.3 * _mine(*a), "set it equal to the compute between two buckets"),
])
def test_the_two_ends_and_an_unexplained_slip(fn, message):
    with pytest.raises(ExerciseFailed, match=message) as failed:
        check_overlap_rate(fn, **STEP_19)
    assert "2(h − 1)/h" not in str(failed.value)  # a hint, not the model


def test_the_check_s_own_answer_is_refused_however_wrapped():
    for fn in (hidden_rate, functools.partial(hidden_rate), lambda *a: hidden_rate(*a)):
        with pytest.raises(ExerciseFailed, match="uses the check's own hidden_rate"):
            check_overlap_rate(fn, **STEP_19)


@pytest.mark.parametrize("fn, name", [
    (lambda c, nbytes, n, h, alpha: bucketed_step_time(
        [nbytes] * n, nbytes, ranks=h, alpha_s=alpha, bandwidth_bytes_per_s=1e8,
        backward_s=c / 1e3), "bucketed_step_time"),
    (lambda *a: modelled_overlap(None, "200mbit").overlapped_s, r"overlap_runs\.modelled"),
    (lambda c, nbytes, n, h, alpha: nbytes / (c / 1e3 / n - collective_time(
        0, h, alpha_s=alpha, bandwidth_bytes_per_s=1.0)), "collective_time"),
    (lambda c, nbytes, n, h, alpha: ring_time(nbytes, h, alpha_s=alpha, bytes_per_s=1.0)
     .all_reduce / (c / 1e3 / n), "ring_time"),
    (lambda c, nbytes, n, h, alpha, _t=link_time_s: _t("all_reduce", nbytes, h, 1, 1.0)
     / (c / 1e3 / n), "link_time_s"),
])
def test_the_package_s_time_models_are_refused(fn, name):
    with pytest.raises(ExerciseFailed, match=f"uses the package's {name}, one of the time models"):
        check_overlap_rate(fn, **STEP_19)
