"""Self-checks of steps 02 and 03: the factors that make ``pmean`` exact on unequal shards, and
the student's reduce-scatter of a gradient whose length does not divide by p."""

from __future__ import annotations

import math
import re

import jax
import numpy as np
from jax import P
from jax.sharding import Mesh

from course_utils.checks.forbidden import (
    package_kernel_in,
    runs_package_kernel,
    through_package_kernel,
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
from course_utils.constants import ATOL
from course_utils.devices.setup import placements
from course_utils.display import error_line
from course_utils.observe.ir import collectives_in
from course_utils.problems.regression import reference_gradient

# ---------------------------------------------------------------------------------------------
# step 02: pmean_weights(counts)


def _exact_factors(counts) -> np.ndarray:
    """The factor each device multiplies its local mean by so that ``pmean`` of the products
    is the mean over all rows: p·cᵢ/Σc (the check's reference; a student must not call it)."""
    counts = np.asarray(counts, dtype=np.float64)
    return len(counts) * counts / counts.sum()


def _weighted_pmean(x_block, y_block, m_block, f_block, w):
    # x_block: f32[size, features] padded with zero rows, m_block: 1 on a real row, f_block: f32[1]
    local_mean = 2 * x_block.T @ ((x_block @ w - y_block) * m_block) / m_block.sum()
    return jax.lax.pmean(local_mean * f_block[0], "data")  # f32[features], on every device


def _uneven_case(counts, x, y, w, devices):
    """``x, y`` dealt to ``len(counts)`` devices, ``counts[i]`` rows to device i (blocks padded
    with zero rows), and a function of the factors that runs ``_weighted_pmean`` on them."""
    q, size, f = len(counts), int(max(counts)), x.shape[1]
    mesh = Mesh(np.asarray(devices[:q]), ("data",))
    x_pad = np.zeros((q, size, f), np.float32)
    y_pad, m_pad = np.zeros((q, size), np.float32), np.zeros((q, size), np.float32)
    for i, (start, count) in enumerate(zip(np.cumsum(counts) - counts, counts)):
        x_pad[i, :count], y_pad[i, :count] = x[start:start + count], y[start:start + count]
        m_pad[i, :count] = 1
    rows, replicated, sliced = placements(mesh)
    placed = (jax.device_put(x_pad.reshape(-1, f), rows), jax.device_put(y_pad.reshape(-1), sliced),
              jax.device_put(m_pad.reshape(-1), sliced))
    specs = (P("data", None), P("data"), P("data"), P("data"), P())
    kernel = jax.jit(jax.shard_map(_weighted_pmean, mesh=mesh, in_specs=specs, out_specs=P()))

    def run(factors):
        return kernel(*placed, jax.device_put(np.asarray(factors, np.float32), sliced),
                      jax.device_put(w, replicated))

    return run


def _own_cases(p: int) -> list[tuple[np.ndarray, tuple]]:
    """Counts (each ≥ 1, not all equal where there are two devices or more) and data the page
    never showed, on meshes of all p devices, 3 and 2 (those there are)."""
    cases = []
    for q in sorted({q for q in (p, 3, 2) if q <= p}, reverse=True):
        rng = np.random.default_rng(20 + q)
        counts = rng.integers(1, 7, q)
        counts[0], counts[-1] = 1, counts[-1] + 5 if q > 1 else counts[-1]  # a 1 and a large one
        n = int(counts.sum())
        data = tuple(rng.standard_normal(s).astype(np.float32) for s in ((n, 5), (n,), (5,)))
        cases.append((counts, data))
    return cases


# the slips, each a function of the counts, the page's p and the page's total row count, with
# what the check says to it
_FACTOR_SLIPS = {
    "the result is p× too small: pmean divides by p after adding the p weighted means, so the "
    "factors must make up for that division too": lambda c, p, n: c / c.sum(),
    "the result is (p − 1)/p of the mean: the factors make up for a division by p − 1, but "
    "pmean divides by p, the number of devices (len(counts))":
        lambda c, p, n: (len(c) - 1) * c / c.sum(),
    "the result is p× too large: the factors make up for pmean's division by p twice; it "
    "divides once": lambda c, p, n: len(c) ** 2 * c / c.sum(),
    "every factor is 1: that is the page's local mean + pmean, off with unequal shards; a "
    "device's factor must depend on its row count": lambda c, p, n: np.ones(len(c)),
    "the factors are inverted: a device with more rows must count more in the mean, not less":
        lambda c, p, n: c.sum() / (len(c) * c),
    "the factors are the row counts themselves, not normalised: they scale the result by Σc / p":
        lambda c, p, n: c.astype(np.float64),
    "the factors use the page's N_DEVICES for p: take p from the counts given (len(counts))":
        lambda c, p, n: p * c / c.sum(),
    "the factors are in reverse order: factor i is for device i, which holds counts[i] rows":
        lambda c, p, n: len(c) * c[::-1] / c.sum(),
    "the factors divide by a fixed total, the page's row count (n_rows?), not by the rows in "
    "the counts given: take the total from counts": lambda c, p, n: len(c) * c / n,
}


def _factors(exercise: str, fn, counts: np.ndarray, page_counts: np.ndarray) -> np.ndarray:
    """The student's ``fn(counts)`` as a vector of ``len(counts)`` floats, or a failure that says
    what was wrong with what came back (the page's factors, whatever the counts, named)."""
    q, call = len(counts), f"pmean_weights({counts.tolist()})"
    # forbidden: the check modules' own functions, _exact_factors among them (check_answer_name)
    got = call_without(exercise, fn, (counts.copy(),), forbidden=(),
                       refusal="pmean_weights calls {}, the check's own answer: work out the "
                               "factors from what pmean computes", call=call)
    if got is None:
        fail(exercise, f"{call} returned None: return the {q} factors, one per device")
    try:
        values = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError) as error:
        fail(exercise, f"{call} must return {q} numbers (a list or an array), got "
                       f"{type(got).__name__} ({error_line(error)})")
    if values.shape == page_counts.shape and q != len(page_counts) and np.allclose(
            values, _exact_factors(page_counts), rtol=1e-5):
        fail(exercise, f"{call} gives the factors of the page's counts: use the argument counts")
    if values.ndim == 0 or values.size != q:
        what = "one number" if values.ndim == 0 else f"{values.size} numbers"
        fail(exercise, f"{call} returned {what}, the wrong length: one factor per device, "
                       f"{q} for {q} counts, in the order of the counts")
    values = values.ravel()
    if not np.isfinite(values).all():
        fail(exercise, f"{call} holds NaN or inf: every count is at least 1, so every factor "
                       "is a finite number")
    return values


