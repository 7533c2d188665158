"""Self-checks for the exercises: specific feedback computed from the exercise's own inputs.

Every check either prints one ``PASSED: <exercise>`` line or raises ``ExerciseFailed`` whose message
says what is wrong: which entries and by how much, the right values in the wrong placement, or the
wrong shape or dtype. Expected values are always computed from the inputs passed in, never stored.
"""

from __future__ import annotations

import functools
import math
import numbers
import traceback

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.helpers import (
    ExerciseFailed,
    check_keys,
    check_placement,
    check_values,
    common_ratio,
    fail,
    given,
    number,
    off_by,
    passed,
    scalar,
    tiled_hint,
    unit_causes,
)
from course_utils.collectives.kernels import (
    Kernel,
    all_gather_shards,
    all_reduce_gradient,
    reduce_scatter_gradient,
)
from course_utils.constants import ATOL
from course_utils.display import error_line
from course_utils.models.cost import BudgetRow, communication_budget
from course_utils.observe.ir import collectives_in
from course_utils.observe.placement import values_per_device
from course_utils.problems.regression import reference_gradient, toy_regression

__all__ = ["ExerciseFailed"]


def _shares_mistake(got: np.ndarray, expected: np.ndarray, gradient: np.ndarray) -> str:
    """The likely mistake behind wrong shares, without the answer: transposed, rows in another
    order, the whole gradient on every row, or shares that add up right but split otherwise."""
    close = functools.partial(np.allclose, atol=ATOL, rtol=ATOL)
    if got.shape == expected.T.shape and close(got, expected.T):
        return "it looks transposed: one row per device, one column per feature"
    if got.shape != expected.shape or close(got, expected):
        return ""
    if all(close(row, gradient) for row in got):
        return "every row is the whole gradient: row i is device i's share, from its rows only"
    order = [next((j for j, e in enumerate(expected) if close(row, e)), None) for row in got]
    if None not in order and sorted(order) == list(range(len(expected))):
        return ("the right shares in another order: row i must come from device i's block, "
                "the i-th group of consecutive rows")
    if close(got.sum(axis=0), gradient):
        return ("the rows add up to the gradient but are not the devices' shares: split x and y "
                "into blocks of consecutive rows (np.split)")
    return ""


def check_shares(shares, x, y, w, n_devices: int) -> None:
    """Exercise 02: the per-device shares, stacked ``(n_devices, n_features)``,
    from row blocks of x, y.
    """
    exercise = "per-device shares"
    x, y, w = (np.asarray(a) for a in (x, y, w))
    n_rows = x.shape[0]
    blocks = np.split(np.arange(n_rows), n_devices)
    expected = np.stack([2 * x[b].T @ (x[b] @ w - y[b]) / n_rows for b in blocks])
    hint, got = "", np.asarray(shares) if isinstance(shares, np.ndarray | jax.Array) else None
    ratio = common_ratio(got.ravel(), expected.ravel()) if got is not None and (
        got.shape == expected.shape) else None
    if ratio is not None and math.isclose(ratio, n_devices, rel_tol=1e-3):
        hint = f"divide every share by the global row count ({n_rows}), not by the rows per device"
    elif got is not None:
        hint = _shares_mistake(got, expected, reference_gradient(x, y, w))
    if hint and got.shape != expected.shape:
        fail(exercise, f"my_shares has shape {got.shape}, expected {expected.shape}: {hint}")
    check_values(exercise, "my_shares", shares, expected, hint=hint)
    np.testing.assert_allclose(expected.sum(axis=0), reference_gradient(x, y, w), atol=ATOL)
    passed(exercise, f"{n_devices} shares that add up to the reference gradient")


