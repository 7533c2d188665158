"""Self-check of step 03: the student's reduce-scatter of a gradient whose length p does not
divide (padded to a multiple of p, one reduce-scatter, each device its slice)."""

from __future__ import annotations

import math
import re

import jax
import numpy as np

from course_utils.checks.forbidden import (
    package_kernel_in,
    runs_package_kernel,
    through_package_kernel,
)
from course_utils.checks.helpers import (
    call_failed,
    check_placement,
    check_values,
    common_ratio,
    fail,
    given,
    passed,
    same_device_count,
)
from course_utils.constants import ATOL
from course_utils.devices.setup import placements
from course_utils.display import error_line
from course_utils.observe.ir import collectives_in
from course_utils.problems.regression import reference_gradient


def _program(exercise: str, fn, args: tuple) -> list[str]:
    """The collectives in the compiled program of ``fn`` (jitted here if it is not yet)."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)  # a bare shard_map is fine too
    try:
        return [op.op for op in collectives_in(jitted, *args).hlo]
    except Exception as error:  # noqa: BLE001 - any failure to compile is the student's to fix
        if through_package_kernel(error):
            fail(exercise, "your function calls one of the package's kernels; write the "
                 "jax.shard_map yourself")
        fail(exercise, f"your function does not compile as one JAX program ({error_line(error)}); "
                       "build it from jax.shard_map and wrap it in jax.jit")


def _kernel_hint(error: BaseException, text: str) -> str:
    """The hint for a failed call of exercise 03's kernel, for the mistakes of its own."""
    if match := re.search(r"scatter dimension size (\d+) must be divisible by shard_count (\d+)",
                          text):
        size, p = (int(d) for d in match.groups())
        return (f"psum_scatter(tiled=True) cuts the vector into p = {p} equal slices, and "
                f"{size} values do not split into {p}: pad the share with zeros first, to a "
                f"length that p divides")
    if "index can't contain negative values" in text or re.search(
            r"shape must have every element be nonnegative, got \(-\d+,\)", text):
        return ("a negative padding: the padded length came out shorter than the share's F "
                "values; work it out from this call's sizes, F from the share (or w.shape[0]) "
                "and p from jax.lax.axis_size('data'), not from the page's n_features or "
                "N_DEVICES")
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


def _scatter_cases(p: int) -> list[tuple[int, int]]:
    """(rows, features) of the check's own problems: feature counts p does not divide first
    (nothing to pad with one device), then one it does, at two row counts."""
    if p == 1:
        return [(4, 5), (2, 8)]
    return [(4 * p, 2 * p + 1), (2 * p, 2 * p - 1), (2 * p, 2 * p)]


def _implied_rows(got: np.ndarray, hosts: list) -> float | None:
    """The row count a padded gradient ``got`` divides by, if its real values are the reference
    gradient of ``hosts`` times one factor (the global row count when they are right)."""
    expected = reference_gradient(*hosts)
    f, n_rows = expected.size, hosts[0].shape[0]
    if got.size < f:
        return None
    if np.allclose(got[:f], expected, atol=ATOL, rtol=1e-4):
        return float(n_rows)
    ratio = common_ratio(got[:f].astype(np.float64), expected)
    return None if ratio is None else n_rows / ratio