def _listed(values: np.ndarray) -> str:
    shown = ", ".join(f"{v:g}" for v in values[:6])
    return f"[{shown}{', …' if values.size > 6 else ''}]"


def check_pmean_weights(fn, mesh, counts, x_host, y_host, w_host) -> None:
    """Exercise 02: ``fn(counts) -> p factors`` such that every device's local mean gradient
    times its factor, averaged by ``pmean``, is the mean gradient over all rows (p·cᵢ/Σc). The
    factors are applied in a ``shard_map`` kernel (local mean × factor, then ``pmean``) to the
    page's uneven rows on ``mesh`` and to counts and data of the check's own on meshes of 2, 3
    and all the devices (those there are); the value is compared with the reference gradient
    and the placement (replicated on every device). Named slips: cᵢ/Σc, (p − 1)·cᵢ/Σc, p²·cᵢ/Σc,
    all ones, Σc/(p·cᵢ), cᵢ unnormalised, the page's p, the page's total row count, reversed,
    factors rounded to whole numbers, the wrong length; the check's own reference is refused."""
    exercise = "pmean weights"
    function_given(exercise, "pmean_weights", fn)
    page_counts = np.asarray(counts).astype(np.int64)
    p = len(page_counts)
    same_device_count(exercise, math.prod(mesh.devices.shape), "mesh")
    devices = list(mesh.devices.flat)
    cases = [(page_counts, tuple(np.asarray(a, np.float32) for a in (x_host, y_host, w_host)))]
    cases += _own_cases(p)
    answers = [_factors(exercise, fn, c, page_counts) for c, _ in cases]
    for k, ((c, (x, y, w)), got) in enumerate(zip(cases, answers)):
        n = int(c.sum())
        g = _uneven_case(c, x[:n], y[:n], w, devices)(got)
        shapes = {tuple(s.data.shape) for s in g.addressable_shards}
        if len(g.addressable_shards) != len(c) or shapes != {w.shape}:
            raise RuntimeError(f"the check's kernel left {shapes} on "
                               f"{len(g.addressable_shards)} devices, not the gradient on each")
        reference = reference_gradient(x[:n], y[:n], w)
        if np.allclose(np.asarray(g), reference, atol=ATOL, rtol=1e-4):
            continue
        where = "the page's counts" if k == 0 else "counts of the check's own"
        call = f"pmean_weights({c.tolist()}) ({where}, p = {len(c)})"
        for why, slip in _FACTOR_SLIPS.items():
            if all(np.allclose(a, slip(cc, p, page_counts.sum()), rtol=1e-5)
                   for (cc, _), a in zip(cases, answers)):
                fail(exercise, f"{call}: {why}")
        if all(np.array_equal(a, np.round(a)) for a in answers):
            fail(exercise, f"{call}: every factor is a whole number ({_listed(got)}): floor "
                           "division (//) or int() rounds them, and the factors need not be "
                           "whole; divide with /")
        if k and got.shape == page_counts.shape and np.allclose(
                got, _exact_factors(page_counts), rtol=1e-5):
            fail(exercise, f"{call} gives the factors of the page's counts: use the argument "
                           "counts")
        error = np.linalg.norm(np.asarray(g) - reference) / np.linalg.norm(reference)
        fail(exercise, f"{call}: local mean × factor, then pmean, is off from the mean gradient "
                       f"over all rows by {error:.1%} (relative, 2-norm); write out what pmean "
                       "computes from the p weighted means and compare it with the sum over "
                       "every row divided by Σc")
    sizes = [str(len(c)) for c, _ in cases[1:]]
    on = f"{', '.join(sizes[:-1])} and {sizes[-1]}" if len(sizes) > 1 else sizes[0]
    passed(exercise, f"local mean × factor, then pmean, is the mean over all rows for the page's "
                     f"counts {page_counts.tolist()} and for counts of the check's own on {on} "
                     f"device{'s' if sizes != ['1'] else ''}")


