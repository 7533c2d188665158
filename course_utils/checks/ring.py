"""Self-check for step 11: one step of the ring reduce-scatter, on the ring that runs the other
way from the page's (device i sends to i − 1)."""

from __future__ import annotations

import re

import numpy as np
from jax.sharding import Mesh

from course_utils.checks.forbidden import read_globals, uses_forbidden
from course_utils.checks.helpers import (
    ExerciseFailed,
    fail,
    function_given,
    not_verified,
    passed,
)
from course_utils.collectives.kernels import block_collective
from course_utils.collectives.ring import (
    encoded_step,
    reduce_scatter_step,
    ring_permutation,
    ring_reduce_scatter,
    ring_scatter_sum,
)
from course_utils.display import error_line
from course_utils.observe.ir import collectives_in


def _run(exercise: str, ring, blocks: np.ndarray, step, axis: str) -> np.ndarray:
    """``ring(blocks)`` on the host, or the student's error in one line, with a hint for the
    likely mistake."""
    try:
        return np.asarray(ring(blocks))
    except Exception as error:  # noqa: BLE001 - the student's step failed: say how, in a line
        hint = ""
        text = f"{type(error).__name__}: {error}"
        if "Abstract tracer" in text or "TracerIntegerConversion" in text:
            hint = ("; the device index is a traced value inside the kernel: index arrays with "
                    "it (chunks[...]) instead of converting it with int()")
        if isinstance(error, TypeError) and ("tuple" in text or "list" in text):
            hint = "; my_step must return one array, the new partial sum f32[m/p], not a tuple"
        failure = f"running the ring with your step raised {error_line(error)}{hint}"
        home, other = axis.removeprefix("ring_"), _other_axis_names(step, axis)
        read = _globals_naming(step, home)
        if read:
            failure = (f"your step reads the notebook's {', '.join(read)} for the axis: the check "
                       f"runs it on a mesh whose axis is called {axis!r}, as a step inside another "
                       f"program could be (JAX stopped with {type(error).__name__}); use the "
                       "axis_name argument")
        elif home in other:
            failure = (f"your step names the axis {home!r} itself: the check runs it on a mesh "
                       f"whose axis is called {axis!r}, as a step inside another program could "
                       f"be (JAX stopped with {type(error).__name__}); use the axis_name "
                       "argument")
        elif other:
            failure = (f"your step names the axis {', '.join(map(repr, other))}, but the mesh's "
                       f"only axis is {home!r} (JAX stopped with {type(error).__name__}): use "
                       "the axis_name argument")
        elif "axis" in text.lower() and "name" in text.lower():
            failure += f"; the mesh's only axis is {axis!r}: use the axis_name argument"
    fail(exercise, failure)  # outside the except: no traceback chained into the package


_PACKAGE_STEPS = [reduce_scatter_step, encoded_step, ring_scatter_sum, ring_reduce_scatter]


def _globals_naming(step, home: str) -> list[str]:
    """The notebook globals ``step``'s code reads that hold the mesh's axis name ``home``, or a
    mesh with that axis (``axis``, ``mesh``): the axis taken from the page, not the argument."""
    return [n for n, v in read_globals(getattr(step, "__wrapped__", step)).items()
            if v == home or home in getattr(v, "axis_names", ())]


_REFUSAL = ("my_step uses the package's {0}: write the step yourself (jax.lax.ppermute, then "
            "add your own chunk)")


def _other_axis_names(step, axis: str) -> list[str]:
    """String constants in ``step``'s code (nested code too) that look like an axis name but are
    not the mesh's ``axis``: a hard-coded ``"model"``, say."""
    code = getattr(getattr(step, "__wrapped__", step), "__code__", None)
    found, todo = [], [code] if code is not None else []
    while todo:
        current = todo.pop()
        for const in current.co_consts:
            if hasattr(const, "co_consts"):
                todo.append(const)
            elif (isinstance(const, str) and const != axis and const.isidentifier()
                  and const not in found):
                found.append(const)
    return found


def _pairs(ring, blocks: np.ndarray) -> set[tuple[int, int]]:
    """The ``(source, destination)`` pairs of every collective-permute in ``ring``'s program."""
    text = ring.lower(blocks).compile().as_text()
    pairs: set[tuple[int, int]] = set()
    for found in re.findall(r"source_target_pairs=\{((?:\{\d+,\d+\},?)*)\}", text):
        pairs |= {(int(a), int(b)) for a, b in re.findall(r"\{(\d+),(\d+)\}", found)}
    return pairs


def _made_by_encoded_step(fn, depth: int = 3) -> bool:
    """``fn`` is a step ``encoded_step`` built, or reaches one through its closure or the
    globals it names (a wrapper around a prebuilt step)."""
    from course_utils.collectives.ring import encoded_step

    made = encoded_step(lambda c: c, lambda c: c).__code__
    code = getattr(fn, "__code__", None)
    if code is None or depth == 0:
        return False
    if code is made:
        return True
    cells = [c.cell_contents for c in (getattr(fn, "__closure__", None) or ())
             if c.cell_contents is not fn]
    names = [getattr(fn, "__globals__", {}).get(n) for n in code.co_names]
    return any(callable(v) and _made_by_encoded_step(v, depth - 1) for v in cells + names)


