"""Self-check of step 06: the sliced update with two optimizer states."""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.forbidden import (
    package_kernel_in,
    runs_package_kernel,
    through_package_kernel,
)
from course_utils.checks.helpers import (
    call_failed,
    check_placement,
    check_values,
    fail,
    given,
    passed,
    same_device_count,
)
from course_utils.display import error_line
from course_utils.observe.ir import collectives_in
from course_utils.problems.regression import reference_gradient


def _two_state_inputs(mesh, shape: tuple, seed: int):
    """Inputs the student never saw, of the notebook's shapes: host copies and placed arrays."""
    rng = np.random.default_rng(seed)
    n_rows, n_features = shape
    x = rng.normal(size=shape).astype(np.float32)
    y = rng.normal(size=n_rows).astype(np.float32)
    w = rng.normal(scale=0.5, size=n_features).astype(np.float32)
    m = rng.normal(scale=0.01, size=n_features).astype(np.float32)
    s = rng.uniform(1e-4, 4e-4, size=n_features).astype(np.float32)
    axis = mesh.axis_names[0]
    specs = (P(axis, None), P(axis), P(), P(axis), P(axis))
    placed = tuple(jax.device_put(a, NamedSharding(mesh, spec)) for a, spec in zip(
        (x, y, w, m, s), specs))
    return (x, y, w, m, s), placed


def _two_state_mistakes(x, y, w, m, s, g, lr, b1, b2, eps, n_devices: int) -> dict:
    """The likely wrong forms of each result, each with what to say (checked in this order)."""
    m_next, s_next = b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g * g
    root = np.sqrt(s_next)
    k = w.size // n_devices
    first_slice = np.tile(w[:k], n_devices)  # every device took the first slice of w
    # each device cut k entries of w from offset axis_index, not axis_index · k
    offset_slices = np.concatenate([w[d:d + k] for d in range(n_devices)])
    # each device's partial gradient squared before the reduce-scatter: a sum of squares
    partials = [reference_gradient(xb, yb, w) * len(yb) / len(y)
                for xb, yb in zip(np.split(x, n_devices), np.split(y, n_devices))]
    squares = sum(p * p for p in partials)
    local = n_devices * g  # each device divided its share by its own rows, not all rows
    per_device = ("the gradient is p× too large: divide each device's share by the global row "
                  "count (x_block.shape[0] · p), not by its own rows")
    swapped = "m and s are swapped: m_next = β1·m + (1−β1)·g, s_next = β2·s + (1−β2)·g²"
    half = ("the gradient is half the expected one: the mean squared error's gradient is "
            "2·xᵀ(x·w − y)/n, with its factor 2")
    return {
        "m_next": {
            per_device: b1 * m + (1 - b1) * local,
            half: b1 * m + (1 - b1) * g / 2,
            "the gradient has the wrong sign: 2·xᵀ(x·w − y)/n, prediction minus label":
                b1 * m - (1 - b1) * g,
            swapped: s_next,
            "β1 and 1−β1 are swapped: the old m keeps the weight β1": (1 - b1) * m + b1 * g,
            "β1 and β2 are swapped: the momentum m uses β1, the second moment s uses β2":
                b2 * m + (1 - b2) * g,
            "the gradient's weight is 1−β1 (the momentum above adds g itself)": b1 * m + g,
            "that is the gradient itself: m_next mixes the old m with g": g,
        },
        "s_next": {
            per_device: b2 * s + (1 - b2) * local * local,
            swapped: m_next,
            "the gradient must be squared (g**2), not g": b2 * s + (1 - b2) * g,
            "β2 and 1−β2 are swapped: the old s keeps the weight β2": (1 - b2) * s + b2 * g * g,
            "β1 and β2 are swapped: the second moment s uses β2, the momentum m uses β1":
                b1 * s + (1 - b1) * g * g,
            "s_next sums each device's squared partial gradient: reduce-scatter the gradient "
            "first, then square this device's summed slice (a square of a sum is not the sum "
            "of the squares)": b2 * s + (1 - b2) * squares,
            "the squared gradient's weight is 1−β2": b2 * s + g * g,
        },
        "w_next": {
            "ε goes outside the square root: sqrt(s) + eps":
                w - lr * m_next / np.sqrt(s_next + eps),
            "ε is missing, or much smaller than the eps given (use EPS, the argument the "
            "page passes, not a value typed in)": w - lr * m_next / root,
            "ε belongs in the denominator, added to sqrt(s)": w - lr * m_next / root + eps,
            "the step goes the wrong way: subtract lr · m / (sqrt(s) + ε)":
                w + lr * m_next / (root + eps),
            "this exercise has no bias correction: use m_next and s_next as they are": w - lr * (
                m_next / (1 - b1)) / (np.sqrt(s_next / (1 - b2)) + eps),
            "use the updated states m_next and s_next, not the old m and s":
                w - lr * m / (np.sqrt(s) + eps),
            "the step uses the gradient g where the new momentum m_next belongs":
                w - lr * g / (root + eps),
            "the step is lr · m / (sqrt(s) + ε): the square root is missing":
                w - lr * m_next / (s_next + eps),
            "m and s are swapped in the step: divide the momentum m by sqrt(s) (a nan comes "
            "from the square root of a negative m)":
                w - lr * s_next / (np.sqrt(np.abs(m_next)) * np.sign(m_next) + eps),
            "every device updated the first slice of w: cut this device's own slice, at "
            "jax.lax.axis_index('data') · features/p":
                first_slice - lr * m_next / (root + eps),
            "each device's slice of w starts at axis_index · features/p, not at axis_index: "
            "jax.lax.dynamic_slice_in_dim(w, i * k, k)":
                offset_slices - lr * m_next / (root + eps),
        },
    }