# ---------------------------------------------------------------------------------------------
# step 03: my_reduce_scatter(x, y, w) for any feature count


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


def _scatter_values(exercise: str, call: str, got: np.ndarray, expected: np.ndarray,
                    n_rows: int, fixed: list) -> None:
    """The padded gradient ``got`` against ``expected`` (the F real values): the real values
    first, zeros after; names the padding in front, a non-zero padding, a factor."""
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
    right = close(got[:f], expected, atol=ATOL, rtol=1e-4)
    ratio = 1.0 if right else common_ratio(got[:f].astype(np.float64), expected)
    hint = ""
    if ratio is not None:
        fixed.append(n_rows / ratio)  # the row count it divides by
        if not right and len(fixed) > 1 and math.isclose(fixed[0], fixed[-1], rel_tol=1e-3):
            fail(exercise, f"{call} divides by a fixed row count ({fixed[0]:g}, the notebook's "
                           "n_rows?): take the global row count from the block, "
                           "x_block.shape[0] × p")
        if math.isclose(ratio, jax.device_count(), rel_tol=1e-3) and jax.device_count() > 1:
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
    fail(exercise, f"{call} has shape {shape}, expected ({length},): the gradient padded to "
                   f"p·⌈F/p⌉ = {length} values for F = {f} features on p = {p} devices")


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
    multiple of p, an all-reduce then a slice, an all-gather then a local sum, no padding
    (JAX's divisibility error, with a hint); the package's kernels are refused."""
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
    fixed: list[float] = []
    checked = []
    for k, (n_rows, f) in enumerate(_scatter_cases(p)):
        rng = np.random.default_rng(300 + k)
        hosts = [rng.standard_normal(s).astype(np.float32) for s in ((n_rows, f), (n_rows,), (f,))]
        args = tuple(jax.device_put(h, s) for h, s in zip(hosts, (rows, sliced, replicated)))
        call = f"{name}(x, y, w) with x of shape {(n_rows, f)}"
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
        _scatter_values(exercise, call, np.asarray(g), reference_gradient(*hosts), n_rows, fixed)
        check_placement(exercise, call, g, (math.ceil(f / p),), p)
        if k == 0:
            _scatter_program(exercise, name, fn, args)
        checked.append(f)
    passed(exercise, f"F = {', '.join(map(str, checked))} features on p = {p}: each device holds "
                     "its slice of the zero-padded gradient, communicated by one reduce-scatter")
