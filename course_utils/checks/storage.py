"""Self-checks of steps 04 and 05: predicted shard shapes, and the largest gradient whose input
and output fit in a device's memory while a collective returns."""

from __future__ import annotations

import math
import numbers

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.helpers import (
    call_without,
    check_keys,
    fail,
    function_given,
    number,
    off_by,
    passed,
    same_device_count,
)
from course_utils.collectives.kernels import block_collective
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


KINDS = ("all_reduce", "reduce_scatter", "all_gather")


def _floor(nbytes: float, p: int) -> int:
    """``nbytes`` rounded down to a whole number of float32 values on each of ``p`` devices."""
    step = 4 * p
    return int(math.floor(nbytes / step + 1e-9)) * step


def largest_gradient_bytes(memory_bytes: float, p: int) -> dict:
    """The largest gradient (bytes, a multiple of 4·p) for which device 0 holds each call's
    input and output within ``memory_bytes``: the all-reduce holds N + N, the reduce-scatter
    N + N/p, the all-gather (from the reduce-scattered slice) N/p + N.

    Examples:
        >>> largest_gradient_bytes(2**20, 4)
        {'all_reduce': 524288, 'reduce_scatter': 838848, 'all_gather': 838848}
    """
    sliced = _floor(memory_bytes * p / (p + 1), p)
    return {"all_reduce": _floor(memory_bytes / 2, p), "reduce_scatter": sliced,
            "all_gather": sliced}


def _slips(m: float, p: int) -> dict:
    """What each slip the check names gives at memory ``m`` on ``p`` devices."""
    right = largest_gradient_bytes(m, p)
    swapped = _floor(m * (p + 1) / p, p)
    ring = p / max(p - 1, 1)  # N per byte a ring's reduce-scatter sends, (p − 1)/p · N
    return {
        "the call's input is still on device 0 when it returns (nothing is donated): count "
        "the input and the output": {"all_reduce": _floor(m, p), "reduce_scatter": _floor(m * p, p),
                                     "all_gather": _floor(m, p)},
        "count the output too, not only the input": {
            "all_reduce": _floor(m, p), "reduce_scatter": _floor(m, p),
            "all_gather": _floor(m * p, p)},
        "p and p + 1 are swapped: device 0 holds N + N/p = N·(p + 1)/p, so N is at most "
        "memory · p/(p + 1)": {**right, "reduce_scatter": swapped, "all_gather": swapped},
        "count bytes (4 per float32 value), not values": {k: v / 4 for k, v in right.items()},
        "those are the sizes at which a ring sends memory_bytes per rank (2(p − 1)/p · N for "
        "the all-reduce): the task counts the bytes device 0 holds, the call's input and its "
        "output": {"all_reduce": _floor(m * ring / 2, p), "reduce_scatter": _floor(m * ring, p),
                   "all_gather": _floor(m * ring, p)},
        "memory_bytes is what device 0 has, not the memory of all p devices pooled (p × "
        "memory_bytes): the input and the output counted must fit on device 0 alone":
            largest_gradient_bytes(m * p, p) if p > 1 else dict.fromkeys(KINDS, math.nan),
    }


# one call's slip, each a function of (memory, p) giving the size it leads to (before rounding)
_KEY_SLIPS = {
    "all_reduce": {
        "device 0 holds two whole gradients when the all-reduce returns, its input and the "
        "sum, not three": lambda m, p: m / 3,
        "when the all-reduce returns device 0 holds the whole sum, N bytes, not a slice: N in "
        "and N out": lambda m, p: m * p / (p + 1),
        "the all-reduce's input is still on device 0 when it returns (nothing is donated): "
        "count it too": lambda m, p: m,
    },
    "reduce_scatter": {
        "device 0 also holds its output, one slice of N/p bytes, when the reduce-scatter "
        "returns: count the slice too": lambda m, p: m,
        "a slice is N/p bytes, one of p, not N/(p − 1)": lambda m, p: m * (p - 1) / p,
        "after the reduce-scatter device 0 keeps one slice of the sum, not all of it":
            lambda m, p: m / 2,
    },
    "all_gather": {
        "device 0 still holds its input, one slice of N/p bytes, when the all-gather returns: "
        "count the slice too": lambda m, p: m,
        "a slice is N/p bytes, one of p, not N/(p − 1)": lambda m, p: m * (p - 1) / p,
        "the all-gather starts from the reduce-scattered slice (N/p bytes), not from a whole "
        "gradient as the all-reduce does": lambda m, p: m / 2,
        "that is the size of one slice, the all-gather's input: the key asks for the gradient "
        "N it gathers": lambda m, p: m / (p + 1),
    },
}
_UNITS = {"MiB": 2**20, "KiB": 2**10, "MB": 1e6, "kB": 1e3}


