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