def _step_hint(error: BaseException, text: str, *, n_features: int, n_devices: int) -> str:
    """The hint for a failed call of exercise 06's step, for the mistakes of its own."""
    if "out_specs" in text and "replicat" in text:
        return ("out_specs=P() for w_next declares it the same on every device; all_gather "
                "makes it so, but shard_map marks all_gather's result as varying and cannot "
                "see it: gather with jax.lax.all_gather(..., to=\"invarying\"), as "
                "sliced_step does (without the all_gather, each device would hold only its "
                "slice of w_next)")
    if "positional argument" in text:
        return ("the kernel takes the five blocks (x_block, y_block, w, m_slice, s_slice), one "
                "per in_specs entry")
    k = n_features // n_devices
    pairs = (f"({n_features},), ({k},)", f"({k},), ({n_features},)")
    if "broadcasting" in text and any(pair in text for pair in pairs):
        return ("w is the whole vector on every device (P()), while g, m and s are this "
                "device's slices: cut this device's slice of w, at jax.lax.axis_index('data') "
                "· features/p (jax.lax.dynamic_slice_in_dim), before the update")
    if "broadcasting" in text:
        return ("the blocks do not fit together: give in_specs one spec per argument, as "
                "TWO_STATE_IN does (x by rows, y, m and s sliced, w replicated)")
    return ""


def _run_on(name: str, step, mesh, shape: tuple, *, lr: float, beta1: float, beta2: float,
            eps: float):
    """``step`` on fresh inputs of ``shape``: (its three results or ``None``, the expected three,
    the state m and gradient g used, a one-line failure or ``""``)."""
    host, placed = _two_state_inputs(mesh, shape, 63)
    failure, out = "", None
    try:
        out = step(*placed)
    except Exception as error:  # noqa: BLE001 - the student's function failed: say how
        failure = call_failed(name, f"x, y, w, m, s with x of shape {shape}", error,
                              lambda error, text: "")
    x, y, w, m, s = (a.astype(np.float64) for a in host)
    g = reference_gradient(x, y, w)
    m_next = beta1 * m + (1 - beta1) * g
    s_next = beta2 * s + (1 - beta2) * g * g
    w_next = w - lr * m_next / (np.sqrt(s_next) + eps)
    got = [np.asarray(a, dtype=np.float64) for a in out] if isinstance(out, (tuple, list)) and len(
        out) == 3 else None
    return got, (w_next, m_next, s_next), m, g, failure