def _program(exercise: str, fn, args: tuple) -> list[str]:
    """The collectives in the compiled program of ``fn`` (jitted here if it is not yet)."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)  # a bare shard_map is fine too
    try:
        return [op.op for op in collectives_in(jitted, *args).hlo]
    except Exception as error:  # noqa: BLE001 - any failure to compile is the student's to fix
        if _through_package_kernel(error):
            fail(exercise, "your function calls one of the package's kernels; write the "
                 "jax.shard_map yourself")
        fail(
            exercise,
            f"your function does not compile as one JAX program ({error_line(error)}); "
            "build it from jax.shard_map and wrap it in jax.jit",
        )


# the package's kernel builders: a student's kernel must not be, wrap or call what they build
_PACKAGE_KERNELS = ("all_reduce_gradient", "reduce_scatter_gradient", "all_gather_shards",
                    "block_collective")


def _package_kernel_in(fn) -> bool:
    """Whether ``fn`` is, or wraps (``jax.jit``, ``functools.wraps``/``partial``), a package kernel
    or a function defined inside a kernel builder."""
    for _ in range(20):
        if fn is None:
            return False
        if isinstance(fn, Kernel):
            return True
        qualname = getattr(getattr(fn, "__code__", None), "co_qualname", "")
        if qualname.split(".<locals>")[0] in _PACKAGE_KERNELS:
            return True
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
    return False


def _runs_package_kernel(jitted, args: tuple) -> bool:
    """Whether the program of ``jitted`` was traced through a package kernel's body (its source
    locations name ``reduce_scatter_gradient.<locals>.kernel`` and the like)."""
    try:
        text = jitted.lower(*args).as_text(debug_info=True)
    except Exception:  # noqa: BLE001 - no debug text: the other checks still judge the kernel
        return False
    return any(f'"{builder}.<locals>' in text for builder in _PACKAGE_KERNELS)


def _through_package_kernel(error: BaseException) -> bool:
    """Whether ``error`` was raised inside the package's kernels (a student's code called one)."""
    frames = traceback.extract_tb(error.__traceback__)
    return any(f.filename.endswith("kernels.py") and "collectives" in f.filename
               and f.name in ("__call__", "place", "lower", "kernel", "check") for f in frames)


def _call_failed(name: str, error: BaseException) -> str:
    """What a failed call of the student's kernel means: JAX's whole explanation, and a hint."""
    text = str(error).strip()
    if _through_package_kernel(error):
        return (f"{name} calls one of the package's kernels (it raised {type(error).__name__} "
                "inside course_utils); write the jax.shard_map yourself")
    hint = tiled_hint(error, "p")
    if "out_specs" in text and "replicat" in text:
        hint = ("; out_specs=P() declares one value on every device, but after psum_scatter "
                "each device holds a different slice: give out_specs the spec of a vector "
                "split over 'data' (switching check_vma off would hide the mistake)")
    elif "of type NamedSharding" in text:
        hint = ("; in_specs and out_specs take PartitionSpecs, P(...), not NamedShardings "
                "such as sliced: the mesh is already given by mesh=")
    elif "pytree structure" in text and "in_specs" in text:
        hint = "; in_specs must be a tuple with one P(...) per argument, not a list"
    elif "positional argument" in text:
        hint = "; the kernel takes the three blocks (x_block, y_block, w), one per in_specs entry"
    elif "broadcasting" in text:
        hint = ("; x_block and y_block must hold the same rows: x split by rows "
                "(P('data', None)) and y split the same way (P('data')); P() hands a device "
                "the whole array")
    elif isinstance(error, AttributeError) and "trac" in text:
        hint = ("; inside jax.jit every array is a tracer, with no .sharding or device data: "
                "jit the jax.shard_map of your kernel, not a function that places or inspects "
                "arrays")
    return f"calling {name}(x, y, w) raised {type(error).__name__}:\n{text}\n{hint.lstrip('; ')}"


def _fresh_problem(x, y, w, seed: int = 27):
    """Inputs of the same shapes and placements that the student never saw, with their host
    copies."""
    rng = np.random.default_rng(seed)
    hosts = [rng.standard_normal(np.shape(a)).astype(np.float32) for a in (x, y, w)]
    placed = [jax.device_put(h, a.sharding) if isinstance(a, jax.Array) else h
              for h, a in zip(hosts, (x, y, w))]
    return placed, hosts


def check_reduce_scatter(fn, x, y, w, x_host, y_host, w_host, n_devices: int) -> None:
    """Exercise 03: your jitted reduce-scatter kernel: called on the placed ``x, y, w`` it returns
    the gradient split by features, and its compiled program communicates with a reduce-scatter.
    It must be the student's own: not the package's kernel, nor a wrapper of it, nor a result
    computed beforehand (it is called again on inputs it never saw).
    """
    exercise = "reduce-scatter kernel"
    name = "my_reduce_scatter"
    given(exercise, name, fn, f"assign your jitted function to {name}")
    if _package_kernel_in(fn):
        fail(exercise, f"{name} is (or wraps) the package's own kernel; write the shard_map "
             "yourself")
    if isinstance(fn, (np.ndarray, jax.Array)) or not callable(fn):
        fail(
            exercise,
            f"{name} is an object of type {type(fn).__name__}, not a function; pass the jitted "
            "function itself, "
            "the check calls it",
        )
    failure = None
    try:
        g = fn(x, y, w)
    except Exception as error:  # noqa: BLE001 - the student's function failed: say how
        failure = _call_failed(name, error)
    if failure:
        fail(exercise, failure)  # outside the except: no traceback chained into the package
    expected = reference_gradient(
        np.asarray(x_host), np.asarray(y_host), np.asarray(w_host)
    ).astype(np.float32)
    if tuple(np.shape(g)) == (expected.size // n_devices,) and n_devices > 1:
        fail(
            exercise,
            f"{name}(x, y, w) has the shape of one slice, {tuple(np.shape(g))}: with out_specs=P() "
            "and check_vma off, JAX keeps one device's slice as if all held the same; say in "
            "out_specs that the result is split over 'data'",
        )
    ratio = common_ratio(np.asarray(g).ravel(), expected.ravel()) if np.shape(g) == np.shape(
        expected) else None
    hint = ""
    if ratio is not None and math.isclose(ratio, n_devices, rel_tol=1e-3):
        hint = ("every device seems to add the whole gradient: did each get all of x and y "
                "(P() in in_specs), or divide by the rows per device?")
    check_values(exercise, f"{name}(x, y, w)", g, expected, hint=hint)
    fresh, fresh_hosts = _fresh_problem(x, y, w)
    try:
        again = np.asarray(fn(*fresh))
    except Exception as error:  # noqa: BLE001
        failure = _call_failed(name, error)
    if failure:
        fail(exercise, failure)
    if not np.allclose(again, reference_gradient(*fresh_hosts), atol=1e-4, rtol=1e-4):
        fail(exercise, f"{name} gives the right gradient for x, y, w but a wrong one for other "
             "inputs of the same shapes: its result was computed beforehand (captured from "
             "outside), not from its arguments")
    if hasattr(g, "addressable_shards") and len(g.addressable_shards) == 1 < n_devices:
        fail(exercise, f"{name}(x, y, w) lives on one device: it was computed outside the "
             f"mesh (on the host, or as a constant), not by a shard_map over the {n_devices} "
             "devices")
    check_placement(exercise, f"{name}(x, y, w)", g, (expected.size // n_devices,), n_devices)
    ops = _program(exercise, fn, (x, y, w))
    if _runs_package_kernel(fn if hasattr(fn, "lower") else jax.jit(fn), (x, y, w)):
        fail(exercise, f"{name} runs the package's reduce_scatter_gradient (or another package "
             "kernel) inside; write the jax.shard_map and its psum_scatter yourself")
    if "reduce-scatter" not in ops:
        found = f"only {', '.join(sorted(set(ops)))}" if ops else "no collective at all"
        why = (
            "the devices never combine their shares (was the gradient computed elsewhere and "
            "placed?)"
            if not ops
            else "every device receives more of the sum than the slice it keeps"
        )
        fail(
            exercise,
            f"the right result, but the compiled program of {name} has {found}: {why}; compute "
            "each device's share inside jax.shard_map and end with jax.lax.psum_scatter",
        )
    if "all-reduce" in ops:
        fail(
            exercise,
            f"the compiled program of {name} has an all-reduce besides the reduce-scatter: "
            "every device still receives the whole sum; use only jax.lax.psum_scatter",
        )
    passed(
        exercise,
        f"each device holds {expected.size // n_devices} of the {expected.size} gradient values, "
        "communicated by one reduce-scatter",
    )


def _split_hint(guess: list, block: tuple, whole: tuple) -> str:
    """The likely mistake behind a wrong block shape, from the array's global shape."""
    if tuple(guess) == whole:
        return " — that is the whole array: the spec splits a dimension over the devices"
    if tuple(sorted(guess)) == tuple(sorted(block)):
        return (" — the right sizes in the wrong order: a block keeps the array's order of "
                "dimensions")
    parts = math.prod(whole) // math.prod(block)
    for k in range(len(whole)):  # one dimension split, but not the one the spec names
        split = [n // parts if j == k else n for j, n in enumerate(whole)]
        if list(guess) == split:
            return (" — the split is on the wrong dimension: a PartitionSpec's k-th entry says how "
                    "dimension k is split, and a missing entry means that dimension is not split")
        turned = [n // parts if j == k else n for j, n in enumerate(whole[::-1])]
        if len(whole) == 2 and list(guess) == turned:
            return (f" — that is a block of an array of shape {whole[::-1]}; the array placed "
                    f"has shape {whole}")
    return ""


def check_predicted_shard_shapes(predicted, array) -> None:
    """Exercise 04: predicted per-device block shapes against the placed array's real ones."""
    exercise = "shard shapes of a PartitionSpec"
    actual = sorted(((s.device.id, tuple(s.data.shape)) for s in array.addressable_shards))
    wanted = f"predict one shape per device: a list of {len(actual)} tuples such as (rows, cols)"
    if not isinstance(predicted, (list, tuple)) or len(predicted) != len(actual):
        fail(exercise, f"{wanted}, got {predicted!r}")
    for (device, shape), guess in zip(actual, predicted):
        sizes = [number(g) for g in guess] if isinstance(guess, (list, tuple)) else None
        if sizes is None or len(sizes) != len(shape) or None in sizes:
            fail(exercise, f"{wanted}; device {device}'s entry is {guess!r}")
        if not all(isinstance(g, (numbers.Integral, np.integer)) for g in guess):
            fail(exercise, f"a shape holds whole numbers (ints); device {device}'s entry is "
                            f"{guess!r}")
        off = [f"dimension {k}: {off_by(g, n)}" for k, (g, n) in enumerate(zip(sizes, shape))
               if g != n]
        if off:
            fail(exercise, f"wrong shard shape on device {device}: {'; '.join(off)}"
                            f"{_split_hint(sizes, shape, tuple(array.shape))}")
    passed(exercise, f"{len(actual)} blocks of {actual[0][1]}")


def _stored_mismatch(exercise: str, predicted: dict, measured: dict, where: str = "") -> None:
    """Fail on the first entry of ``predicted`` that differs from the ``measured`` bytes, naming
    every likely cause that fits the number."""
    whole = max(measured.values())  # the whole gradient, after all-reduce
    ranks = whole // min(measured.values())
    for key, value in measured.items():
        got = number(predicted[key])
        if got is None:
            fail(exercise, f"{where}{key}: give a number of bytes, got {predicted[key]!r}")
        if not math.isclose(got, value, abs_tol=1e-9):
            causes = []  # every likely cause that fits the number (with p = 4, two can)
            if value == whole and ranks > 1 and math.isclose(got * ranks, whole):
                name = key.replace("_", "-")
                causes.append(f"after {name} every device holds the whole gradient")
            if value < whole and math.isclose(got, whole):
                causes.append("after reduce-scatter each device keeps one slice of the sum")
            passes = 2 if key == "all_reduce" else 1
            if ranks > 1 and math.isclose(got * ranks, passes * (ranks - 1) * whole):
                causes.append("that is what a ring sends per rank, not what a device keeps")
            causes += unit_causes(got, value)
            if ranks > 1 and math.isclose(got, value * ranks):
                causes.append(f"count what one device holds, not all {ranks} together")
            if value < whole and math.isclose(got * 2, whole):
                causes.append("reduce-scatter splits the sum into one slice per device, not two")
            hint = "; ".join([off_by(got, value), *([" — or ".join(causes)] if causes else [])])
            fail(exercise, f"{where}{key}: {hint}")


def _measured_bytes(arrays: dict) -> dict:
    return {key: values_per_device(a) * a.dtype.itemsize for key, a in arrays.items()}


def check_stored_bytes_rule(stored_bytes, devices) -> None:
    """Exercise 05: the student's rule ``stored_bytes(gradient_bytes, p)`` (a dict of bytes one
    device stores after all-reduce, reduce-scatter and the all-gather of its result) against
    bytes measured on meshes of 2 and of all ``devices``, for gradient sizes the notebook never
    showed, so a dict of numbers copied from a run cannot pass."""
    exercise = "bytes one device stores"
    given(exercise, "stored_bytes", stored_bytes, "define a function stored_bytes(n_bytes, p)")
    if not callable(stored_bytes):
        fail(exercise, f"stored_bytes must be a function of (n_bytes, p), got "
                       f"{type(stored_bytes).__name__}: the check calls it for other sizes")
    keys = ("all_reduce", "reduce_scatter", "all_gather")
    checked = []
    for p in sorted({min(2, len(devices)), len(devices)}):
        mesh = Mesh(np.array(list(devices)[:p]), ("data",))
        specs = (P("data", None), P("data"), P())
        n_values = 3 * p  # a size the notebook's gradient (2p values) does not have
        args = [jax.device_put(a, NamedSharding(mesh, s))
                for a, s in zip(toy_regression(2 * p, n_values), specs)]
        scattered = reduce_scatter_gradient(mesh)(*args)
        arrays = {"all_reduce": all_reduce_gradient(mesh)(*args), "reduce_scatter": scattered,
                  "all_gather": all_gather_shards(mesh)(scattered)}
        n_bytes = 4 * n_values
        try:
            predicted = stored_bytes(n_bytes, p)
        except Exception as err:  # the student's error, shown as one line
            fail(exercise, f"stored_bytes({n_bytes}, {p}) raised {error_line(err)}")
        check_keys(exercise, f"stored_bytes({n_bytes}, {p})", predicted, keys)
        _stored_mismatch(exercise, predicted, _measured_bytes(arrays),
                         f"a {n_bytes}-byte gradient on p = {p}: ")
        checked.append(f"{n_bytes} B on p = {p}")
    passed(exercise, f"measured on device 0 for {' and '.join(checked)}")


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


def _two_state_mistakes(w, m, s, g, lr, b1, b2, eps, n_devices: int) -> dict:
    """The likely wrong forms of each result, each with what to say (checked in this order)."""
    m_next, s_next = b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g * g
    root = np.sqrt(s_next)
    k = w.size // n_devices
    first_slice = np.tile(w[:k], n_devices)  # every device took the first slice of w
    return {
        "m_next": {
            "β1 and 1−β1 are swapped: the old m keeps the weight β1": (1 - b1) * m + b1 * g,
            "the gradient's weight is 1−β1 (the momentum above adds g itself)": b1 * m + g,
            "that is the gradient itself: m_next mixes the old m with g": g,
        },
        "s_next": {
            "the gradient must be squared (g**2), not g": b2 * s + (1 - b2) * g,
            "β2 and 1−β2 are swapped: the old s keeps the weight β2": (1 - b2) * s + b2 * g * g,
            "the squared gradient's weight is 1−β2": b2 * s + g * g,
        },
        "w_next": {
            "ε goes outside the square root: sqrt(s) + eps":
                w - lr * m_next / np.sqrt(s_next + eps),
            "ε is missing": w - lr * m_next / root,
            "ε belongs in the denominator, added to sqrt(s)": w - lr * m_next / root + eps,
            "the step goes the wrong way: subtract lr · m / (sqrt(s) + ε)":
                w + lr * m_next / (root + eps),
            "this exercise has no bias correction: use m_next and s_next as they are": w - lr * (
                m_next / (1 - b1)) / (np.sqrt(s_next / (1 - b2)) + eps),
            "use the updated states m_next and s_next, not the old m and s":
                w - lr * m / (np.sqrt(s) + eps),
            "the step is lr · m / (sqrt(s) + ε): the square root is missing":
                w - lr * m_next / (s_next + eps),
            "every device updated the first slice of w: cut this device's own slice, at "
            "jax.lax.axis_index('data') · features/p":
                first_slice - lr * m_next / (root + eps),
        },
    }


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
    name = "two_state_step"
    given(exercise, name, step, f"assign your jitted function to {name}")
    if isinstance(step, (np.ndarray, jax.Array, tuple, list)) or not callable(step):
        fail(exercise, f"{name} is an object of type {type(step).__name__}, not a function; pass "
             "the jitted function itself, the check calls it")
    n_devices = mesh.size
    results = []
    for seed in (61, 62):
        host, placed = _two_state_inputs(mesh, tuple(shape), seed)
        try:
            out = step(*placed)
        except Exception as error:  # noqa: BLE001 - the student's function failed: say how
            fail(exercise, f"calling {name}(x, y, w, m, s) raised {error_line(error)}")
        if not isinstance(out, (tuple, list)) or len(out) != 3:
            fail(exercise, f"{name}(x, y, w, m, s) must return (w_next, m_next, s_next), three "
                 f"arrays; got {type(out).__name__}")
        results.append((host, placed, out))
    (host, placed, out), (_, _, other) = results
    if all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(out, other)):
        fail(exercise, f"{name} returns the same arrays for different inputs: compute from its "
             "arguments x, y, w, m, s, not from arrays of the notebook (g_slices, m0, ...)")
    x, y, w, m, s = (a.astype(np.float64) for a in host)
    g = reference_gradient(x, y, w)
    mistakes = _two_state_mistakes(w, m, s, g, lr, beta1, beta2, eps, n_devices)
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
                if np.allclose(got_host, wrong, atol=atol, rtol=1e-5):
                    fail(exercise, f"{key}: {hint}")
        check_values(exercise, f"{key} (on the check's own inputs)", got, expected.astype(
            np.float32), atol=atol, rtol=1e-5)
    slice_shape = (w.size // n_devices,)
    check_placement(exercise, "w_next", out[0], w.shape, n_devices)
    check_placement(exercise, "m_next", out[1], slice_shape, n_devices)
    check_placement(exercise, "s_next", out[2], slice_shape, n_devices)
    jitted = step if hasattr(step, "lower") else jax.jit(step)
    try:
        program = collectives_in(jitted, *placed)
    except Exception as error:  # noqa: BLE001 - any failure to compile is the student's to fix
        why = "" if hasattr(step, "lower") else (
            "; a Python function that calls the package's kernels runs, but is not one program "
            "the check can read")
        fail(exercise, f"{name} does not compile as one JAX program ({error_line(error)}{why}); "
             "build it from jax.shard_map and wrap it in jax.jit")
    written = {op.op for op in program.stablehlo} | {op.op for op in program.hlo}
    if written & {"all_reduce", "all-reduce"}:
        fail(exercise, "the right numbers, but the program all-reduces the gradient: every "
             "device receives all of it and then keeps a slice; use jax.lax.psum_scatter "
             "(tiled=True), which sends each device only its slice")
    if not written & {"reduce_scatter", "reduce-scatter"}:
        fail(exercise, "the right numbers, but the program has no reduce-scatter: compute the "
             "gradient inside the step (from x_block, y_block, w) and end it with psum_scatter")
    passed(exercise, f"both states kept in slices of {slice_shape[0]}, the gradient "
           "reduce-scattered, the weights gathered")


_NOT_GIVEN = object()


def _defined(exercise: str, name: str, value, shape: tuple, what: str) -> None:
    """A value the check looked up by name: defined (``None`` if not) and of ``shape``."""
    given(exercise, name, value, what)
    if tuple(np.shape(value)) != shape:
        fail(exercise, f"{name} has shape {tuple(np.shape(value))}, expected {shape}")


def _permutation_mistakes(x, y, w2_host) -> dict:
    """The likely wrong gradients of exercise 07 (each with what to say), from the original
    data: only one of x and y reordered, the columns reordered, the weights not moved."""
    same = "reorder the rows of x and the labels y with the same permutation"
    return {
        # x alone or y alone reordered pair the same rows with the same wrong labels
        f"only the labels y, or only the rows of x, were reordered, so each row got another "
        f"row's label; {same}": reference_gradient(x, y[::-1].copy(), w2_host),
        "the permutation went to the columns (features) of x: reorder its rows, x[::-1]":
            reference_gradient(x[:, ::-1].copy(), y[::-1].copy(), w2_host),
        "that is the gradient at the original weights w: use w2 = w + 0.17 (w2h)":
            reference_gradient(x, y, w2_host - np.float32(0.17)),
    }


def _same_buffers(a, b) -> bool:
    """Whether two placed arrays are one result (the same object or the same device buffers)."""
    if a is b:
        return True
    try:
        return [s.data.unsafe_buffer_pointer() for s in a.addressable_shards] == [
            s.data.unsafe_buffer_pointer() for s in b.addressable_shards]
    except Exception:  # noqa: BLE001 - a backend without buffer pointers: identity only
        return False


def check_joint_permutation(
    g_all,
    g_gathered,
    x,
    y,
    w2_host,
    n_devices: int,
    *,
    x2=_NOT_GIVEN,
    y2=_NOT_GIVEN,
    w2=_NOT_GIVEN,
) -> None:
    """Exercise 07: both communication paths give the original data's gradient on every device.

    ``x`` and ``y`` are the data in their original order. ``x2``, ``y2`` and ``w2`` (your placed
    inputs; ``None`` for a name you did not define) are checked when given: ``x2`` and ``y2`` hold
    the same rows reordered together and split by rows, ``w2`` is ``w2_host`` replicated. When all
    three are given, each result must also be what its program computes from them, bit for bit:
    a gradient computed elsewhere and placed, or one result reused for the other, does not pass.
    """
    exercise = "joint row permutation"
    x, y, w2_host = (np.asarray(a) for a in (x, y, w2_host))
    target = reference_gradient(x, y, w2_host).astype(np.float32)
    mistakes = _permutation_mistakes(x, y, w2_host)
    block = x.shape[0] // n_devices
    if x2 is not _NOT_GIVEN:
        _defined(exercise, "x2", x2, x.shape, "place the reordered rows of xh as x2")
        if np.array_equal(np.asarray(x2), x):
            labels_moved = y2 is not _NOT_GIVEN and y2 is not None and np.shape(y2) == y.shape \
                and not np.array_equal(np.asarray(y2), y)
            fail(exercise, "x2 holds the rows of x in their original order" + (
                " while y2 is reordered: reorder the rows with the same permutation as the "
                "labels" if labels_moved else "; reorder them"))
        rows = {row.tobytes(): i for i, row in enumerate(x)}
        order = [rows.get(row.tobytes()) for row in np.asarray(x2, dtype=x.dtype)]
        if None in order or sorted(order) != list(range(len(x))):
            by_row = {np.sort(r).tobytes() for r in x}
            if all(np.sort(r).tobytes() in by_row for r in np.asarray(x2, dtype=x.dtype)):
                fail(exercise, "x2 reorders the columns (features) of x: reorder its rows, "
                     "x[::-1], and keep each row as it is")
            fail(exercise, "x2 does not hold each row of x exactly once; reorder, do not change")
        check_placement(exercise, "x2", x2, (block, x.shape[1]), n_devices)
    if y2 is not _NOT_GIVEN:
        _defined(exercise, "y2", y2, y.shape, "place the reordered labels as y2")
        if x2 is not _NOT_GIVEN and not np.array_equal(np.asarray(y2), y[order]):
            fail(
                exercise,
                "y2 is not ordered like the rows of x2; reorder the labels with the same "
                "permutation as the rows",
            )
        check_placement(exercise, "y2", y2, (block,), n_devices)
    if w2 is not _NOT_GIVEN:
        given(exercise, "w2", w2, "place w2h replicated as w2 (the next cells use it)")
        if np.shape(w2) == w2_host.shape and np.allclose(
                np.asarray(w2), w2_host - np.float32(0.17), atol=ATOL):
            fail(exercise, "w2 holds the original weights w; place w2h (w + 0.17) replicated")
        check_values(exercise, "w2", w2, w2_host, hint="w2 is w + 0.17 (w2h), placed replicated")
        check_placement(exercise, "w2", w2, w2_host.shape, n_devices)
    for name, g in (("g_all", g_all), ("g_gathered", g_gathered)):
        given(exercise, name, g, f"assign your result to {name}")
        got = np.asarray(g, dtype=np.float64) if hasattr(g, "shape") else None
        if got is not None and got.shape == target.shape and not np.allclose(
                got, target, atol=ATOL, rtol=ATOL):
            for hint, wrong in mistakes.items():
                if np.allclose(got, wrong, atol=ATOL, rtol=ATOL):
                    fail(exercise, f"{name}: {hint}")
        check_values(exercise, name, g, target, hint="reorder the rows of x and the labels y "
                     "with the same permutation, and use w2 = w + 0.17")
        check_placement(exercise, name, g, target.shape, n_devices)
        for shard in g.addressable_shards:
            check_values(exercise, f"{name} on device {shard.device.id}", shard.data, target)
    if _same_buffers(g_all, g_gathered):
        fail(exercise, "g_gathered is g_all itself: compute it on the second path, the "
             "reduce-scatter of x2, y2, w2 followed by the all-gather")
    if all(v is not _NOT_GIVEN for v in (x2, y2, w2)):
        _computed_from(exercise, g_all, g_gathered, x2, y2, w2)
    passed(
        exercise, f"both paths equal the gradient of the original data on all {n_devices} devices"
    )


def _computed_from(exercise: str, g_all, g_gathered, x2, y2, w2) -> None:
    """Each result is, bit for bit, what the package's kernels compute from ``x2, y2, w2``: the
    same program on the same inputs gives the same bits, while a gradient computed on the host
    (or on the data in its original order) and placed differs in the last bits."""
    from course_utils.collectives.kernels import (
        all_gather_shards,
        all_reduce_gradient,
        reduce_scatter_gradient,
    )

    mesh = x2.sharding.mesh
    paths = {
        "g_all": (g_all, all_reduce_gradient(mesh)(x2, y2, w2), "all_reduce(x2, y2, w2)"),
        "g_gathered": (g_gathered, all_gather_shards(mesh)(reduce_scatter_gradient(mesh)(
            x2, y2, w2)), "all_gather(reduce_scatter(x2, y2, w2))"),
    }
    for name, (got, program, call) in paths.items():
        if not np.array_equal(np.asarray(got), np.asarray(program)):
            fail(exercise, f"{name} has the right numbers, but not the bits that {call} computes:"
                 " was it computed elsewhere (on the host, or on the data in its first order) "
                 f"and placed? Compute {name} with the kernels, from x2, y2 and w2")


def check_budget_row(
    row: dict, nbytes: int, ranks: int, *, table_nbytes: int | None = None
) -> None:
    """Exercise 08: one row of the communication budget, predicted by hand. ``table_nbytes``: the
    N of the notebook's table, named when the row was computed for it instead of ``nbytes``.

    Whole numbers count in every natural form (int, a float such as ``1179648.0`` from ``/``,
    NumPy or 0-d JAX scalars); a row that ``communication_budget`` returned is refused, since
    the exercise asks for the prediction by hand."""
    exercise = f"budget for p = {ranks}"
    (expected,) = communication_budget(nbytes, (ranks,))
    given(exercise, "row", row, "store your prediction, a dict, in row")
    if isinstance(row, BudgetRow):
        fail(exercise, "row comes from communication_budget, which this exercise asks you not to "
             "call: write each entry from the formulas for p and N")
    check_keys(exercise, "row", row, expected)
    for key, value in expected.items():
        raw = scalar(row[key])  # a 0-d NumPy or JAX number counts as a number
        as_float = number(raw)
        if as_float is None or not math.isfinite(as_float):
            fail(exercise, f"{key}: give a whole number (an int), got {raw!r}")
        if key != "ranks" and (units := unit_causes(as_float, value)) and as_float != value:
            binary = [name for name, scale in (("MiB", 2**20), ("KiB", 2**10))
                      if math.isclose(as_float * scale, value)]
            unit = (f"that looks like {binary[0]}; the row asks for bytes" if binary
                    else "; or ".join(units))
            fail(exercise, f"{key}: {off_by(as_float, value)}; {unit} (p = {ranks}, "
                 f"N = {nbytes} bytes)")
        if not as_float.is_integer():
            fail(exercise, f"{key}: give a whole number of bytes, got {raw!r}")
        got = int(as_float)
        if got != value:
            sent = key != "shard_storage_bytes" and key != "ranks"
            slips = []
            if key == "shard_storage_bytes" and ranks > 1 and got == nbytes // (ranks - 1):
                slips.append("a device keeps 1 of p slices: divide by p, not p-1")
            other_n = got * nbytes // value if value else 0
            if (  # after the p-1 slip: at p = 4, N/(p-1) is also the table's N over p
                key != "ranks"
                and other_n == table_nbytes != nbytes
                and other_n * value == got * nbytes
            ):
                slips.append(
                    f"that is the value for N = {other_n} bytes, but this exercise's gradient "
                    f"is nbytes = {nbytes} bytes"
                )
            if sent and got == 2 * nbytes:
                slips.append("the factor (p-1)/p is missing")
            elif sent and got == nbytes:
                slips.append("that is N; in each of its two passes a ring rank sends p-1 chunks "
                             "of N/p")
            elif sent and 2 * got == value:
                slips.append("count both passes, reduce-scatter and all-gather")
            elif sent and ranks > 1 and got == nbytes // ranks:
                slips.append("that is N/p, the one slice a device keeps; count what it sends")
            elif key == "shard_storage_bytes" and ranks > 1 and got == nbytes:
                slips.append("that is N, the whole gradient; after reduce-scatter a device "
                             "keeps one slice of it")
            hint = off_by(got, value)
            if slips:
                hint += "; " + "; or ".join(slips)
            fail(exercise, f"{key}: {hint} (p = {ranks}, N = {nbytes} bytes)")
    passed(exercise, f"all-reduce {expected['all_reduce_bytes']} bytes per rank")
