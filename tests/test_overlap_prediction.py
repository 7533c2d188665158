"""Step 19's exercise check: the overlap column predicted from compute, bytes, rate and α."""

import numpy as np
import pytest

from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.overlap_time import check_overlap_prediction
from course_utils.models.cost_model import ring_time
from course_utils.models.latency import bucketed_step_time, collective_time
from course_utils.models.links import link_time_s
from course_utils.results.overlap import modelled as modelled_overlap

STEP_19 = {"compute_ms": 667.0, "bucket_bytes": 2**20, "buckets": 16, "hosts": 2,
           "bytes_per_s": 2.5e7 * 1448 / 1514, "alpha_s": 4.5e-4}  # about its numbers


def _loop(compute_ms, bucket_bytes, buckets, hosts, bytes_per_s, alpha_s, *, first=1.0,
          alpha_steps=None, share=None, queue=True):
    """A student's loop over the buckets; the keywords make one slip each."""
    steps = 2 * (hosts - 1) if alpha_steps is None else alpha_steps
    part = 2 * (hosts - 1) / hosts if share is None else share
    send_s = steps * alpha_s + part * bucket_bytes / bytes_per_s
    end = 0.0
    for i in range(buckets):
        ready = (i + first) * compute_ms / 1e3 / buckets
        end = (max(ready, end) if queue else ready) + send_s
    return max(end, compute_ms / 1e3) * 1e3


def _closed(c, nbytes, n, h, rate, alpha):
    t = 2 * (h - 1) * alpha * 1e3 + 2 * (h - 1) / h * nbytes / rate * 1e3
    return np.float32(max(c + t, c / n + n * t))


@pytest.mark.parametrize("fn", [_loop, _closed, lambda *a: np.array(_loop(*a))])
def test_right_answers_in_several_forms_pass(fn, capsys):
    check_overlap_prediction(fn, **STEP_19)
    assert "PASSED: the overlap column predicted" in capsys.readouterr().out


def _send(nbytes, h, rate, alpha):
    return 2 * (h - 1) * alpha * 1e3 + 2 * (h - 1) / h * nbytes / rate * 1e3


def _serial(c, nbytes, n, h, rate, alpha):
    return c + n * (2 * (h - 1) * alpha * 1e3 + 2 * (h - 1) / h * nbytes / rate * 1e3)


def _max(c, nbytes, n, h, rate, alpha):
    return max(c, n * (2 * (h - 1) * alpha * 1e3 + 2 * (h - 1) / h * nbytes / rate * 1e3))


@pytest.mark.parametrize("fn, message", [
    (None, "my_overlap_ms is not defined"),
    (lambda *a: "soon", "must return one finite number of milliseconds"),
    (lambda c, b: c, r"my_overlap_ms\(667, 1.04858e\+06, 16, 2, 2.391e\+07, 0.00045\) raised"),
    (_serial, "that is one after the other"),
    (_max, "max\\(compute, communication\\) leaves out the start and the end"),
    (lambda *a: _loop(*a) / 1e3, "milliseconds, not seconds"),
    (lambda *a: _loop(*a, alpha_steps=0), "pays α, in ms, at each of its 2\\(h-1\\) message steps"),
    (lambda c, b, n, h, r, a: _loop(c, b, n, h, r, a / 1e3), "α is missing or left in seconds"),
    (lambda c, b, n, h, r, a: _loop(c, b, n, h, r * 1e3, a / 1e3),
     "each all-reduce's time is in seconds"),
    (lambda *a: _loop(*a, share=1.0), "not the bucket once"),
    (lambda *a: _loop(*a, alpha_steps=1), "α is paid per message step"),
    (lambda *a: _loop(*a, share=(a[3] - 1) / a[3]), "two passes of the ring"),
    (lambda *a: _loop(*a, share=2), "never sends its own chunk"),
    (lambda *a: _loop(*a, queue=False), "the buckets queue on the stream"),
    (lambda *a: _loop(*a, first=0.0), "ready only after its layer's compute"),
    (lambda *a: 758.0, "a case the page never shows"),
    (lambda c, nbytes, n, h, rate, alpha: c / n + n * _send(nbytes, h, rate, alpha),
     "that holds while the link limits"),
    (lambda *a: _loop(*a) * 1e3, "milliseconds and seconds mixed"),
    (lambda *a: _loop(a[0] * 1e3, *a[1:]), "milliseconds and seconds mixed"),
    (lambda *a: _loop(*STEP_19.values()), "right at this notebook's numbers only: use the "
     "function's arguments"),
])
def test_each_slip_is_named(fn, message):
    with pytest.raises(ExerciseFailed, match=message):
        check_overlap_prediction(fn, **STEP_19)


def test_an_unexplained_slip_gets_a_hint_not_the_model():
    with pytest.raises(ExerciseFailed, match="follow the buckets one by one") as failed:
        check_overlap_prediction(lambda *a: 1.3 * _loop(*a), **STEP_19)
    assert not any(part in str(failed.value) for part in ("2(h-1)", "α", "later of"))


@pytest.mark.parametrize("fn, name", [
    (lambda c, nbytes, n, h, rate, alpha: bucketed_step_time(
        [nbytes] * n, nbytes, ranks=h, alpha_s=alpha, bandwidth_bytes_per_s=rate,
        backward_s=c / 1e3) * 1e3, "bucketed_step_time"),
    (lambda c, nbytes, n, h, rate, alpha: max(
        c + (t := collective_time(nbytes, h, alpha_s=alpha, bandwidth_bytes_per_s=rate) * 1e3),
        c / n + n * t), "collective_time"),
    (lambda *a: modelled_overlap(None, "200 Mbit/s").overlap_ms, r"overlap_runs\.modelled"),
    # the student trial's: a bucket's time from the package's ring models
    (lambda c, nbytes, n, h, rate, alpha: max(
        c + (t := ring_time(nbytes, h, alpha_s=alpha, bytes_per_s=rate).all_reduce * 1e3),
        c / n + n * t), "ring_time"),
    (lambda c, nbytes, n, h, rate, alpha, _t=link_time_s: c + _t("ring", nbytes, h, 1, rate),
     "link_time_s"),
])
def test_the_package_model_is_refused(fn, name):
    with pytest.raises(ExerciseFailed, match=f"uses the package's {name}, one of the models"):
        check_overlap_prediction(fn, **STEP_19)