def _used_gradient(m_next, m, beta1: float):
    """The gradient a step used, read back from its momentum ``m_next = β1·m + (1 − β1)·g``, or
    ``None`` when ``m_next`` is missing or shaped otherwise."""
    if m_next is None or np.shape(m_next) != m.shape:
        return None
    return (m_next - beta1 * m) / (1 - beta1)


def _ratio(used, g) -> float:
    """``used`` over the right gradient ``g``, by least squares."""
    return float(used @ g / (g @ g))


def _gradient_ratio(name: str, step, mesh, shape: tuple, **hyper) -> float | None:
    """The gradient ``step`` used on fresh inputs of ``shape`` over the right one, or ``None``
    if it fails there."""
    got, _, m, g, failure = _run_on(name, step, mesh, shape, **hyper)
    used = None if failure or got is None else _used_gradient(got[1], m, hyper["beta1"])
    return None if used is None else _ratio(used, g)


def _gradient_scale(exercise: str, name: str, step, placed, shape: tuple, hint: str,
                    ratio: float, **hyper) -> None:
    """Before a gradient off by a factor (p× or half, ``ratio`` on the check's inputs) is blamed
    on the divisor: fail with the cause the program shows, an all-reduce (``jax.grad`` with
    respect to the replicated ``w`` sums over the devices), or a factor that changes with the
    features (the row count read from the features' axis)."""
    mesh = placed[0].sharding.mesh
    wider = _gradient_ratio(name, step, mesh, (shape[0], 2 * shape[1]), **hyper)
    if ratio and wider and not np.isclose(ratio, wider, rtol=1e-2):
        fail(exercise, f"m_next: the gradient's scale changes with the features ({ratio:.3g}× "
             f"with {shape[1]}, {wider:.3g}× with {2 * shape[1]}): the row count is "
             "x_block.shape[0] (axis 0) × p, not a count read from axis 1")
    if hint.startswith("the gradient is p×"):
        jitted = step if hasattr(step, "lower") else jax.jit(step)
        try:
            written = {op.op for op in collectives_in(jitted, *placed).hlo}
        except Exception:  # noqa: BLE001 - a probe only: the hint below still holds
            written = set()
        if "all-reduce" in written:
            fail(exercise, "m_next: the gradient is p× too large and the program all-reduces "
                 "it: jax.grad with respect to w, the same on every device (P()), sums the "
                 "devices' gradients inside shard_map; write the block's gradient "
                 "2·x_blockᵀ(x_block·w − y_block)/n yourself, as the page's kernel does, and "
                 "reduce-scatter it")


def _right(got, expected) -> bool:
    return got is not None and all(a.shape == b.shape and np.allclose(
        a, b, atol=1e-5 * float(np.max(np.abs(b))), rtol=1e-5) for a, b in zip(got, expected))


