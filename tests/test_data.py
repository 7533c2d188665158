import numpy as np
import pytest

from course_utils import reference_gradient, toy_regression
from course_utils.problems.regression import check_regression_shapes


def test_defaults_are_the_seeds_arrays():
    x, y, w = toy_regression()
    xh = np.arange(16 * 8, dtype=np.float32).reshape(16, 8) / 128 - 0.5
    np.testing.assert_array_equal(x, xh)
    np.testing.assert_array_equal(y, xh @ np.linspace(-0.4, 0.3, 8, dtype=np.float32))
    np.testing.assert_array_equal(w, np.linspace(0.1, -0.2, 8, dtype=np.float32))
    assert x.dtype == y.dtype == w.dtype == np.float32


def test_reference_gradient_matches_the_seed_formula_and_finite_differences():
    x, y, w = toy_regression(12, 4)
    g = reference_gradient(x, y, w)
    np.testing.assert_allclose(g, 2 * x.T @ (x @ w - y) / 12, rtol=1e-6)

    def loss(v):
        return np.mean((x.astype(np.float64) @ v - y) ** 2)

    eps = 1e-4
    numeric = [(loss(w + eps * e) - loss(w - eps * e)) / (2 * eps) for e in np.eye(4)]
    np.testing.assert_allclose(g, numeric, atol=1e-5)


def test_seed_gradient_values():
    g = reference_gradient(*toy_regression())
    np.testing.assert_allclose(
        g[:4], [0.0029296838, 0.0021972628, 0.0014648410, 0.0007324191], rtol=1e-5
    )
    assert abs(g[4]) < 1e-7


@pytest.mark.parametrize("bad", [0, -3, 1.5, True])
def test_bad_sizes(bad):
    with pytest.raises(ValueError, match="positive integer"):
        toy_regression(bad)


@pytest.mark.parametrize(
    "shapes, match",
    [
        (((16, 8), (15,), (8,)), "shapes disagree"),
        (((16, 8), (16,), (7,)), "shapes disagree"),
        (((16,), (16,), (8,)), "2-D"),
        (((16, 8), (16, 1), (8,)), "1-D"),
    ],
)
def test_shape_errors_name_the_shapes(shapes, match):
    arrays = [np.zeros(s, np.float32) for s in shapes]
    with pytest.raises(ValueError, match=match) as err:
        check_regression_shapes(*arrays)
    assert str(shapes[0]) in str(err.value)


def test_integer_inputs_are_refused():
    with pytest.raises(ValueError, match="float32"):
        reference_gradient(np.ones((4, 2), int), np.ones(4), np.ones(2))


def test_divisibility_errors():
    x, y, w = toy_regression(18, 6)
    with pytest.raises(ValueError, match="18 rows do not divide over 4 devices"):
        check_regression_shapes(x, y, w, 4)
    check_regression_shapes(x, y, w, 3, split_features=True)
    with pytest.raises(ValueError, match="6 features do not divide over 4 devices"):
        check_regression_shapes(*toy_regression(16, 6), 4, split_features=True)
