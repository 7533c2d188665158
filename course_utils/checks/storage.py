"""Self-checks of steps 04 and 05: predicted shard shapes, and a rule for the bytes a device
holds while a collective returns."""

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
from course_utils.collectives.kernels import block_collective
from course_utils.display import error_line
from course_utils.observe.placement import values_per_device


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


def _held_mismatch(exercise: str, predicted: dict, n: int, p: int, where: str = "") -> None:
    """Fail on the first entry of ``predicted`` that differs from the bytes device 0 holds when
    each call returns (its input block and its output, ``_held``), naming every likely cause that
    fits the number."""
    for key, (given_in, given_out) in _held(n, p).items():
        value = given_in + given_out
        got = number(predicted[key])
        if got is None:
            fail(exercise, f"{where}{key}: give a number of bytes, got {predicted[key]!r}")
        if math.isclose(got, value, abs_tol=1e-9):
            continue
        name = key.replace("_", "-")
        causes = []  # every likely cause that fits the number
        if math.isclose(got, given_out):
            causes.append("the input block is still on the device when the call returns "
                          "(nothing is donated): count it too")
        elif math.isclose(got, given_in):
            causes.append("count the output too, not only the input block")
        if key == "reduce_scatter" and math.isclose(got, given_in + n):
            causes.append("after reduce-scatter each device keeps one slice of the sum")
        if key != "reduce_scatter" and math.isclose(got, given_in + n / p):
            causes.append(f"after {name} every device holds the whole gradient")
        if key == "all_gather" and math.isclose(got, 2 * n):
            causes.append("the all-gather starts from the reduce-scattered slice, not the "
                          "whole gradient")
        sent = (2 if key == "all_reduce" else 1) * (p - 1) * n / p
        if any(math.isclose(got, x) for x in (sent, given_in + sent)):
            causes.append("that is what a ring sends per rank, not what a device keeps")
        if p > 1 and math.isclose(got, sum(_held(n, p - 1)[key])):
            causes.append("that is the rule with p − 1 in place of p: a slice is 1/p of the "
                          "gradient (a ring sends p − 1 of them, but a device keeps one)")
        causes += unit_causes(got, value)
        if math.isclose(got, value * p):
            causes.append(f"count what one device holds, not all {p} together")
        hint = "; ".join([off_by(got, value), *([" — or ".join(causes)] if causes else [])])
        fail(exercise, f"{where}{key}: {hint}")


def _held(n: int, p: int) -> dict:
    """The (input, output) bytes device 0 holds for each collective of an ``n``-byte gradient on
    ``p`` devices, as the check measured them: the all-reduce and the reduce-scatter start from a
    whole partial gradient per device, the all-gather from the reduce-scattered slice."""
    return {"all_reduce": (n, n), "reduce_scatter": (n, n / p), "all_gather": (n / p, n)}


def _uses_other_p(predicted: dict, n: int, p_other: int) -> bool:
    """Whether ``predicted`` is the rule's answer for ``p_other`` devices instead of the p the
    bytes were measured on."""
    values = [number(predicted.get(k)) for k in ("all_reduce", "reduce_scatter", "all_gather")]
    return None not in values and all(math.isclose(a, b) for a, b in zip(
        values, (sum(v) for v in _held(n, p_other).values())))


def _fixed_gradient_bytes(predicted: dict, n: int, ps: set) -> float | None:
    """The gradient size ``predicted`` is the rule's answer for, on one of the device counts
    ``ps``, when that is not the ``n`` bytes asked about (a global used in place of n_bytes)."""
    whole = number(predicted.get("all_reduce"))
    if whole is None or math.isclose(whole, 2 * n) or whole <= 0:
        return None
    return whole / 2 if any(_uses_other_p(predicted, whole / 2, q) for q in ps) else None