def _other_shapes(exercise: str, name: str, step, mesh, shape: tuple, *, lr: float,
                     beta1: float, beta2: float, eps: float) -> None:
    """Fail unless ``step`` is also right on twice the rows of ``shape`` (a global row count
    typed in, ``n_rows = 16``, or read from the notebook, ``xh.shape[0]``, is right at the
    notebook's shape only: step 03's check catches the same slip the same way) and on twice its
    features (a slice length typed in)."""
    rows = 2 * shape[0]
    got, expected, m, g, failure = _run_on(name, step, mesh, (rows, shape[1]), lr=lr,
                                           beta1=beta1, beta2=beta2, eps=eps)
    if failure:
        fail(exercise, f"{name} runs on x of {shape[0]} rows but not on {rows}: {failure}")
    if not _right(got, expected):
        # the gradient the step used, read back from its momentum: g·(count it should divide
        # by) / (count it divided by)
        used = None if got is None else _used_gradient(got[1], m, beta1)
        ratio = _ratio(used, g) if used is not None else 1.0  # least squares: f32
        if ratio > 0 and not np.isclose(ratio, 1, rtol=1e-3) and np.allclose(
                used, ratio * g, rtol=0, atol=1e-3 * float(np.max(np.abs(g)))):
            fail(exercise, f"{name} is right for x of {shape[0]} rows but its gradient is "
                 f"{ratio:.3g}× too large for x of {rows} rows: it divides by a fixed row count "
                 f"({rows / ratio:g}: typed in, or the notebook's xh.shape[0]?); take the global "
                 "row count from the arguments, x_block.shape[0] × p, as in "
                 "sliced_momentum_kernel")
        fail(exercise, f"{name} is right for x of {shape[0]} rows but wrong for x of {rows} "
             "rows: compute everything from the arguments and their shapes, not from numbers "
             "typed in or the notebook's arrays")
    features = 2 * shape[1]
    got, expected, _, _, failure = _run_on(name, step, mesh, (shape[0], features), lr=lr,
                                           beta1=beta1, beta2=beta2, eps=eps)
    if failure or not _right(got, expected):
        fail(exercise, f"{name} is right for {shape[1]} features but "
             f"{'fails' if failure else 'wrong'} for {features}: a slice length or feature "
             "count typed in? read it from the shapes (g.shape[0], w.shape[0] // p)"
             + (f" ({failure})" if failure else ""))


