"""Self-checks of steps 02 and 03: the per-device shares and the student's reduce-scatter."""

from __future__ import annotations

import functools
import math
import re

import jax
import numpy as np

from course_utils.checks.forbidden import (
    package_kernel_in,
    read_globals,
    runs_package_kernel,
    through_package_kernel,
    uses_forbidden,
)
from course_utils.checks.helpers import (
    call_failed,
    call_without,
    check_placement,
    check_values,
    common_ratio,
    fail,
    function_given,
    given,
    passed,
    same_device_count,
)
from course_utils.collectives.kernels import local_contribution
from course_utils.constants import ATOL
from course_utils.display import error_line
from course_utils.observe.ir import collectives_in
from course_utils.problems.regression import reference_gradient


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


def _expected_shares(x, y, w, p: int) -> np.ndarray:
    """The ``(p, n_features)`` shares of p blocks of consecutive rows, over the global rows."""
    blocks = np.split(np.arange(x.shape[0]), p)
    return np.stack([2 * x[b].T @ (x[b] @ w - y[b]) / x.shape[0] for b in blocks])


def _fixed_row_count(my_shares, got, x, y, w, p: int) -> float | None:
    """The row count ``my_shares`` divides by when it is the same for ``x`` and for ``x`` twice
    as long (a number from outside, such as the notebook's ``n_rows``), else None."""

    def count(shares, xs, ys) -> float | None:
        expected = _expected_shares(xs, ys, w, p)
        if np.shape(shares) != expected.shape:
            return None
        ratio = common_ratio(np.ravel(shares), expected.ravel())
        return len(xs) / ratio if ratio is not None and ratio > 0 else None

    if (first := count(got, x, y)) is None:
        return None
    x2, y2 = np.concatenate([x, x]), np.concatenate([y, y])
    try:  # the student's function once more, on twice the rows
        second = count(np.asarray(my_shares(x2.copy(), y2.copy(), w.copy(), p)), x2, y2)
    except Exception:  # noqa: BLE001 - any failure: no fixed count to name
        return None
    return first if second is not None and math.isclose(first, second, rel_tol=1e-3) else None


def _check_stacked(shares, x, y, w, n_devices: int, name: str = "my_shares") -> None:
    """The stacked ``(n_devices, n_features)`` shares of the row blocks of x, y, against the
    formula; names the likely mistake (wrong divisor, transposed, another order, ...)."""
    exercise = "per-device shares"
    n_rows = x.shape[0]
    expected = _expected_shares(x, y, w, n_devices)
    hint, got = "", np.asarray(shares) if isinstance(shares, np.ndarray | jax.Array) else None
    ratio = common_ratio(got.ravel(), expected.ravel()) if got is not None and (
        got.shape == expected.shape) else None
    if ratio is not None and math.isclose(ratio, n_devices, rel_tol=1e-3) and n_devices > 1:
        hint = f"divide every share by the global row count ({n_rows}), not by the rows per device"
    elif got is not None:
        hint = _shares_mistake(got, expected, reference_gradient(x, y, w))
    if hint and got.shape != expected.shape:
        fail(exercise, f"{name} has shape {got.shape}, expected {expected.shape}: {hint}")
    check_values(exercise, name, shares, expected, hint=hint)