def check_ring_step(step, mesh: Mesh) -> None:
    """Exercise 11: ``step(partial, chunks, s, axis_name)``, one step of the ring reduce-scatter
    on the ring that runs the other way from the page's: device i sends to i − 1.

    The check runs that ring with it (p − 1 steps, ``ring_reduce_scatter(direction=-1)``) on
    random blocks and compares every device's result with ``psum_scatter``'s; then on blocks
    where device d holds 2^d everywhere, so that each result says whose contributions it sums;
    it reads the compiled program (only ``collective-permute`` ops, p − 1 of them); and it runs
    the ring again on p − 1 of the devices, where a p typed in shows.
    """
    exercise = "one step of the reversed ring"
    function_given(exercise, "my_step", step)
    if (name := uses_forbidden(step, _PACKAGE_STEPS)) is not None:
        fail(exercise, _REFUSAL.format(name))
    if _made_by_encoded_step(step):
        fail(exercise, _REFUSAL.format("encoded_step"))
    p, home = mesh.size, mesh.axis_names[0]
    if p == 1:
        not_verified(exercise, "with one device the ring has no step to run; run the step with "
                               "N_DEVICES = 4 or more to check it")
        return
    axis = "ring_" + home  # the step must use the axis it is given, whatever its name
    devices = np.asarray(mesh.devices).reshape(-1)
    _check_reversed_ring(exercise, step, Mesh(devices, (axis,)))
    detail = f"{p - 1} steps, each one collective-permute of one chunk, device i to i - 1"
    if p < 4:  # at 2 devices both rings are one swap; at 3 some wrong chunk indices sum right
        not_verified(exercise, f"your step gives the right sums on {p} devices, where a wrong "
                               "direction or chunk index can too; run the step with N_DEVICES = 4 "
                               "or more to check it")
        return
    try:  # a p typed in, or read from the notebook, is right at p devices only
        _check_reversed_ring(exercise, step, Mesh(devices[:-1], (axis,)))
        fewer = True
    except ExerciseFailed:
        fewer = False
    if not fewer:  # outside the except: no traceback chained into the package
        fail(exercise, f"right on {p} devices but wrong on {p - 1}: your step's p is not the "
                       "ring's size; read it from chunks.shape[0] (one chunk per device) or "
                       "jax.lax.axis_size(axis_name), not from the notebook (N_DEVICES, mesh) "
                       "nor from chunks.shape[1] (a chunk's length)")
    detail += f"; right on {p - 1} devices too"
    passed(exercise, detail)


def _check_reversed_ring(exercise: str, step, mesh: Mesh) -> None:
    """Fail with the likely slip unless the ring i → i − 1 with ``step`` on ``mesh`` (one axis,
    named as the step must read it) is a reduce-scatter of p − 1 collective-permutes."""
    p, axis = mesh.size, mesh.axis_names[0]
    blocks = np.random.default_rng(11).standard_normal((p, 4 * p)).astype(np.float32)
    ring = ring_reduce_scatter(mesh, step=step, direction=-1)  # compiled once for this shape
    got = _run(exercise, ring, blocks, step, axis)
    expected = np.asarray(block_collective(mesh, "reduce_scatter")(blocks))
    if got.shape != expected.shape:
        fail(exercise, f"my_step must return one chunk, f32[m/p]; the ring ended with {got.shape}"
                        f" instead of {expected.shape} (one row per device)")
    ops = [op.op for op in collectives_in(ring, blocks).hlo]
    others = sorted(set(ops) - {"collective-permute"})
    if others:
        fail(exercise, f"the program has {', '.join(others)}: a ring step only passes its "
                        "partial sum to the previous device (jax.lax.ppermute), no other "
                        "collective")
    wrong = [d for d in range(p) if not np.allclose(got[d], expected[d], atol=1e-5, rtol=1e-5)]
    if wrong:
        masks = np.repeat(2.0 ** np.arange(p, dtype=np.float32)[:, None], 4 * p, axis=1)
        sums = _run(exercise, ring, masks, step, axis)[:, 0]
        everyone = 2.0**p - 1
        own = sums / 2.0 ** np.arange(p)
        whole = blocks.reshape(p, p, -1).sum(axis=0)  # the sum of every chunk
        held = [next((c for c in range(p) if np.allclose(got[d], whole[c], atol=1e-4)), None)
                for d in range(p)]
        forwards = set(ring_permutation(p))
        if p > 2 and _pairs(ring, blocks) == forwards:
            why = ("your ppermute sends from device i to i + 1, the page's ring; this ring runs "
                   "the other way: device i sends to i - 1 and receives from i + 1")
        elif None not in held:
            why = ("each device ends with a complete sum, but of another chunk than its own: "
                   "the partial sums travel the wrong way round; send to the previous device, "
                   "i → i - 1")
        elif np.all(own == own[0]):
            why = ("no device receives anything: pass partial to the previous device with "
                   "jax.lax.ppermute, each pair (i, i - 1)")
        elif np.all(sums == everyone):
            why = ("every device's contribution arrives once, but added to the wrong chunk: the "
                   "chunk you add must have the index of the partial sum you receive; on this "
                   "ring it comes from device i + 1")
        elif all(v > 0 and int(v) & (int(v) - 1) == 0 for v in sums):  # one device's each
            why = ("each partial sum holds one device's contribution only: it is passed on "
                   "but nothing is added; after receiving, add your own chunk of the received "
                   "partial sum's index")
        elif np.any(sums > everyone) or np.any(sums != np.round(sums)):
            why = "some contributions are counted more than once"
        else:
            why = "some devices' contributions never arrive: send the partial sum you hold on"
        fail(exercise, f"the ring's result is wrong on device(s) {wrong}: {why}")
    if len(ops) != p - 1:
        fail(exercise, f"the right sum, but {len(ops)} collective-permute ops in the program "
                        f"where a ring needs p - 1 = {p - 1}: send one chunk per step")
