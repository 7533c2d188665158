"""Step 10's exercise check, the message size at which a fit of T = α + S/B reaches a fraction of
its bandwidth: right answers in several forms pass, each honest slip is named, the package's fit
and bus bandwidth are refused."""

import numpy as np
import pytest

from course_utils.checks import check_bandwidth_fraction_size
from course_utils.checks.helpers import ExerciseFailed
from course_utils.models.cost_model import bus_factor
from course_utils.models.fit import fit_alpha_beta


def _size(*, alpha=1.0, per=1.0, swapped=False, factor=1.0):
    """The size solved by hand, with one slip switched on by its argument."""

    def bytes_at_bandwidth_fraction(alpha_s, bytes_per_s, fraction):
        f, rest = (1 - fraction, fraction) if swapped else (fraction, 1 - fraction)
        return alpha_s * alpha * bytes_per_s * f / rest * per * factor

    return bytes_at_bandwidth_fraction


def _rounded(alpha_s, bytes_per_s, fraction):
    return np.float32(float(f"{alpha_s * bytes_per_s * fraction / (1 - fraction):.3g}"))


@pytest.mark.parametrize("fn", [
    _size(),
    _rounded,
    lambda a, b, f: int(round(a * b * f / (1 - f))),
    lambda a, b, f: np.array(a / (1 / f - 1) * b),
])
def test_right_answers_in_several_forms_pass(fn, capsys):
    check_bandwidth_fraction_size(fn)
    assert "PASSED: size at a fraction of the bandwidth" in capsys.readouterr().out


# (the page's common wrong answers: tests/test_mistakes.py)
@pytest.mark.parametrize("fn, said", [
    (_size(per=8), "S is in bytes, not bits"),
    (_size(per=1 / 8), "not bits: do not divide by 8"),
    (_size(per=1e-9), "not GB/s"),
    (_size(alpha=2), "not 2α"),
    (_size(factor=1 / 1.75), "the bus factor multiplies the bus bandwidth and its limit alike"),
    (lambda a, b, f: a * b, "right for one fraction only"),
    (lambda a, b, f: a * b * f, "collect the S terms"),
    (lambda a, b, f: 1.0, "solve for S"),
])
def test_each_slip_is_named_without_the_answer(fn, said):
    with pytest.raises(ExerciseFailed) as failed:
        check_bandwidth_fraction_size(fn)
    assert said in str(failed.value)
    assert "PASSED" not in str(failed.value)


@pytest.mark.parametrize("shortcut", [
    lambda a, b, f: a * b * f / (1 - f) * bus_factor("all_gather", 2) * 2,
    lambda a, b, f: fit_alpha_beta and a * b * f / (1 - f),
])
def test_the_package_functions_are_refused(shortcut):
    with pytest.raises(ExerciseFailed, match="uses the package's"):
        check_bandwidth_fraction_size(shortcut)


def test_bad_returns_and_missing_functions_get_a_clear_message():
    with pytest.raises(ExerciseFailed, match="bytes_at_bandwidth_fraction is not defined"):
        check_bandwidth_fraction_size(None)
    with pytest.raises(ExerciseFailed, match="one finite number of bytes"):
        check_bandwidth_fraction_size(lambda *args: (1.0, 2.0))
    with pytest.raises(ExerciseFailed, match="raised ZeroDivisionError"):
        check_bandwidth_fraction_size(lambda *args: 1 / 0)
