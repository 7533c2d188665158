"""What every self-check shares: the exception a student sees, and how values, numbers and
placements are compared and described without giving the answer away."""

from __future__ import annotations

import contextlib
import math
import numbers
import sys
import traceback
import types
from typing import Callable

import jax
import numpy as np

from course_utils.collectives.kernels import Kernel
from course_utils.constants import ATOL


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


# the package's kernel builders: a student's kernel must not be, wrap or call what they build
PACKAGE_KERNELS = ("all_reduce_gradient", "reduce_scatter_gradient", "all_gather_shards",
                   "block_collective")


def package_kernel_in(fn) -> bool:
    """Whether ``fn`` is, or wraps (``jax.jit``, ``functools.wraps``/``partial``), a package kernel
    or a function defined inside a kernel builder."""
    for _ in range(20):
        if fn is None:
            return False
        if isinstance(fn, Kernel):
            return True
        qualname = getattr(getattr(fn, "__code__", None), "co_qualname", "")
        if qualname.split(".<locals>")[0] in PACKAGE_KERNELS:
            return True
        fn = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
    return False


def runs_package_kernel(jitted, args: tuple) -> bool:
    """Whether the program of ``jitted`` was traced through a package kernel's body (its source
    locations name ``reduce_scatter_gradient.<locals>.kernel`` and the like)."""
    try:
        text = jitted.lower(*args).as_text(debug_info=True)
    except Exception:  # noqa: BLE001 - no debug text: the other checks still judge the kernel
        return False
    return any(f'"{builder}.<locals>' in text for builder in PACKAGE_KERNELS)


def through_package_kernel(error: BaseException) -> bool:
    """Whether ``error`` was raised inside the package's kernels (a student's code called one)."""
    frames = traceback.extract_tb(error.__traceback__)
    return any(f.filename.endswith("kernels.py") and "collectives" in f.filename
               and f.name in ("__call__", "place", "lower", "kernel", "check") for f in frames)


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
        return (f"{name} calls one of the package's kernels (it raised {type(error).__name__} "
                "inside course_utils); write the jax.shard_map yourself")
    why = hint(error, text) or _shard_map_hint(error, text)
    return f"calling {name}({call}) raised {type(error).__name__}:\n{text}\n{why}".rstrip()


def passed(exercise: str, detail: str = "") -> None:
    print(f"PASSED: {exercise}" + (f" ({detail})" if detail else ""))


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
    if not np.issubdtype(got_array.dtype, np.floating):
        fail(
            exercise, f"{name} has dtype {got_array.dtype}, expected a float dtype such as float32"
        )
    tolerance = atol + rtol * np.abs(expected)
    wrong = np.flatnonzero(np.abs(got_array - expected).ravel() > tolerance.ravel())
    if wrong.size == 0:
        return
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
    fail(
        exercise,
        f"{name}: {wrong.size} of {flat_expected.size} entries wrong, at {where}{more} "
        f"(largest error {np.max(np.abs(got_array - expected)):.3g}){scale}{hint and '. ' + hint}",
    )


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


def _code_objects(code: types.CodeType):
    """``code`` and every code object nested in it (inner functions, lambdas, comprehensions)."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _named_objects(fn) -> list:
    """What the names in ``fn``'s code (nested code too) refer to: its globals, builtins excluded,
    and the cells of its closure."""
    found, scope = [], getattr(fn, "__globals__", {})
    for code in _code_objects(fn.__code__):
        found += [scope[n] for n in code.co_names if n in scope]
    found += [c.cell_contents for c in (fn.__closure__ or ()) if _filled(c)]
    return found


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises ValueError
    except ValueError:
        return False
    return True


class ForbiddenCall(Exception):
    """Raised by a forbidden function while ``tripwires`` holds it: ``args[0]`` is its name."""


@contextlib.contextmanager
def tripwires(fn, forbidden):
    """While the check calls ``fn``: every binding of a forbidden function (``forbidden`` as in
    ``uses_forbidden``) in the student's namespace and in the course's modules raises
    ``ForbiddenCall`` instead, so a name looked up only at call time (``globals()[...]``,
    ``getattr(course_utils, ...)``) is caught too. The bindings are restored afterwards."""
    banned = [f for f in forbidden if not isinstance(f, str)]
    names = {f for f in forbidden if isinstance(f, str)}
    student = getattr(_unwrapped(fn), "__globals__", None)
    home = getattr(getattr(_unwrapped(fn), "__code__", None), "co_filename", None)
    spaces = [m.__dict__ for n, m in list(sys.modules.items())
              if n.split(".")[0] == "course_utils" and m is not None]
    spaces += [student] if student is not None else []
    saved = []
    for space in spaces:
        for key, value in list(space.items()):
            notebook_own = (space is student and key in names
                            and isinstance(value, types.FunctionType)
                            and value.__code__.co_filename != home)
            if notebook_own or any(value is f for f in banned):
                saved.append((space, key, value))
                space[key] = _tripwire(getattr(value, "__name__", key))
    try:
        yield
    finally:
        for space, key, value in saved:
            space[key] = value


def _tripwire(name: str):
    def tripped(*args, **kwargs):
        raise ForbiddenCall(name)

    return tripped


def uses_forbidden(fn, forbidden, *, depth: int = 6) -> str | None:
    """The name of a forbidden function that ``fn`` is or calls, else ``None``.

    ``forbidden`` holds functions, each caught as itself or as any function with its ``__code__``
    (a copy, a ``functools.wraps``/``partial``/``jax.jit`` wrapper), and names of the notebook's own
    functions, caught when the function of that name was defined in another cell than ``fn`` (a
    student's own helper of the same name, in the same cell, is theirs). The names ``fn``'s code
    uses are resolved through its globals and closure, and the functions it reaches that were
    defined beside it (same globals: the notebook) are followed, ``depth`` calls deep."""
    banned = [f for f in forbidden if not isinstance(f, str)]
    codes = {getattr(f, "__code__", None) for f in banned} - {None}
    names = {f for f in forbidden if isinstance(f, str)}
    home = getattr(getattr(fn, "__code__", None), "co_filename", None)
    student = getattr(_unwrapped(fn), "__globals__", None)  # the namespace of the student's code
    seen: set[int] = set()

    def search(obj, level: int) -> str | None:
        for _ in range(10):  # unwrap jax.jit, functools.wraps and partial
            if id(obj) in seen:
                return None
            seen.add(id(obj))
            code = getattr(obj, "__code__", None)
            if any(obj is f for f in banned) or (code is not None and code in codes):
                return getattr(obj, "__name__", repr(obj))
            if (code is not None and code.co_name in names and code.co_filename != home
                    and getattr(obj, "__globals__", None) is student):
                return code.co_name
            inner = getattr(obj, "__wrapped__", None) or getattr(obj, "func", None)
            if inner is None:
                break
            obj = inner
        if not isinstance(obj, types.FunctionType) or level > depth:
            return None
        if obj.__globals__ is not student:
            return None  # library code (NumPy, JAX, the course's other functions) is not followed
        for named in _named_objects(obj):
            if (hit := search(named, level + 1)) is not None:
                return hit
        return None

    return search(fn, 0)


def _unwrapped(fn):
    for _ in range(10):
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "func", None)
        if inner is None:
            return fn
        fn = inner
    return fn


def function_given(exercise: str, name: str, value) -> None:
    """The student's function, looked up by name: defined (``None`` if not) and callable."""
    given(exercise, name, value, f"define the function {name}")
    if not callable(value):
        fail(exercise, f"{name} is an object of type {type(value).__name__}, not a function")