def check_shares(my_shares) -> None:
    """Exercise 02: the student's function ``my_shares(x, y, w, p)``, the stacked ``(p,
    n_features)`` shares of p blocks of consecutive rows, computed in NumPy. It is called on
    inputs the notebook never showed, for this run's p and others, so that arrays the notebook
    computed (``shares``, ``host_shares``) cannot pass, and it must not be or call
    ``gradient_share`` (the notebook's), ``local_contribution`` or ``reference_gradient``."""
    exercise = "per-device shares"
    function_given(exercise, "my_shares", my_shares)
    own = ("gradient_share", "share_per_device")  # the notebook's: named as the student wrote
    refusal = ("my_shares uses {}, which this exercise asks you not to call{}: write the "
               "gradient formula for each block yourself")
    twin = " (the page's gradient_share is the package's local_contribution, the same code)"
    if (name := uses_forbidden(my_shares, own)) is not None:  # before its package twin's name
        fail(exercise, refusal.format(name, twin if name in own else ""))
    forbidden = (local_contribution, reference_gradient, *own)
    p_run = jax.device_count()
    checked = []
    for k, p in enumerate(dict.fromkeys((p_run, 2, 3))):  # this run's p first
        rng = np.random.default_rng(200 + k)
        n = 3 * math.lcm(p, p_run)  # rows that also split into p_run blocks: name N_DEVICES
        x, y, w = (rng.standard_normal(s).astype(np.float32) for s in ((n, 5), (n,), (5,)))
        call = f"my_shares(x, y, w, {p})"
        got = call_without(
            exercise, my_shares, (x.copy(), y.copy(), w.copy(), p), forbidden=forbidden,
            refusal=refusal.format("{}", ""),
            call=f"{call}, with x of shape {x.shape},")
        if got is None:
            fail(exercise, f"{call} returned None: return the stacked shares")
        if checked and _stacked_right(got, x, y, w, p_run):
            fail(exercise, f"{call} gives the shares for p = {p_run}: use the argument p, not "
                 "N_DEVICES")
        if (fixed := _fixed_row_count(my_shares, got, x, y, w, p)) is not None:
            if math.isclose(fixed, x.shape[1], rel_tol=1e-3):
                fail(exercise, f"{call} divides by {fixed:g}, x's feature count (axis 1): the "
                     "rows are x's axis 0")
            fail(exercise, f"{call} divides by a fixed row count ({fixed:g} — the notebook's "
                 f"n_rows?): use the rows of the x you are given, whatever its length")
        read = _notebook_arrays(my_shares)
        if read and not _stacked_right(got, x, y, w, p):
            fail(exercise, f"{call} reads the notebook's {', '.join(read)}: compute from its "
                 "arguments x, y, w")
        _check_stacked(got, x, y, w, p, call)
        checked.append(p)
    passed(exercise, f"the shares of p = {', '.join(map(str, checked))} blocks add up to the "
           "gradient")


def _notebook_arrays(fn) -> list[str]:
    """The notebook's arrays ``fn``'s code reads as globals (``xh``, ``yh``, ``wh``, ...)."""
    return [n for n, v in read_globals(fn).items() if isinstance(v, np.ndarray | jax.Array)]


def _stacked_right(got, x, y, w, p: int) -> bool:
    """Whether ``got`` is the right stacked shares for ``p`` blocks."""
    try:
        _check_stacked(got, x, y, w, p)
    except Exception:  # noqa: BLE001 - wrong in any way, or p does not divide the rows
        return False
    return True


def _program(exercise: str, fn, args: tuple) -> list[str]:
    """The collectives in the compiled program of ``fn`` (jitted here if it is not yet)."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)  # a bare shard_map is fine too
    try:
        return [op.op for op in collectives_in(jitted, *args).hlo]
    except Exception as error:  # noqa: BLE001 - any failure to compile is the student's to fix
        if through_package_kernel(error):
            fail(exercise, "your function calls one of the package's kernels; write the "
                 "jax.shard_map yourself")
        fail(
            exercise,
            f"your function does not compile as one JAX program ({error_line(error)}); "
            "build it from jax.shard_map and wrap it in jax.jit",
        )


def _kernel_hint(error: BaseException, text: str) -> str:
    """The hint for a failed call of exercise 03's kernel, for the mistakes of its own."""
    if "out_specs" in text and "replicat" in text:
        return ("out_specs=P() declares one value on every device, but after psum_scatter "
                "each device holds a different slice: give out_specs the spec of a vector "
                "split over 'data' (switching check_vma off would hide the mistake)")
    if "positional argument" in text:
        return "the kernel takes the three blocks (x_block, y_block, w), one per in_specs entry"
    if match := re.search(r"dot_general requires contracting dimensions to have the same "
                          r"shape, got \((\d+),\) and \((\d+),\)", text):
        left, right = (int(d) for d in match.groups())
        wrong = ("x's in_specs entry splits x's features over 'data': give x P('data', None), "
                 "split by rows only" if left < right else
                 "w's in_specs entry splits w over 'data': give w P(), every device needs the "
                 "whole weights")
        return (f"x_block @ w needs x_block's features and w's length to match, got {left} and "
                f"{right}: {wrong}")
    if "broadcasting" in text:
        return ("x_block and y_block must hold the same rows: x split by rows "
                "(P('data', None)) and y split the same way (P('data')); P() hands a device "
                "the whole array")
    return ""


