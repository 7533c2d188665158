"""The toy regression problem, its NumPy reference gradient, and the input checks
the kernels share.
"""

from __future__ import annotations

import numpy as np

from course_utils.validate import positive_int


def toy_regression(
    n_rows: int = 16, n_features: int = 8
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The seed's linear-regression data: inputs ``x``, labels ``y`` and weights ``w`` (float32).

    ``x`` is an evenly spaced ramp, ``y = x @ w_true`` for a fixed ``w_true``, and ``w`` is the
    current (wrong) weight vector, so the gradient is small but not zero.

    Args:
        n_rows: number of observations (rows of ``x``).
        n_features: number of features (columns of ``x``).

    Returns:
        ``(x, y, w)`` with shapes ``(n_rows, n_features)``, ``(n_rows,)``, ``(n_features,)``.

    Examples:
        >>> x, y, w = toy_regression()
        >>> x.shape, y.shape, w.shape, x.dtype
        ((16, 8), (16,), (8,), dtype('float32'))
        >>> float(x[0, 0]), float(x[-1, -1])
        (-0.5, 0.4921875)
    """
    n_rows, n_features = positive_int("n_rows", n_rows), positive_int("n_features", n_features)
    x = np.arange(n_rows * n_features, dtype=np.float32).reshape(n_rows, n_features) / 128 - 0.5
    y = x @ np.linspace(-0.4, 0.3, n_features, dtype=np.float32)
    w = np.linspace(0.1, -0.2, n_features, dtype=np.float32)
    return x, y, w


def reference_gradient(x, y, w) -> np.ndarray:
    """The mean-squared-error gradient ``2 xᵀ(x w − y) / n_rows``, computed on the host in NumPy.

    Args:
        x: inputs, shape ``(n_rows, n_features)``.
        y: labels, shape ``(n_rows,)``.
        w: weights, shape ``(n_features,)``.

    Returns:
        The gradient with respect to ``w``, shape ``(n_features,)``.

    Examples:
        >>> x = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
        >>> y, w = np.array([1.0, 0.0], np.float32), np.zeros(2, np.float32)
        >>> reference_gradient(x, y, w).tolist()
        [-1.0, 0.0]
    """
    x, y, w = np.asarray(x), np.asarray(y), np.asarray(w)
    check_regression_shapes(x, y, w)
    return 2 * x.T @ (x @ w - y) / x.shape[0]


def _shapes(x, y, w) -> str:
    return f"x {tuple(np.shape(x))}, y {tuple(np.shape(y))}, w {tuple(np.shape(w))}"


def check_regression_shapes(
    x, y, w, n_devices: int | None = None, *, split_features: bool = False
) -> None:
    """Raise a short ``ValueError`` unless ``x, y, w`` fit together (and fit the mesh).

    Args:
        x: the inputs (anything with ``.shape`` and ``.dtype``).
        y: the labels (likewise).
        w: the weights (likewise).
        n_devices: if given, the row count must be a multiple of it.
        split_features: the feature count must be a multiple of ``n_devices`` too
            (the reduce-scatter result is split by features).

    Examples:
        >>> check_regression_shapes(
        ...     np.zeros((6, 2)), np.zeros(6), np.zeros(2), 4
        ... )  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        ValueError: 6 rows do not divide over 4 devices (x (6, 2), y (6,), w (2,));
        use a row count that is a multiple of 4
    """
    shapes = _shapes(x, y, w)
    if np.ndim(x) != 2 or np.ndim(y) != 1 or np.ndim(w) != 1:
        raise ValueError(f"expected x 2-D, y and w 1-D, got {shapes}")
    n_rows, n_features = np.shape(x)
    if np.shape(y)[0] != n_rows or np.shape(w)[0] != n_features:
        raise ValueError(
            f"shapes disagree: {shapes}; y needs one label per row of x, w one weight per column"
        )
    for name, value in (("x", x), ("y", y), ("w", w)):
        dtype = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
        if not np.issubdtype(dtype, np.floating):
            raise ValueError(
                f"{name} has dtype {dtype}; the course expects float32 arrays "
                "(use .astype(np.float32))"
            )
    if n_devices is None:
        return
    if n_rows % n_devices:
        raise ValueError(
            f"{n_rows} rows do not divide over {n_devices} devices ({shapes}); "
            f"use a row count that is a multiple of {n_devices}"
        )
    if split_features and n_features % n_devices:
        raise ValueError(
            f"{n_features} features do not divide over {n_devices} devices "
            f"for reduce-scatter ({shapes}); "
            f"use a feature count that is a multiple of {n_devices}"
        )
