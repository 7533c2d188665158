"""Self-checks for the exercises: specific feedback computed from the exercise's own inputs.

Every check either prints one ``PASSED: <exercise>`` line or raises ``ExerciseFailed`` whose message
says what is wrong: which entries and by how much, the right values in the wrong placement, or the
wrong shape or dtype. Expected values are always computed from the inputs passed in, never stored.
"""

from __future__ import annotations

import math
import numbers

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
from course_utils.models.cost import communication_budget
from course_utils.observe.ir import collectives_in
from course_utils.observe.placement import values_per_device
from course_utils.problems.regression import reference_gradient, toy_regression

__all__ = ["ExerciseFailed"]


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
    check_values(exercise, "my_shares", shares, expected, hint=hint)
    np.testing.assert_allclose(expected.sum(axis=0), reference_gradient(x, y, w), atol=ATOL)
    passed(exercise, f"{n_devices} shares that add up to the reference gradient")


def _program(exercise: str, fn, args: tuple) -> list[str]:
    """The collectives in the compiled program of ``fn`` (jitted here if it is not yet)."""
    jitted = fn if hasattr(fn, "lower") else jax.jit(fn)  # a bare shard_map is fine too
    try:
        return [op.op for op in collectives_in(jitted, *args).hlo]
    except Exception as error:  # noqa: BLE001 - any failure to compile is the student's to fix
        fail(
            exercise,
            f"your function does not compile as one JAX program ({error_line(error)}); "
            "build it from jax.shard_map and wrap it in jax.jit",
        )


