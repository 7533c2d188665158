"""Step 02's prose claims, checked in NumPy: with unequal shards the mean of local means is off."""

import numpy as np

from course_utils import reference_gradient, toy_regression


def _uneven_errors(p=4):
    x, y, w = toy_regression(16, 8)
    counts = np.full(p, 16 // p)
    counts[0], counts[1] = counts[0] + 1, counts[1] - 1  # as the notebook deals them
    starts = np.cumsum(counts) - counts
    sums = [2 * x[s:s + c].T @ (x[s:s + c] @ w - y[s:s + c]) for s, c in zip(starts, counts)]
    reference = reference_gradient(x, y, w)
    mean_of_means = np.mean([g / c for g, c in zip(sums, counts)], axis=0)
    global_count = np.sum(sums, axis=0) / counts.sum()
    norm = np.linalg.norm(reference)
    return (np.linalg.norm(mean_of_means - reference) / norm,
            np.linalg.norm(global_count - reference) / norm)


def test_unequal_shards_make_the_mean_of_local_means_wrong_and_the_global_count_exact():
    local, global_ = _uneven_errors()
    assert local > 1e-2  # "with unequal shards it is off"
    assert global_ < 1e-5  # "exact in both cases"


# the exercise: pmean_weights(counts), the factors that make local mean + pmean exact


def _page():
    """The page's uneven deal: step 02's rows, one more on device 0 and one fewer on device 1."""
    import math

    import jax

    from course_utils import data_mesh

    p = jax.device_count()
    n_rows, n_features = math.ceil(16 / p) * p, math.ceil(8 / p) * p
    counts = np.full(p, n_rows // p)
    counts[0], counts[1] = counts[0] + 1, counts[1] - 1
    return data_mesh(), counts, *toy_regression(n_rows, n_features)


def _right_numpy(counts):
    counts = np.asarray(counts, dtype=np.float64)
    return len(counts) * counts / counts.sum()


def _right_jnp(counts):
    import jax.numpy as jnp

    c = jnp.asarray(counts, dtype=jnp.float32)
    return c / c.mean()


def _right_list(counts):
    total = sum(int(c) for c in counts)
    return [len(counts) * int(c) / total for c in counts]


def test_pmean_weights_passes_a_right_answer_in_several_forms(capsys):
    from course_utils.checks import check_pmean_weights

    page = _page()
    for right in (_right_numpy, _right_jnp, _right_list):
        check_pmean_weights(right, *page)
        out = capsys.readouterr().out
        assert out.startswith("PASSED: pmean weights (local mean × factor, then pmean, is the mean "
                              "over all rows for the page's counts [5, 3, 4, 4] and for counts of "
                              "the check's own on 4, 3 and 2 devices)"), out


def test_pmean_weights_names_each_slip():
    import pytest

    from course_utils.checks import check_pmean_weights
    from course_utils.checks.helpers import ExerciseFailed

    page = _page()
    _, counts, *_ = page
    slips = [
        (lambda c: np.asarray(c) / np.sum(c), "p× too small: pmean divides by p"),
        (lambda c: np.ones(len(c)), r"every factor is 1: that is the page's local mean \+ pmean"),
        (lambda c: np.sum(c) / (len(c) * np.asarray(c)), "the factors are inverted"),
        (lambda c: np.asarray(c, float), "the row counts themselves, not normalised"),
        (lambda c: 4 * np.asarray(c) / np.sum(c), "use the page's N_DEVICES for p"),
        (lambda c: (len(c) - 1) * np.asarray(c) / np.sum(c),
         r"\(p − 1\)/p of the mean: .* pmean divides by p"),
        (lambda c: len(c) ** 2 * np.asarray(c) / np.sum(c), "p× too large: .* twice"),
        (lambda c: len(c) * np.asarray(c) / 16,
         r"a fixed total, the page's row count \(n_rows\?\)"),
        (lambda c: len(c) * np.asarray(c) // np.sum(c),
         r"every factor is a whole number \(\[1, 0, 1, 1\]\): floor division \(//\)"),
        (lambda c: np.asarray(c) // np.mean(c), r"floor division \(//\) or int\(\)"),
        (lambda c: np.asarray(c) / (np.sum(c) // len(c)),
         r"divide by the mean row count rounded down \(Σc // p"),
        (lambda c: np.asarray(c) / int(np.mean(c)), "the mean Σc / p need not be a whole number"),
        (lambda c: _right_numpy(counts), "gives the factors of the page's counts"),
        (lambda c: _right_numpy(c)[:-1], r"returned 3 numbers, the wrong length: one factor per "
                                         r"device, 4 for 4 counts"),
        (lambda c: 1.0, "returned one number, the wrong length"),
        (lambda c: _right_numpy(c)[::-1], r"pmean_weights\(\[5, 3, 4, 4\]\) \(the page's counts, "
                                          r"p = 4\): the factors are in reverse order"),
        (lambda c: _right_numpy(c) / np.max(_right_numpy(c)), r"pmean_weights\(\[5, 3, 4, 4\]\) "
         r"\(the page's counts, p = 4\): local mean × factor, then pmean, is off"),
        (None, "pmean_weights is not defined"),
        (np.ones(4), "is an object of type ndarray, not a function"),
        (lambda c: None, "returned None: return the 4 factors"),
        (lambda c: "four", "must return 4 numbers"),
        (lambda c: np.full(len(c), np.nan), "holds NaN or inf"),
        (lambda: 1, r"pmean_weights\(\[5, 3, 4, 4\]\) raised TypeError"),
        (lambda c: 1 / 0, r"raised ZeroDivisionError"),
    ]
    for fn, said in slips:
        with pytest.raises(ExerciseFailed, match=said):
            check_pmean_weights(fn, *page)


def test_pmean_weights_refuses_the_checks_own_reference():
    import pytest

    from course_utils.checks import check_pmean_weights
    from course_utils.checks.gradients import _exact_factors
    from course_utils.checks.helpers import ExerciseFailed

    for cheat in (_exact_factors, lambda c: _exact_factors(c)):
        with pytest.raises(ExerciseFailed, match=r"calls checks.gradients._exact_factors, the "
                           r"check's own answer"):
            check_pmean_weights(cheat, *_page())


OTHER_COUNT = """
import math
import numpy as np
import course_utils as cu
cu.use_cpu_devices({p})
from course_utils import checks

n_rows, n_features = math.ceil(16 / {p}) * {p}, math.ceil(8 / {p}) * {p}
counts = np.full({p}, n_rows // {p})
if {p} > 1:
    counts[0], counts[1] = counts[0] + 1, counts[1] - 1
checks.check_pmean_weights(lambda c: len(c) * np.asarray(c) / np.sum(c), cu.data_mesh(), counts,
                           *cu.toy_regression(n_rows, n_features))
"""


def test_pmean_weights_passes_a_right_answer_at_other_device_counts():
    import subprocess
    import sys

    for p, on in ((1, "on 1 device)"), (3, "on 3 and 2 devices)"), (8, "on 8, 3 and 2 devices)")):
        done = subprocess.run([sys.executable, "-c", OTHER_COUNT.format(p=p)], capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.startswith("PASSED: pmean weights") and on in done.stdout, done.stdout