def _scatter_values(exercise: str, call: str, got: np.ndarray, hosts: list, p: int,
                    elsewhere) -> None:
    """The padded gradient ``got`` against the reference gradient of ``hosts`` (the F real
    values): the real values first, zeros after; names the padding in front, a non-zero
    padding, y's first rows on every device, a fixed row count (``elsewhere()``: the row counts
    the other cases imply), a factor."""
    expected = reference_gradient(*hosts)
    f, length = expected.size, got.size
    pad = length - f
    close = np.allclose
    if pad and close(got[pad:], expected, atol=ATOL, rtol=1e-4) and close(got[:pad], 0):
        fail(exercise, f"{call}: padding at the front: the {f} real values must come first, "
                       "the zeros after them (slice i of the padded gradient is features "
                       "i·⌈F/p⌉ onwards)")
    if close(got[:f], expected, atol=ATOL, rtol=1e-4) and not close(got[f:], 0):
        fail(exercise, f"{call}: the {f} real values are right, but the padding holds values "
                       "other than 0: pad with zeros, which add nothing to the sum")
    x, y, w = hosts
    k = x.shape[0] // p
    if p > 1 and close(got[:f], reference_gradient(x, np.tile(y[:k], p), w), atol=ATOL,
                       rtol=1e-4):
        fail(exercise, f"{call}: every device paired its rows of x with the first {k} entries "
                       "of y (y[:k]), whatever its rows: give y the spec P('data') in in_specs, "
                       "split like x's rows, so y_block holds the targets of x_block's rows")
    rows = _implied_rows(got, hosts)
    if rows is not None and not math.isclose(rows, x.shape[0], rel_tol=1e-3) and any(
            other is not None and math.isclose(other, rows, rel_tol=1e-3)
            for other in elsewhere()):
        fail(exercise, f"{call} divides by a fixed row count ({rows:g}, the notebook's "
                       "n_rows?): take the global row count from the block, "
                       "x_block.shape[0] × p")
    hint = ""
    if rows is not None and math.isclose(x.shape[0] / rows, p, rel_tol=1e-3) and p > 1:
        hint = ("every device seems to add the whole gradient: did each get all of x and y "
                "(P() in in_specs), or divide by the rows per device?")
    check_values(exercise, f"the first {f} values of {call}", got[:f], expected, rtol=1e-4,
                 hint=hint)


