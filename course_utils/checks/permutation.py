"""Self-check of step 07: a joint permutation of the rows leaves the gradient unchanged."""

from __future__ import annotations

import numpy as np

from course_utils.checks.helpers import (
    call_without,
    check_placement,
    check_values,
    fail,
    function_given,
    given,
    passed,
    same_device_count,
)
from course_utils.collectives.kernels import (
    all_gather_shards,
    all_reduce_gradient,
    reduce_scatter_gradient,
)
from course_utils.constants import ATOL
from course_utils.problems.regression import reference_gradient

_NOT_GIVEN = object()


def _defined(exercise: str, name: str, value, shape: tuple, what: str) -> None:
    """A value the check looked up by name: defined (``None`` if not) and of ``shape``."""
    given(exercise, name, value, what)
    if tuple(np.shape(value)) != shape:
        fail(exercise, f"{name} has shape {tuple(np.shape(value))}, expected {shape}")


def _permutation_mistakes(x, y, w2_host, order) -> dict:
    """The likely wrong gradients of exercise 07 (each with what to say), from the original
    data and the permutation ``order``: only one of x and y reordered, the columns reordered,
    the weights not moved."""
    same = "reorder the rows of x and the labels y with the same permutation"
    return {
        # x alone or y alone reordered pair the same rows with the same wrong labels
        f"only the labels y, or only the rows of x, were reordered, so each row got another "
        f"row's label; {same}": reference_gradient(x, y[order], w2_host),
        "the permutation went to the columns (features) of x: reorder its rows, x[order]":
            reference_gradient(x[:, ::-1].copy(), y[order], w2_host),
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
    g_scattered=_NOT_GIVEN,
    reorder=_NOT_GIVEN,
) -> None:
    """Exercise 07: both communication paths give the original data's gradient on every device.

    ``x`` and ``y`` are the data in their original order. ``x2``, ``y2`` and ``w2`` (your placed
    inputs; ``None`` for a name you did not define) are checked when given: ``x2`` and ``y2`` hold
    the same rows reordered together and split by rows, ``w2`` is ``w2_host`` replicated. When all
    three are given, each result must also be what its program computes from them, bit for bit:
    a gradient computed elsewhere and placed, or one result reused for the other, does not pass.
    ``g_scattered`` (the second path's reduce-scatter), when given, must be device k's slice k
    of the gradient, and ``g_gathered`` its all-gather. ``reorder(n_rows, p)``, when given, is
    the student's permutation of the row indices under which no device keeps any row it held
    (tried for several p), and ``x2`` must be ``x`` reordered by it.
    """
    exercise = "joint row permutation"
    same_device_count(exercise, n_devices)
    x, y, w2_host = (np.asarray(a) for a in (x, y, w2_host))
    target = reference_gradient(x, y, w2_host).astype(np.float32)
    mine = None if reorder is _NOT_GIVEN else _check_reorder(exercise, reorder, len(x),
                                                              n_devices)
    mistakes = _permutation_mistakes(x, y, w2_host, np.arange(len(x))[::-1] if mine is None
                                     else mine)
    block = x.shape[0] // n_devices
    if x2 is not _NOT_GIVEN:
        _defined(exercise, "x2", x2, x.shape, "place the reordered rows of xh as x2")
        unmoved = mine is not None and np.array_equal(mine, np.arange(len(x)))  # p = 1
        if np.array_equal(np.asarray(x2), x) and not unmoved:
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
                     "xh[order] with the order your reorder returns, and keep each row as it is")
            fail(exercise, "x2 does not hold each row of x exactly once; reorder, do not change")
        if mine is not None and order != list(mine):
            fail(exercise, f"x2 is not xh reordered by reorder({len(x)}, {n_devices}): place "
                 "xh[order] with the order your function returns")
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
    if g_scattered is not _NOT_GIVEN:
        given(exercise, "g_scattered", g_scattered, "assign the reduce-scatter of x2, y2, w2 "
              "to g_scattered, then all-gather it into g_gathered")
        check_values(exercise, "g_scattered", g_scattered, target,
                     hint="g_scattered is reduce_scatter(x2, y2, w2)")
        check_placement(exercise, "g_scattered", g_scattered,
                        (target.shape[0] // n_devices,), n_devices)
    if _same_buffers(g_all, g_gathered):
        fail(exercise, "g_gathered is g_all itself: compute it on the second path, the "
             "reduce-scatter of x2, y2, w2 followed by the all-gather")
    if all(v is not _NOT_GIVEN for v in (x2, y2, w2)):
        _computed_from(exercise, g_all, g_gathered, x2, y2, w2)
    if g_scattered is not _NOT_GIVEN and all(v is not _NOT_GIVEN for v in (x2, y2, w2)):
        mesh = x2.sharding.mesh
        if not np.array_equal(np.asarray(g_scattered), np.asarray(
                reduce_scatter_gradient(mesh)(x2, y2, w2))):
            fail(exercise, "g_scattered has the right numbers, but not the bits that "
                 "reduce_scatter(x2, y2, w2) computes: compute it with the kernel")
        if not np.array_equal(np.asarray(g_gathered),
                              np.asarray(all_gather_shards(mesh)(g_scattered))):
            fail(exercise, "g_gathered is not the all-gather of g_scattered: compute "
                 "g_gathered = all_gather(g_scattered)")
    passed(
        exercise, f"both paths equal the gradient of the original data on all {n_devices} devices"
    )


def _check_reorder(exercise: str, reorder, n_rows: int, n_devices: int) -> np.ndarray:
    """The student's ``reorder(n, p)``: for this run and for p = 2 … 5 with blocks of 2 to 5
    rows (so a block size read off the notebook fails), a permutation of ``range(n)`` under
    which each device's new block holds none of the rows it held; returns its order for this
    run's rows and devices."""
    function_given(exercise, "reorder", reorder)
    mine = None
    sizes = ((n_rows, n_devices), (6, 2), (9, 3), (8, 4), (15, 5), (20, 4), (2 * n_rows, n_devices))
    for n, p in dict.fromkeys(sizes):
        if p < 2:
            continue
        call = f"reorder({n}, {p})"
        order = call_without(exercise, reorder, (n, p), forbidden=(), refusal="{}", call=call)
        got = np.asarray(order) if order is not None else None
        if got is None or got.ndim != 1 or len(got) != n or got.dtype.kind not in "iu" or sorted(
                got.tolist()) != list(range(n)):
            fail(exercise, f"{call} must return each row index 0 … {n - 1} exactly once (a "
                 "permutation, as a list or an integer array)")
        block = n // p
        kept = [k for k in range(p) if np.any(got[k * block:(k + 1) * block] // block == k)]
        if kept:
            reversal = " (reversal does that when p is odd)" if np.array_equal(
                got, np.arange(n)[::-1]) else ""
            other = "" if reversal or block == n_rows // max(n_devices, 1) else (
                f"; here a device holds n // p = {block} rows: compute the block from the "
                "arguments, not from this notebook's rows")
            fail(exercise, f"with {call}, device {kept[0]} still holds some of its own rows"
                 f"{reversal}{other}: every device's new block must come from other devices")
        if (n, p) == (n_rows, n_devices):
            mine = got
    if mine is None:  # one device: nothing to move
        mine = np.asarray(reorder(n_rows, n_devices))
    return mine


def _computed_from(exercise: str, g_all, g_gathered, x2, y2, w2) -> None:
    """Each result is, bit for bit, what the package's kernels compute from ``x2, y2, w2``: the
    same program on the same inputs gives the same bits, while a gradient computed on the host
    (or on the data in its original order) and placed differs in the last bits."""

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
