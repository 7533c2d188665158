"""Step 10's exercise check, a bus bandwidth predicted from an α-β fit: right answers in several
forms pass, each honest slip is named, the package's fit and bus bandwidth are refused."""

import numpy as np
import pytest

from course_utils.checks import check_busbw_prediction
from course_utils.checks.helpers import ExerciseFailed
from course_utils.models.cost import busbw_gbps
from course_utils.models.cost_model import bus_factor
from course_utils.models.fit import Fit


def _busbw(*, factor=None, per=1.0, alpha=1.0, with_alpha=True, kinds_swapped=False):
    """The prediction written by hand, with one slip switched on by its argument."""

    def predicted_busbw_gbps(n_bytes, alpha_s, bytes_per_s, kind, p):
        time_s = (alpha_s * alpha if with_alpha else 0.0) + n_bytes / bytes_per_s
        two = (kind == "all_reduce") != kinds_swapped
        f = factor(p) if factor else (p - 1) / p
        return n_bytes / time_s / 1e9 * (2 * f if two else f) * per

    return predicted_busbw_gbps


def _rounded(n_bytes, alpha_s, bytes_per_s, kind, p):
    time_s = alpha_s + n_bytes / bytes_per_s
    factor = {"all_reduce": 2 * (p - 1) / p, "reduce_scatter": (p - 1) / p}.get(kind, 1 - 1 / p)
    return np.float32(round(n_bytes / time_s * factor / 1e9, 3))


@pytest.mark.parametrize("fn", [_busbw(), _rounded,
                                lambda s, a, b, k, p: np.array(_busbw()(s, a, b, k, p))])
def test_right_answers_in_several_forms_pass(fn, capsys):
    check_busbw_prediction(fn)
    assert "PASSED: bus bandwidth from a fit" in capsys.readouterr().out


@pytest.mark.parametrize("fn, said", [
    (_busbw(factor=lambda p: 1.0), "the factor has p − 1 where you have p"),
    (_busbw(per=8), "counts bytes, not bits"),
    (_busbw(alpha=1e6), "alpha_s is already in seconds"),
    (_busbw(per=1e9), "not bytes per second"),
    (_busbw(with_alpha=False), "the fixed cost α is missing"),
    (_busbw(kinds_swapped=True), "all-reduce's bus factor is 2(p − 1)/p"),
    (lambda *args: 1.0, "the time is α + S/B"),
])
def test_each_slip_is_named_without_the_answer(fn, said):
    with pytest.raises(ExerciseFailed) as failed:
        check_busbw_prediction(fn)
    assert said in str(failed.value)


def test_the_algorithm_bandwidth_alone_is_named():
    def algbw(n_bytes, alpha_s, bytes_per_s, kind, p):
        return n_bytes / (alpha_s + n_bytes / bytes_per_s) / 1e9

    with pytest.raises(ExerciseFailed, match="algorithm bandwidth S/t"):
        check_busbw_prediction(algbw)


@pytest.mark.parametrize("shortcut", [
    lambda s, a, b, k, p: busbw_gbps(s / Fit(a, b, 0.0, 2).time_s(s) / 1e9, k, p),
    lambda s, a, b, k, p: s / (a + s / b) / 1e9 * bus_factor(k, p),
])
def test_the_package_functions_are_refused(shortcut):
    with pytest.raises(ExerciseFailed, match="uses the package's"):
        check_busbw_prediction(shortcut)


def test_bad_returns_and_missing_functions_get_a_clear_message():
    with pytest.raises(ExerciseFailed, match="predicted_busbw_gbps is not defined"):
        check_busbw_prediction(None)
    with pytest.raises(ExerciseFailed, match="one finite number of GB/s"):
        check_busbw_prediction(lambda *args: (1.0, 2.0))
    with pytest.raises(ExerciseFailed, match="raised ZeroDivisionError"):
        check_busbw_prediction(lambda *args: 1 / 0)