def _call_failed(name: str, error: BaseException) -> str:
    """What a failed call of the student's kernel means: JAX's whole explanation, and a hint."""
    return call_failed(name, "x, y, w", error, _kernel_hint)


def _fresh_problem(x, y, w, seed: int = 27):
    """Inputs the student never saw, placed like ``x, y, w``, with twice the rows (so a kernel
    that divides by the notebook's row count is caught), and their host copies."""
    rng = np.random.default_rng(seed)
    n_rows, n_features = np.shape(x)
    shapes = ((2 * n_rows, n_features), (2 * n_rows,), (n_features,))
    hosts = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    placed = [jax.device_put(h, a.sharding) if isinstance(a, jax.Array) else h
              for h, a in zip(hosts, (x, y, w))]
    return placed, hosts


def check_reduce_scatter(fn, x, y, w, x_host, y_host, w_host, n_devices: int) -> None:
    """Exercise 03: your jitted reduce-scatter kernel: called on the placed ``x, y, w`` it returns
    the gradient split by features, and its compiled program communicates with a reduce-scatter.
    It must be the student's own: not the package's kernel, nor a wrapper of it, nor a result
    computed beforehand (it is called again on inputs it never saw).
    """
    same_device_count("reduce-scatter kernel", n_devices)
    exercise = "reduce-scatter kernel"
    name = "my_reduce_scatter"
    given(exercise, name, fn, f"assign your jitted function to {name}")
    if package_kernel_in(fn):
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
    if tuple(np.shape(g)) == (expected.size * n_devices,) and n_devices > 1:
        fail(exercise, f"{name}(x, y, w) has shape {tuple(np.shape(g))}, {n_devices} whole "
             "gradients side by side: every device kept the whole sum, as an all-reduce (psum) "
             "leaves it; a reduce-scatter leaves each device only its slice")
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
    fresh_reference = reference_gradient(*fresh_hosts)
    if np.shape(again) == np.shape(fresh_reference) and math.isclose(
            common_ratio(again, fresh_reference) or 1.0, 2.0, rel_tol=1e-3):
        fail(exercise, f"{name} is right for x of {np.shape(x)[0]} rows but 2× too large for x "
             f"of {2 * np.shape(x)[0]} rows: it divides by a fixed row count (the notebook's "
             "n_rows?); take the global row count from the block, x_block.shape[0] × p")
    if not np.allclose(again, fresh_reference, atol=1e-4, rtol=1e-4):
        fail(exercise, f"{name} gives the right gradient for x, y, w but a wrong one for other "
             "inputs of the same shapes: its result was computed beforehand (captured from "
             "outside), not from its arguments")
    if hasattr(g, "addressable_shards") and len(g.addressable_shards) == 1 < n_devices:
        fail(exercise, f"{name}(x, y, w) lives on one device: it was computed outside the "
             f"mesh (on the host, or as a constant), not by a shard_map over the {n_devices} "
             "devices")
    check_placement(exercise, f"{name}(x, y, w)", g, (expected.size // n_devices,), n_devices)
    ops = _program(exercise, fn, (x, y, w))
    if runs_package_kernel(fn if hasattr(fn, "lower") else jax.jit(fn), (x, y, w)):
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
    extra, count = sorted({op for op in ops if op != "reduce-scatter"}), ops.count("reduce-scatter")
    if extra or count > 1:
        why = {
            "all-reduce": "every device still receives the whole sum",
            "all-gather": "devices receive other devices' rows of x and y (or whole vectors)",
        }
        reasons = [why.get(op, "data moves between the devices beyond the one reduce-scatter")
                   for op in extra] or ["the share is sent in pieces, one collective each"]
        found = (f"{', '.join(extra)} besides " if extra else "") + (
            "the reduce-scatter" if count == 1 else f"{count} reduce-scatters")
        fail(
            exercise,
            f"the compiled program of {name} has {found}: {'; '.join(dict.fromkeys(reasons))}; "
            "each device needs only its own blocks, so compute its share from x_block and "
            "y_block and communicate once, with one jax.lax.psum_scatter",
        )
    passed(
        exercise,
        f"each device holds {expected.size // n_devices} of the {expected.size} gradient values, "
        "communicated by one reduce-scatter",
    )
