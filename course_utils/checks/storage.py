"""Self-checks of steps 04 and 05: predicted shard shapes, and a rule for stored bytes."""

from __future__ import annotations

import math
import numbers

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.helpers import (
    check_keys,
    fail,
    given,
    number,
    off_by,
    passed,
    same_device_count,
    unit_causes,
)
from course_utils.collectives.kernels import (
    all_gather_shards,
    all_reduce_gradient,
    reduce_scatter_gradient,
)
from course_utils.display import error_line
from course_utils.observe.placement import values_per_device
from course_utils.problems.regression import toy_regression


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
    same_device_count(exercise, len(array.sharding.device_set), "mesh")
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
    blocks = "1 block" if len(actual) == 1 else f"{len(actual)} blocks"
    passed(exercise, f"{blocks} of {actual[0][1]}")


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


def _uses_other_p(predicted: dict, measured: dict, p_other: int) -> bool:
    """Whether ``predicted`` is the rule's answer for ``p_other`` devices instead of the p the
    bytes were measured on: the reduce-scatter slice is N/p_other, the rest right."""
    n = measured["all_reduce"]
    values = [number(predicted.get(k)) for k in ("all_reduce", "reduce_scatter", "all_gather")]
    return None not in values and all(math.isclose(a, b) for a, b in zip(
        values, (n, n / p_other, n)))


def _measured_bytes(arrays: dict) -> dict:
    return {key: values_per_device(a) * a.dtype.itemsize for key, a in arrays.items()}


def check_stored_bytes_rule(stored_bytes, devices) -> None:
    """Exercise 05: the student's rule ``stored_bytes(gradient_bytes, p)`` (a dict of bytes one
    device stores after all-reduce, reduce-scatter and the all-gather of its result) against
    bytes measured on meshes of 2 and of all ``devices``, for gradient sizes the notebook never
    showed, so a dict of numbers copied from a run cannot pass."""
    exercise = "bytes one device stores"
    same_device_count(exercise, len(devices), "the device list")
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
        measured = _measured_bytes(arrays)
        if p != len(devices) and _uses_other_p(predicted, measured, len(devices)):
            fail(exercise, f"stored_bytes({n_bytes}, {p}) is right for p = {len(devices)}, not "
                 f"for p = {p}: use the argument p, not N_DEVICES")
        _stored_mismatch(exercise, predicted, measured, f"a {n_bytes}-byte gradient on p = {p}: ")
        checked.append(f"{n_bytes} B on p = {p}")
    passed(exercise, f"measured on device 0 for {' and '.join(checked)}")