def _named_key(answers: list) -> tuple[str, str] | None:
    """(call, message) for a size in the wrong unit, or for one call's slip that explains that
    key's answer at every memory and p (within the rounding to 4·p bytes), else None."""
    for unit, scale in _UNITS.items():
        if all(math.isclose(values[k] * scale, largest_gradient_bytes(m, p)[k], rel_tol=0.02)
               for m, p, _, values in answers for k in KINDS):
            return answers[0][2], f"the sizes are in {unit}: return bytes"
    for k in KINDS:
        rights = [largest_gradient_bytes(m, p)[k] for m, p, _, _ in answers]
        if all(abs(values[k] - r) < 4 * p for (_, p, _, values), r in zip(answers, rights)):
            continue  # right, up to the rounding (judged below)
        for why, slip in _KEY_SLIPS[k].items():
            if all(abs(values[k] - slip(m, p)) < 4 * p + 1e-6 for m, p, _, values in answers):
                return answers[0][2], f"[{k!r}]: {why}"
    return None


def _held_bytes(devices, p: int, nbytes: int, kind: str) -> int:
    """The bytes device 0 holds when ``kind`` returns for an ``nbytes`` gradient on the first
    ``p`` devices, its input block and its output, read from real arrays: the all-reduce and the
    reduce-scatter start from a whole partial gradient per device, the all-gather from a slice."""
    mesh = Mesh(np.array(list(devices)[:p]), ("data",))
    values = nbytes // 4 // (p if kind == "all_gather" else 1)
    rng = np.random.default_rng(nbytes)
    block = jax.device_put(rng.standard_normal((p, values), dtype=np.float32),
                           NamedSharding(mesh, P("data", None)))
    return _bytes_on_device_0(block) + _bytes_on_device_0(block_collective(mesh, kind)(block))


def _bytes_on_device_0(array) -> int:
    return values_per_device(array) * array.dtype.itemsize