def _scatter_shape(exercise: str, call: str, shape: tuple, f: int, p: int) -> None:
    """Fail, naming the likely slip, unless ``shape`` is that of the padded gradient."""
    length = p * math.ceil(f / p)
    if shape == (length,):
        return
    if p > 1 and f % p == 0 and shape == (f + p,):
        fail(exercise, f"{call} has {f + p} values: padded by p rather than to the next "
                       f"multiple of p; F = {f} already divides by p = {p}, so there is "
                       "nothing to pad")
    if p > 1 and shape == (length // p,):
        fail(exercise, f"{call} has the shape of one slice, {shape}: with out_specs=P() and "
                       "check_vma off, JAX keeps one device's slice as if all held the same; say "
                       "in out_specs that the result is split over 'data'")
    if p > 1 and shape in ((length * p,), (f * p,)):
        fail(exercise, f"{call} has shape {shape}, {p} whole gradients side by side: every "
                       "device kept the whole sum, as an all-reduce (psum) leaves it; a "
                       "reduce-scatter leaves each device only its slice")
    sizes = ""
    if len(shape) == 1 and shape[0] > length and shape[0] % p == 0:
        sizes = ("; padded too far: work the length out from this call's sizes, F from the "
                 "share (or w.shape[0]) and p from jax.lax.axis_size('data'), not from the "
                 "page's n_features or N_DEVICES")
    fail(exercise, f"{call} has shape {shape}, expected ({length},): the gradient padded to "
                   f"p·⌈F/p⌉ = {length} values for F = {f} features on p = {p} devices{sizes}")


def _scatter_program(exercise: str, name: str, fn, args: tuple) -> None:
    """Fail unless the compiled program of ``fn`` communicates with one reduce-scatter and
    nothing else, and does not run a package kernel."""
    ops = _program(exercise, fn, args)
    if runs_package_kernel(fn if hasattr(fn, "lower") else jax.jit(fn), args):
        fail(exercise, f"{name} runs the package's reduce_scatter_gradient (or another package "
             "kernel) inside; write the jax.shard_map and its psum_scatter yourself")
    if "reduce-scatter" not in ops:
        if "all-reduce" in ops:
            fail(exercise, f"the right result, but the compiled program of {name} has "
                           f"{', '.join(sorted(set(ops)))} and no reduce-scatter: an all-reduce "
                           "then a slice makes every device receive the whole sum and keep only "
                           "its slice; end with jax.lax.psum_scatter")
        if "all-gather" in ops:
            fail(exercise, f"the right result, but the compiled program of {name} has only "
                           f"{', '.join(sorted(set(ops)))}: gathering the p shares and adding "
                           "them on every device makes each device receive all p shares and "
                           "compute the whole sum, only to keep one slice of it; a "
                           "reduce-scatter sends each device only the pieces of its own slice: "
                           "end with jax.lax.psum_scatter")
        if ops:
            fail(exercise, f"the right result, but the compiled program of {name} combines the "
                           f"shares with {', '.join(sorted(set(ops)))}, not a reduce-scatter: "
                           "end with jax.lax.psum_scatter")
        fail(exercise, f"the right result, but the compiled program of {name} has no "
                       "collective: the devices never combine their shares (was the gradient "
                       "computed elsewhere and placed?); compute each device's share inside "
                       "jax.shard_map and end with jax.lax.psum_scatter")
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
        fail(exercise, f"the compiled program of {name} has {found}: "
                       f"{'; '.join(dict.fromkeys(reasons))}; each device needs only its own "
                       "blocks, so compute its share from x_block and y_block, pad it, and "
                       "communicate once, with one jax.lax.psum_scatter")


def check_reduce_scatter(fn, mesh, n_devices: int) -> None:
    """Exercise 03: ``fn(x, y, w)``, a jitted ``shard_map`` that, for any feature count F,
    leaves device i holding slice i of the gradient padded with zeros at the end to p·⌈F/p⌉
    values, communicated by one reduce-scatter and nothing else. Called on inputs of the
    check's own placed on ``mesh`` (F that p does not divide, and one that it does); the first
    F values are compared with the reference, the padding with 0, the length, the placement
    (⌈F/p⌉ per device) and the compiled program. Named: padding in front, padding by p on a
    multiple of p, an all-reduce then a slice, an all-gather then a local sum, a fixed row
    count, y's first rows on every device, no padding or a negative one (JAX's error, with a
    hint), a length from other sizes; the package's kernels are refused."""
    exercise = "reduce-scatter of any length"
    name = "my_reduce_scatter"
    same_device_count(exercise, n_devices)
    given(exercise, name, fn, f"assign your jitted function to {name}")
    if package_kernel_in(fn):
        fail(exercise, f"{name} is (or wraps) the package's own kernel; write the shard_map "
             "yourself")
    if not callable(fn):
        fail(exercise, f"{name} is an object of type {type(fn).__name__}, not a function; pass "
             "the jitted function itself, the check calls it")
    p = n_devices
    rows, replicated, sliced = placements(mesh)
    cases = []
    for k, (n_rows, f) in enumerate(_scatter_cases(p)):
        rng = np.random.default_rng(300 + k)
        hosts = [rng.standard_normal(s).astype(np.float32) for s in ((n_rows, f), (n_rows,), (f,))]
        cases.append((hosts, tuple(jax.device_put(h, s)
                                   for h, s in zip(hosts, (rows, sliced, replicated)))))

    def elsewhere(k: int):  # the row counts the other cases' gradients divide by
        for j, (hosts, args) in enumerate(cases):
            if j != k:
                try:
                    yield _implied_rows(np.ravel(np.asarray(fn(*args))), hosts)
                except Exception:  # noqa: BLE001 - a case that fails says nothing here
                    yield None

    checked = []
    for k, (hosts, args) in enumerate(cases):
        (n_rows, f), call = hosts[0].shape, f"{name}(x, y, w) with x of shape {hosts[0].shape}"
        failure = None
        try:
            g = fn(*args)
        except Exception as error:  # noqa: BLE001 - the student's function failed: say how
            failure = f"with x of shape {(n_rows, f)}, " + call_failed(
                name, "x, y, w", error, _kernel_hint)
        if failure:
            fail(exercise, failure)  # outside the except: no traceback chained into the package
        if not hasattr(g, "addressable_shards") or (len(g.addressable_shards) == 1 < p):
            fail(exercise, f"{call} is not on the {p} devices: it was computed outside the mesh "
                           "(on the host, or as a constant), not by a shard_map over them")
        _scatter_shape(exercise, call, tuple(np.shape(g)), f, p)
        _scatter_values(exercise, call, np.asarray(g), hosts, p, lambda k=k: elsewhere(k))
        check_placement(exercise, call, g, (math.ceil(f / p),), p)
        if k == 0:
            _scatter_program(exercise, name, fn, args)
        checked.append(f)
    passed(exercise, f"F = {', '.join(map(str, checked))} features on p = {p}: each device holds "
                     "its slice of the zero-padded gradient, communicated by one reduce-scatter")