def check_two_state_update(
    step,
    mesh,
    shape: tuple,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
) -> None:
    """Exercise 06: your jitted sliced step with two optimizer states (Adam-like, no bias
    correction), ``step(x, y, w, m, s) -> (w_next, m_next, s_next)``.

    The check calls ``step`` on inputs of ``shape`` (rows, features) that it draws itself, so a
    result computed beforehand cannot pass; it compares the values with NumPy and names the
    likely mistake, checks the placements (states in slices, weights gathered), and reads the
    compiled program: the gradient must be reduce-scattered, not all-reduced.
    """
    exercise = "sliced update with two states"
    same_device_count(exercise, mesh.size, "mesh")
    name = "two_state_step"
    given(exercise, name, step, f"assign your jitted function to {name}")
    if isinstance(step, (np.ndarray, jax.Array, tuple, list)) or not callable(step):
        fail(exercise, f"{name} is an object of type {type(step).__name__}, not a function; pass "
             "the jitted function itself, the check calls it")
    if package_kernel_in(step):
        fail(exercise, f"{name} is (or wraps) one of the package's kernels; write the "
             "jax.shard_map with its psum_scatter and all_gather yourself")
    n_devices = mesh.size
    results = []
    for seed in (61, 62):
        host, placed = _two_state_inputs(mesh, tuple(shape), seed)
        failure = None
        try:
            out = step(*placed)
        except Exception as error:  # noqa: BLE001 - the student's function failed: say how
            failure = call_failed(name, "x, y, w, m, s", error, functools.partial(
                _step_hint, n_features=shape[1], n_devices=mesh.size))
        if failure:
            fail(exercise, failure)  # outside the except: no traceback chained into the package
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            fail(exercise, f"{name}(x, y, w, m, s) must return (w_next, m_next, s_next), three "
                 f"arrays; got {type(out).__name__}")
        results.append((host, placed, out))
    (host, placed, out), (_, other_placed, other) = results
    if all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(out, other)):
        fail(exercise, f"{name} returns the same arrays for different inputs: compute from its "
             "arguments x, y, w, m, s, not from arrays of the notebook (g_slices, m0, ...)")
    try:  # the second run's rows with the first run's w, m, s: the states must change with them
        rows_only = step(*other_placed[:2], *placed[2:])
        ignored = np.array_equal(np.asarray(rows_only[1]), np.asarray(out[1]))
    except Exception:  # noqa: BLE001 - a probe only: the main calls already ran
        ignored = False
    if ignored:
        fail(exercise, f"{name}'s m_next does not change with the rows x, y it is given: compute "
             "the gradient from its arguments x, y, not from the notebook's x, y")
    x, y, w, m, s = (a.astype(np.float64) for a in host)
    g = reference_gradient(x, y, w)
    mistakes = _two_state_mistakes(x, y, w, m, s, g, lr, beta1, beta2, eps, n_devices)
    m_next = beta1 * m + (1 - beta1) * g
    s_next = beta2 * s + (1 - beta2) * g * g
    w_next = w - lr * m_next / (np.sqrt(s_next) + eps)
    checked = (("m_next", out[1], m_next), ("s_next", out[2], s_next), ("w_next", out[0], w_next))
    for key, got, expected in checked:  # the states first: a wrong state makes w wrong too
        atol = 1e-5 * float(np.max(np.abs(expected)))  # float32 rounding at each one's scale
        got_host = np.asarray(got, dtype=np.float64) if hasattr(got, "shape") else None
        close = got_host is not None and got_host.shape == expected.shape and np.allclose(
            got_host, expected, atol=atol, rtol=1e-5)
        if got_host is not None and got_host.shape == expected.shape and not close:
            for hint, wrong in mistakes[key].items():
                finite = np.isfinite(got_host)  # a nan where the wrong formula has a sqrt(< 0)
                if finite.any() and np.allclose(got_host[finite], wrong[finite], atol=atol,
                                                rtol=1e-5):
                    if key == "m_next" and hint.startswith(("the gradient is p×",
                                                           "the gradient is half")):
                        _gradient_scale(exercise, name, step, placed, tuple(shape), hint,
                                        _ratio(_used_gradient(got_host, m, beta1), g),
                                        lr=lr, beta1=beta1, beta2=beta2, eps=eps)
                    fail(exercise, f"{key}: {hint}")
        check_values(exercise, f"{key} (on the check's own inputs)", got, expected.astype(
            np.float32), atol=atol, rtol=1e-5)
    _other_shapes(exercise, name, step, mesh, tuple(shape), lr=lr, beta1=beta1, beta2=beta2,
                     eps=eps)
    slice_shape = (w.size // n_devices,)
    check_placement(exercise, "w_next", out[0], w.shape, n_devices)
    check_placement(exercise, "m_next", out[1], slice_shape, n_devices)
    check_placement(exercise, "s_next", out[2], slice_shape, n_devices)
    jitted = step if hasattr(step, "lower") else jax.jit(step)
    try:
        program = collectives_in(jitted, *placed)
    except Exception as error:  # noqa: BLE001 - any failure to compile is the student's to fix
        if through_package_kernel(error):
            fail(exercise, f"{name} calls the package's kernels (reduce_scatter_gradient, "
                 "all_gather_shards); write the jax.shard_map with its psum_scatter and "
                 "all_gather yourself")
        fail(exercise, f"{name} does not compile as one JAX program ({error_line(error)}); "
             "build it from jax.shard_map and wrap it in jax.jit")
    if runs_package_kernel(jitted, placed):
        fail(exercise, f"{name} runs the package's kernels (reduce_scatter_gradient, "
             "all_gather_shards) inside; write the jax.shard_map with its psum_scatter and "
             "all_gather yourself")
    written = {op.op for op in program.stablehlo} | {op.op for op in program.hlo}
    if written & {"all_reduce", "all-reduce"}:
        fail(exercise, "the right numbers, but the program all-reduces the gradient: every "
             "device receives all of it and then keeps a slice; use jax.lax.psum_scatter "
             "(tiled=True), which sends each device only its slice")
    if not written & {"reduce_scatter", "reduce-scatter"}:
        fail(exercise, "the right numbers, but the program has no reduce-scatter: compute the "
             "gradient inside the step (from x_block, y_block, w) and end it with psum_scatter")
    hlo = sorted(op.op for op in program.hlo)
    if hlo != ["all-gather", "reduce-scatter"]:
        fail(exercise, f"the right numbers, but the compiled program has {', '.join(hlo)}: "
             "the step needs one reduce-scatter of the gradient and one all-gather of the new "
             "weights, nothing else (each device computes its share from its own rows)")
    passed(exercise, f"both states kept in slices of {slice_shape[0]}, the gradient "
           "reduce-scattered, the weights gathered")
