"""What every self-check shares: the exception a student sees, and how values, numbers and
placements are compared and described without giving the answer away."""

from __future__ import annotations

import math
import numbers
from typing import Callable

import jax
import numpy as np

from course_utils.checks.forbidden import through_package_kernel, uses_forbidden
from course_utils.constants import ATOL
from course_utils.display import error_line


class ExerciseFailed(AssertionError):
    """An exercise's answer is wrong; the message says how.

    In a notebook, IPython shows only the message (``_render_traceback_``): a traceback through
    this module would lead a student to the reference computation instead of their own code.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"ExerciseFailed: {self}"]


def scalar(value):
    """A 0-d NumPy or JAX number as its Python number; anything else as it is."""
    dtype = getattr(value, "dtype", None)
    if getattr(value, "shape", None) == () and dtype is not None and np.issubdtype(
            dtype, np.number):
        return value.item()
    return value


def number(value) -> float | None:
    """``value`` as a float if it is a real number (Python, NumPy or a 0-d NumPy or JAX array;
    not bool), else None."""
    value = scalar(value)
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (numbers.Real, np.number)):
        return None
    return float(value)


def off_by(got: float, expected: float) -> str:
    """How a number is off, without giving the answer away: a whole factor, a percentage, a
    wrong sign."""
    if not math.isfinite(got):
        return f"it is {got}: give a finite number"
    if expected == 0:
        return "it should be 0"
    if got == 0:
        return "it is 0, but it should not be"
    ratio = got / expected
    if ratio < 0:
        size = "" if math.isclose(ratio, -1) else ", and its size is off too"
        return f"it has the wrong sign{size}"
    if math.isclose(ratio, round(ratio)) and round(ratio) > 1:
        return f"it is {round(ratio)}× too large"
    if math.isclose(1 / ratio, round(1 / ratio)) and round(1 / ratio) > 1:
        return f"it is {round(1 / ratio)}× too small"
    if 0.5 < ratio < 2:
        percent = abs(ratio - 1) * 100
        way = "too large" if ratio > 1 else "too small"
        close = ": close, so check for rounding too early" if percent < 1 else ""
        return f"it is {percent:.2g} % {way}{close}"
    if ratio > 1:
        return f"it is about {ratio:.3g}× too large"
    return f"it is about {1 / ratio:.3g}× too small"


def unit_causes(got: float, expected: float) -> list[str]:
    """The unit slips that turn ``expected`` bytes into ``got``: values for bytes (float32),
    bits, KiB or MiB. Every one that fits, in that order; none for a right answer."""
    causes = []
    if math.isclose(got * 4, expected):
        causes.append("count bytes (4 per float32 value), not values")
    if math.isclose(got, expected * 8):
        causes.append("count bytes, not bits")
    if math.isclose(got * 2**20, expected) or math.isclose(got * 2**10, expected):
        causes.append("give bytes, not KiB or MiB")
    return causes


def tiled_hint(error: BaseException, pieces: str) -> str:
    """A hint for ``psum_scatter`` called without ``tiled=True`` on a vector, else ``""``."""
    if "scatter dimension size" not in str(error):
        return ""
    return (f"; without tiled=True, psum_scatter wants a first dimension of length {pieces}: "
            f"pass tiled=True to cut the vector into {pieces} slices")


def _shard_map_hint(error: BaseException, text: str) -> str:
    """The hint for a mistake any ``shard_map`` exercise can make, else ``""``."""
    if "of type NamedSharding" in text:
        return ("in_specs and out_specs take PartitionSpecs, P(...), not NamedShardings "
                "such as sliced: the mesh is already given by mesh=")
    if "pytree structure" in text and "in_specs" in text:
        return "in_specs must be a tuple with one P(...) per argument, not a list"
    if isinstance(error, AttributeError) and "trac" in text:
        return ("inside jax.jit every array is a tracer, with no .sharding or device data: "
                "jit the jax.shard_map of your kernel, not a function that places or inspects "
                "arrays")
    return tiled_hint(error, "p").lstrip("; ")


def call_failed(name: str, call: str, error: BaseException,
                hint: Callable[[BaseException, str], str]) -> str:
    """What a failed call ``name(call)`` of a student's function means: JAX's whole explanation,
    then a hint: ``hint(error, text)`` names the exercise's own likely mistakes (``""`` for none),
    and the mistakes every shard_map exercise shares come after."""
    text = str(error).strip()
    if through_package_kernel(error):
        return (f"{name} calls one of the package's kernels; write the jax.shard_map "
                "yourself")
    why = hint(error, text) or _shard_map_hint(error, text)
    return f"calling {name}({call}) raised {type(error).__name__}:\n{text}\n{why}".rstrip()


def passed(exercise: str, detail: str = "") -> None:
    print(f"PASSED: {exercise}" + (f" ({detail})" if detail else ""))


NOT_VERIFIED = "NOT VERIFIED"


def not_verified(exercise: str, why: str) -> None:
    """The third outcome, for an answer the check could not judge whole (a part it cannot run
    here): one line ``NOT VERIFIED: <exercise> (<why, and what to do>)``, never ``PASSED``.
    ``course check-submission`` grades it "not verified", not passed."""
    print(f"{NOT_VERIFIED}: {exercise} ({why})")


def fail(exercise: str, message: str):
    raise ExerciseFailed(f"{exercise}: {message}")


def given(exercise: str, name: str, value, what: str) -> None:
    """Fail unless the student's ``name`` holds something (not ``None``), saying ``what`` to
    store in it."""
    if value is None:
        fail(exercise, f"{name} is not defined (or is None); {what}")


def check_keys(exercise: str, name: str, got, keys) -> None:
    """Fail unless ``got`` is a dict with exactly ``keys``, naming what is missing or extra."""
    wanted = ", ".join(sorted(keys))
    if not isinstance(got, dict):
        fail(exercise, f"{name} must be a dict with the keys {wanted}, got {type(got).__name__}")
    missing = [repr(k) for k in sorted(keys) if k not in got]
    extra = sorted(repr(k) for k in got if k not in keys)
    problems = []
    if missing:
        problems.append(f"it lacks {', '.join(missing)}")
    if extra:
        problems.append(f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not asked for")
    if problems:
        fail(exercise, f"{name} needs exactly the keys {wanted}: {'; '.join(problems)}")


def check_values(
    exercise: str,
    name: str,
    got,
    expected: np.ndarray,
    *,
    atol: float = ATOL,
    rtol: float = ATOL,
    hint: str = "",
) -> None:
    """Compare shape, dtype and values; name the wrong entries and by how much."""
    given(exercise, name, got, f"assign your result to {name}")
    if isinstance(got, (list, tuple)):
        fail(exercise, f"{name} is a {type(got).__name__}; stack it into one array (np.stack)")
    got_array = np.asarray(got)
    if got_array.shape != expected.shape:
        fail(exercise, f"{name} has shape {got_array.shape}, expected {expected.shape}")
    low = got_array.dtype.name in _LOW_PRECISION  # a float that rounds to a few digits
    if not low and not np.issubdtype(got_array.dtype, np.floating):
        fail(
            exercise, f"{name} has dtype {got_array.dtype}, expected a float dtype such as float32"
        )
    got_array = got_array.astype(np.float64) if low else got_array
    tolerance = atol + rtol * np.abs(expected)
    wrong = np.flatnonzero(np.abs(got_array - expected).ravel() > tolerance.ravel())
    if wrong.size == 0:
        return
    if low and np.allclose(got_array, expected, atol=atol,
                           rtol=_LOW_PRECISION[np.asarray(got).dtype.name]):
        dtype = np.asarray(got).dtype.name
        fail(exercise, f"{name} has dtype {dtype}: {wrong.size} of {expected.size} entries are "
             f"off by its rounding (largest error {np.max(np.abs(got_array - expected)):.3g}); "
             f"return float32, the dtype of the inputs (no cast to {dtype})")
    flat_got, flat_expected = got_array.ravel(), expected.ravel()
    ratio = common_ratio(flat_got, flat_expected)
    # where and how far off, never the expected values themselves (they are the answer)
    where = ", ".join(
        str(tuple(int(k) for k in np.unravel_index(i, expected.shape))) if expected.ndim > 1
        else f"[{i}]"
        for i in wrong[:3]
    )
    more = f" and {wrong.size - 3} more" if wrong.size > 3 else ""
    scale = f"; every entry is {ratio:.3g}× the expected value" if ratio is not None else ""
    if low:
        scale += f"; and its dtype is {np.asarray(got).dtype.name}: return float32"
    fail(
        exercise,
        f"{name}: {wrong.size} of {flat_expected.size} entries wrong, at {where}{more} "
        f"(largest error {np.max(np.abs(got_array - expected)):.3g}){scale}{hint and '. ' + hint}",
    )


# the floats that keep only a few significant digits, with a relative error their rounding
# stays within (float16: 2^-11, bfloat16: 2^-8), with room for a sum of a few of them
_LOW_PRECISION = {"float16": 4e-3, "bfloat16": 3e-2}


def common_ratio(got: np.ndarray, expected: np.ndarray) -> float | None:
    """The factor got/expected if it is the same for all entries (a normalization mistake),
    else None.
    """
    mask = np.abs(expected) > 1e-6
    if not mask.any():
        return None
    ratios = got[mask] / expected[mask]
    if np.allclose(ratios, ratios[0], rtol=1e-3) and not math.isclose(ratios[0], 1.0, rel_tol=1e-3):
        return float(ratios[0])
    return None


def check_placement(exercise: str, name: str, array, expected_shape: tuple, n_devices: int) -> None:
    """Check that ``array`` is placed on the mesh with one block of ``expected_shape``
    per device.
    """
    if not hasattr(array, "addressable_shards"):
        fail(
            exercise,
            f"{name} is a {type(array).__name__} on the host, not a jax.Array on the devices",
        )
    shapes = sorted({tuple(s.data.shape) for s in array.addressable_shards})
    devices = len(array.addressable_shards)
    if devices != n_devices:
        fail(exercise, f"{name} lives on {devices} device(s), expected all {n_devices}")
    if shapes == [tuple(expected_shape)]:
        return
    full = tuple(array.shape)
    if shapes == [full]:
        fail(
            exercise,
            f"{name} has the right values but the wrong placement: it is replicated (every device "
            f"holds all of it, {full}); expected blocks of {tuple(expected_shape)} per device",
        )
    if tuple(expected_shape) == full:
        fail(
            exercise,
            f"{name} has the right values but the wrong placement: devices hold blocks of "
            f"{shapes}; expected the whole {full} on every device (replicated)",
        )
    fail(
        exercise,
        f"{name}: wrong shard shape: devices hold {shapes}, "
        f"expected {tuple(expected_shape)} per device",
    )


def same_device_count(exercise: str, count: int, name: str = "N_DEVICES") -> None:
    """Fail unless ``count`` (what the check cell passed as ``name``) is the number of devices JAX
    started with, which is fixed for the process: a solution cell that rebinds a course name
    (``N_DEVICES = 1``, a one-device ``mesh``) must not change what the check judges."""
    if count != jax.device_count():
        fail(exercise, f"{name} was changed after setup ({count}, but JAX runs "
             f"{jax.device_count()} devices): do not rebind the course's names in your answer")


def call_without(exercise: str, fn, args: tuple, *, forbidden, refusal: str, call: str):
    """The student's ``fn(*args)``, refused as ``refusal.format(name)`` if ``fn`` is or calls a
    ``forbidden`` function (``uses_forbidden``); any error it raises fails with one line that
    starts with ``call``."""
    if (name := uses_forbidden(fn, forbidden)) is not None:
        fail(exercise, refusal.format(name))
    try:
        return fn(*args)
    except Exception as error:  # noqa: BLE001 - the student's error, shown as one line
        failure = f"{call} raised {error_line(error)}"
    fail(exercise, failure)  # outside the except: no traceback chained into the package


def function_given(exercise: str, name: str, value) -> None:
    """The student's function, looked up by name: defined (``None`` if not) and callable."""
    given(exercise, name, value, f"define the function {name}")
    if not callable(value):
        fail(exercise, f"{name} is an object of type {type(value).__name__}, not a function")