def check_reduce_scatter(fn, x, y, w, x_host, y_host, w_host, n_devices: int) -> None:
    """Exercise 03: your jitted reduce-scatter kernel: called on the placed ``x, y, w`` it returns
    the gradient split by features, and its compiled program communicates with a reduce-scatter.
    """
    exercise = "reduce-scatter kernel"
    name = "my_reduce_scatter"
    given(exercise, name, fn, f"assign your jitted function to {name}")
    if isinstance(fn, Kernel):
        fail(exercise, f"{name} is the package's own kernel; write the shard_map yourself")
    if isinstance(fn, (np.ndarray, jax.Array)) or not callable(fn):
        fail(
            exercise,
            f"{name} is an object of type {type(fn).__name__}, not a function; pass the jitted "
            "function itself, "
            "the check calls it",
        )
    try:
        g = fn(x, y, w)
    except Exception as error:  # noqa: BLE001 - the student's function failed: say how, in a line
        text = str(error)
        hint = tiled_hint(error, "p")
        if "out_specs" in text and "replicat" in text:
            hint = ("; out_specs=P() declares one value on every device, but after psum_scatter "
                    "each device holds a different slice: give out_specs the spec of a vector "
                    "split over 'data' (switching check_vma off would hide the mistake)")
        fail(exercise, f"calling {name}(x, y, w) raised {error_line(error)}{hint}")
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
    check_values(exercise, f"{name}(x, y, w)", g, expected)
    check_placement(exercise, f"{name}(x, y, w)", g, (expected.size // n_devices,), n_devices)
    ops = _program(exercise, fn, (x, y, w))
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


def check_stored_prediction(predicted: dict, arrays: dict) -> None:
    """Exercise 05 (earlier form): predicted bytes one device stores after each collective,
    against the bytes measured on the devices (device 0's shard of each array in ``arrays``)."""
    exercise = "bytes one device stores"
    given(exercise, "predicted_stored", predicted, "store a dict of bytes per collective")
    check_keys(exercise, "predicted_stored", predicted, arrays)
    measured = _measured_bytes(arrays)
    _stored_mismatch(exercise, predicted, measured)
    found = ", ".join(f"{key} {value} B" for key, value in measured.items())
    passed(exercise, f"measured on device 0: {found}")


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


def check_two_state_update(
    w_next,
    m_next,
    s_next,
    w,
    m,
    s,
    g,
    n_devices: int,
    *,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
) -> None:
    """Exercise 06: a sliced update with two optimizer states (Adam-like, no bias correction)."""
    exercise = "sliced update with two states"
    w, m, s, g = (np.asarray(a, dtype=np.float32) for a in (w, m, s, g))
    expected_m = beta1 * m + (1 - beta1) * g
    expected_s = beta2 * s + (1 - beta2) * g * g
    expected_w = w - lr * expected_m / (np.sqrt(expected_s) + eps)
    root = np.sqrt(expected_s)
    misplaced = {  # where ε can wrongly go, and what to say
        "ε goes outside the square root: sqrt(s) + eps": (
            w - lr * expected_m / np.sqrt(expected_s + eps)
        ),
        "ε is missing": w - lr * expected_m / root,
        "ε belongs in the denominator, added to sqrt(s)": w - lr * expected_m / root + eps,
    }
    got_w = np.asarray(w_next, dtype=np.float32) if w_next is not None else None
    if got_w is not None and got_w.shape == expected_w.shape:
        tolerance = 1e-5 * float(np.max(np.abs(expected_w)))
        for hint, wrong in misplaced.items():
            if np.allclose(got_w, wrong, atol=tolerance, rtol=1e-5) and not np.allclose(
                got_w, expected_w, atol=tolerance, rtol=1e-5
            ):
                fail(exercise, f"w_next: m_next and s_next may be right, but {hint}")
    for name, got, expected in (
        ("m_next", m_next, expected_m),
        ("s_next", s_next, expected_s),
        ("w_next", w_next, expected_w),
    ):
        # float32 rounding, relative to each quantity's own scale (s is ~1e-4, w ~1e-1)
        check_values(
            exercise, name, got, expected, atol=1e-5 * float(np.max(np.abs(expected))), rtol=1e-5
        )
    slice_shape = (w.size // n_devices,)
    check_placement(exercise, "m_next", m_next, slice_shape, n_devices)
    check_placement(exercise, "s_next", s_next, slice_shape, n_devices)
    check_placement(exercise, "w_next", w_next, w.shape, n_devices)
    passed(exercise, f"both states kept in slices of {slice_shape[0]}, weights gathered")


_NOT_GIVEN = object()


def _defined(exercise: str, name: str, value, shape: tuple, what: str) -> None:
    """A value the check looked up by name: defined (``None`` if not) and of ``shape``."""
    given(exercise, name, value, what)
    if tuple(np.shape(value)) != shape:
        fail(exercise, f"{name} has shape {tuple(np.shape(value))}, expected {shape}")


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
    the same rows reordered together and split by rows, ``w2`` is ``w2_host`` replicated.
    """
    exercise = "joint row permutation"
    x, y, w2_host = (np.asarray(a) for a in (x, y, w2_host))
    target = reference_gradient(x, y, w2_host).astype(np.float32)
    for name, g in (("g_all", g_all), ("g_gathered", g_gathered)):
        check_values(
            exercise,
            name,
            g,
            target,
            hint="reorder the rows of x and the labels y with the same permutation, "
            "and use w2 = w + 0.17",
        )
        check_placement(exercise, name, g, target.shape, n_devices)
        for shard in g.addressable_shards:
            check_values(exercise, f"{name} on device {shard.device.id}", shard.data, target)
    block = x.shape[0] // n_devices
    if x2 is not _NOT_GIVEN:
        _defined(exercise, "x2", x2, x.shape, "place the reordered rows of xh as x2")
        if np.array_equal(np.asarray(x2), x):
            fail(exercise, "x2 holds the rows of x in their original order; reorder them")
        rows = {row.tobytes(): i for i, row in enumerate(x)}
        order = [rows.get(row.tobytes()) for row in np.asarray(x2, dtype=x.dtype)]
        if None in order or sorted(order) != list(range(len(x))):
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
        check_values(exercise, "w2", w2, w2_host, hint="w2 is w + 0.17 (w2h), placed replicated")
        check_placement(exercise, "w2", w2, w2_host.shape, n_devices)
    passed(
        exercise, f"both paths equal the gradient of the original data on all {n_devices} devices"
    )


def check_budget_row(
    row: dict, nbytes: int, ranks: int, *, table_nbytes: int | None = None
) -> None:
    """Exercise 08: one row of the communication budget, predicted by hand. ``table_nbytes``: the
    N of the notebook's table, named when the row was computed for it instead of ``nbytes``."""
    exercise = f"budget for p = {ranks}"
    (expected,) = communication_budget(nbytes, (ranks,))
    given(exercise, "row", row, "store your prediction, a dict, in row")
    check_keys(exercise, "row", row, expected)
    for key, value in expected.items():
        got = scalar(row[key])  # a 0-d NumPy or JAX integer counts as an int
        if isinstance(got, (bool, np.bool_)) or not isinstance(got, (numbers.Integral, np.integer)):
            fail(exercise, f"{key}: give a whole number (an int), got {got!r}")
        if got != value:
            sent = key != "shard_storage_bytes" and key != "ranks"
            slips = []
            other_n = int(got) * nbytes // value if value else 0
            if (
                key != "ranks"
                and other_n == table_nbytes != nbytes
                and other_n * value == int(got) * nbytes
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
            elif key != "ranks" and (units := unit_causes(got, value)):
                slips += units
            elif sent and ranks > 1 and got == nbytes // ranks:
                slips.append("that is N/p, the one slice a device keeps; count what it sends")
            elif key == "shard_storage_bytes" and ranks > 1 and got == nbytes:
                slips.append("that is N, the whole gradient; after reduce-scatter a device "
                             "keeps one slice of it")
            elif key == "shard_storage_bytes" and ranks > 1 and got == nbytes // (ranks - 1):
                slips.append("a device keeps 1 of p slices: divide by p, not p-1")
            hint = off_by(int(got), value)
            if slips:
                hint += "; " + "; or ".join(slips)
            fail(exercise, f"{key}: {hint} (p = {ranks}, N = {nbytes} bytes)")
    passed(exercise, f"all-reduce {expected['all_reduce_bytes']} bytes per rank")