def _unit_slip(predicted: dict, n: int, p: int) -> str:
    """The unit slip that turns every entry of the right rule into ``predicted`` (the same
    factor in each: values for bytes, bits, KiB or MiB, the bytes of all p devices), or ``""``."""
    held = {key: sum(parts) for key, parts in _held(n, p).items()}
    got = {key: number(predicted.get(key)) for key in held}
    if None in got.values() or all(math.isclose(got[k], held[k]) for k in held):
        return ""
    factor = got["all_reduce"] / held["all_reduce"]
    if not all(math.isclose(got[k], held[k] * factor, rel_tol=1e-9) for k in held):
        return ""
    causes = unit_causes(held["all_reduce"] * factor, held["all_reduce"])
    if p > 1 and math.isclose(factor, p):
        causes.append(f"count what one device holds, not all {p} devices together")
    if not causes:
        return ""
    how = off_by(got["all_reduce"], held["all_reduce"])
    return f"every entry is off by the same factor ({how}): {' — or '.join(causes)}"


def _bytes_on_device_0(array) -> int:
    return values_per_device(array) * array.dtype.itemsize


def check_stored_bytes_rule(stored_bytes, devices) -> None:
    """Exercise 05: the student's rule ``stored_bytes(gradient_bytes, p)``, a dict of the bytes
    device 0 holds when each collective returns, its input block and its output both (nothing
    donated): all-reduce and reduce-scatter of the per-device partial gradients, and the
    all-gather of the reduce-scattered result. Judged against bytes measured on meshes of 2 and
    of all ``devices``, for gradient sizes the notebook never showed."""
    exercise = "bytes one device holds"
    same_device_count(exercise, len(devices), "the device list")
    given(exercise, "stored_bytes", stored_bytes, "define a function stored_bytes(n_bytes, p)")
    if not callable(stored_bytes):
        fail(exercise, f"stored_bytes must be a function of (n_bytes, p), got "
                       f"{type(stored_bytes).__name__}: the check calls it for other sizes")
    keys = ("all_reduce", "reduce_scatter", "all_gather")
    checked = []
    for p in sorted({min(2, len(devices)), len(devices)}, reverse=True):  # p = 2 hides slips
        mesh = Mesh(np.array(list(devices)[:p]), ("data",))
        n_values = 3 * p  # a size the notebook's gradient (2p values) does not have
        rng = np.random.default_rng(n_values)
        partials = jax.device_put(rng.standard_normal((p, n_values), dtype=np.float32),
                                  NamedSharding(mesh, P("data", None)))
        runs = {kind: block_collective(mesh, kind) for kind in keys}
        scattered = runs["reduce_scatter"](partials)
        inputs = {"all_reduce": partials, "reduce_scatter": partials, "all_gather": scattered}
        n_bytes = 4 * n_values
        measured = {k: _bytes_on_device_0(a) + _bytes_on_device_0(runs[k](a))
                    for k, a in inputs.items()}
        if measured != {k: sum(v) for k, v in _held(n_bytes, p).items()}:
            raise RuntimeError(f"the kernels held {measured} bytes on device 0, not the "
                               "input and output blocks this check expects")
        try:
            predicted = stored_bytes(n_bytes, p)
        except Exception as err:  # the student's error, shown as one line
            fail(exercise, f"stored_bytes({n_bytes}, {p}) raised {error_line(err)}")
        check_keys(exercise, f"stored_bytes({n_bytes}, {p})", predicted, keys)
        if unit := _unit_slip(predicted, n_bytes, p):  # before a global: the likelier slip
            fail(exercise, f"stored_bytes({n_bytes}, {p}): {unit}")
        if (other := _fixed_gradient_bytes(predicted, n_bytes, {p, len(devices)})) is not None:
            fail(exercise, f"stored_bytes({n_bytes}, {p}) is the rule for a {other:g}-byte "
                 f"gradient, not the {n_bytes} bytes given: use the arguments n_bytes and p, not "
                 "this notebook's gradient_bytes or N_DEVICES")
        if p != len(devices) and _uses_other_p(predicted, n_bytes, len(devices)):
            fail(exercise, f"stored_bytes({n_bytes}, {p}) is right for p = {len(devices)}, not "
                 f"for p = {p}: use the argument p, not N_DEVICES")
        _held_mismatch(exercise, predicted, n_bytes, p, f"a {n_bytes}-byte gradient on p = {p}: ")
        checked.append(f"{n_bytes} B on p = {p}")
    passed(exercise, f"measured on device 0 for {' and '.join(checked)}")