def check_largest_gradient(largest_gradient, devices, *, memory_bytes: float) -> None:
    """Exercise 05: ``largest_gradient(memory_bytes, p)``, a dict of the largest gradient (bytes)
    for which device 0 holds each call's input and its output within ``memory_bytes`` when the
    call returns (nothing donated), a whole number of float32 values on each device. Judged with
    real arrays on meshes of all ``devices`` and of 2, at the page's memory and at others: at the
    answer device 0's bytes fit, 4·p bytes more do not. The package's kernels, ``values_per_device``
    and ``communication_budget`` are refused: work it out, do not search with real arrays."""
    from course_utils.models.cost import communication_budget

    exercise = "the largest gradient that fits"
    same_device_count(exercise, len(devices), "the device list")
    function_given(exercise, "largest_gradient", largest_gradient)
    p_all = len(devices)
    cases = [(memory_bytes, p_all), (3001, min(2, p_all)), (1234, p_all)]
    forbidden = (block_collective, values_per_device, communication_budget)
    answers = []
    for m, p in cases:
        call = f"largest_gradient({m:.0f}, {p})"
        got = call_without(exercise, largest_gradient, (m, p), forbidden=forbidden, call=call,
                           refusal="largest_gradient uses the package's {}: work the sizes out "
                                   "from what device 0 holds, do not search with real arrays")
        check_keys(exercise, call, got, KINDS)
        values = {k: number(got[k]) for k in KINDS}
        for k, v in values.items():
            if v is None or not math.isfinite(v) or v <= 0:
                fail(exercise, f"{call}[{k!r}] must be a positive number of bytes, got "
                     f"{got[k]!r}")
        answers.append((m, p, call, values))
    for why, slip in _named(answers).items():
        fail(exercise, f"{slip}: {why}")
    if named := _named_key(answers):
        fail(exercise, "".join(named) if named[1].startswith("[") else ": ".join(named))
    for i, (m, p, call, values) in enumerate(answers):
        right = largest_gradient_bytes(m, p)
        for k, v in values.items():
            if v != int(v) or int(v) % (4 * p):
                whole = " (a multiple of 4 is whole values in all; the task asks for p slices of " \
                        "whole values, for the all-reduce too)" if (
                    v == int(v) and int(v) % 4 == 0) else ""
                fail(exercise, f"{call}[{k!r}] = {v:g} is not a whole number of float32 values on "
                     f"each of the {p} devices: round down to a multiple of 4·p bytes{whole}")
            if v > 64 * m:  # far too large to place: judged by the rule, not by arrays
                fail(exercise, f"{call}[{k!r}]: {off_by(v, right[k])}")
        for k in KINDS:  # the first two cases with real arrays, the third by the rule they hold
            n, name = int(values[k]), k.replace("_", "-")
            held, above = (_held_bytes(devices, p, size, k) if i < 2 else sum(_formula(size, p)[k])
                           for size in (n, n + 4 * p))
            if held != sum(_formula(n, p)[k]):
                raise RuntimeError(f"the kernels held {held} bytes on device 0 for {k}, not the "
                                   "input and output blocks this check expects")
            if held > m:
                fail(exercise, f"{call}[{k!r}]: at that size device 0 holds more than {m:.0f} "
                     f"bytes when the {name} returns{_how(n, right[k], 'down, not up')}")
            if above <= m:
                fail(exercise, f"{call}[{k!r}]: a gradient 4·p = {4 * p} bytes larger still fits "
                     f"when the {name} returns{_how(n, right[k], 'down once, at the end')}")
    m, p, _, values = answers[0]
    passed(exercise, f"read from device 0's arrays: at {m:,.0f} bytes of memory on p = {p} the "
           f"sliced path fits {values['reduce_scatter'] / values['all_reduce']:.2f}× the "
           f"all-reduce's gradient; right at {len(answers) - 1} more memory sizes and device "
           "counts")


def _how(got: float, want: float, rounding: str) -> str:
    """How far ``got`` is from ``want``: a factor, or the advice ``rounding`` when it is close."""
    return f": round {rounding}" if abs(got - want) < 0.01 * want else f" ({off_by(got, want)})"


def _formula(n: int, p: int) -> dict:
    """The (input, output) bytes device 0 holds for an ``n``-byte gradient on ``p`` devices."""
    return {"all_reduce": (n, n), "reduce_scatter": (n, n / p), "all_gather": (n / p, n)}


def _named(answers: list) -> dict:
    """The one slip (its message: the first call it explains) that explains every answer, or
    ``{}``; a rule for the other p, or the page's sizes typed in, is named too."""
    for why, _ in _slips(1.0, 1).items():
        if all(_same(values, _slips(m, p)[why], p) for m, p, _, values in answers):
            return {why: answers[0][2]}
    p_all = answers[0][1]
    for m, p, call, values in answers:
        if p != p_all and _same(values, largest_gradient_bytes(m, p_all), max(p, p_all)):
            return {f"that is the answer for p = {p_all}, not for p = {p}: use the argument p, "
                    "not N_DEVICES": call}
        m0 = answers[0][0]
        if m != m0 and _same(values, largest_gradient_bytes(m0, p), p):
            return {f"that is the answer for {m0:.0f} bytes, not for the {m:.0f} given: use the "
                    "argument memory_bytes": call}
    return {}


def _same(values: dict, slip: dict, p: int) -> bool:
    """Whether ``values`` are ``slip``'s sizes, up to a rounding of less than 4·p bytes."""
    return all(abs(values[k] - slip[k]) < 4 * p for k in KINDS)
