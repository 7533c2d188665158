"""Self-check of step 06: the sliced momentum step with gradient clipping by the whole gradient's
norm, where no device holds the whole gradient."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.forbidden import (
    package_kernel_in,
    runs_package_kernel,
    through_package_kernel,
)
from course_utils.checks.helpers import (
    call_failed,
    check_placement,
    check_values,
    fail,
    function_given,
    passed,
    same_device_count,
)
from course_utils.display import error_line
from course_utils.observe.ir import collectives_in

# the check's own shapes, (rows, features) per device count p: never the page's (4p, 2p), with
# enough features that the whole gradient (64p bytes, 48p bytes) is far from "a few bytes"
# norm: clipping acts by far (a norm several times too small, an RMS among them, still clips)
_CASES = ((6, 16, 16.0), (4, 12, 0.5))  # rows/p, features/p, the gradient's norm over the clip
_UNCLIPPED = "the gradient was not clipped"
_INVERTED = ("the gradient was not clipped, and one shorter than the threshold was shrunk (by "
             "‖g‖/C): the ratio is inverted; the factor is min(1, C/‖g‖)")


def _inputs(mesh, rows: int, features: int, norm: float, seed: int):
    """Inputs the student never saw, whose whole gradient has the norm ``norm``: host copies
    (float64) and the arrays placed as the page's specs say."""
    rng = np.random.default_rng(seed)
    # small x and w: the residual x·w − y is not a small difference of large float32 numbers
    x = rng.normal(scale=0.1, size=(rows, features)).astype(np.float32)
    w = rng.normal(scale=0.1, size=features).astype(np.float32)
    v = rng.normal(scale=0.01, size=features).astype(np.float32)
    r = rng.normal(size=rows)  # residual x·w − y, scaled so that ‖g‖ = norm
    g = 2 * x.astype(np.float64).T @ r / rows
    y = (x.astype(np.float64) @ w - r * norm / np.linalg.norm(g)).astype(np.float32)
    axis = mesh.axis_names[0]
    specs = (P(axis, None), P(axis), P(), P(axis))
    placed = tuple(jax.device_put(a, NamedSharding(mesh, s)) for a, s in zip((x, y, w, v), specs))
    return tuple(a.astype(np.float64) for a in (x, y, w, v)), placed


def _clipped(g, clip: float, norm: float):
    return g * min(1.0, clip / norm)


def _momenta(x, y, w, v, *, p: int, beta: float, clip: float) -> tuple[np.ndarray, dict]:
    """The right ``v_next`` and, for each slip the check names, the ``v_next`` it gives."""
    n = len(y)
    partials = [2 * xb.T @ (xb @ w - yb) / n for xb, yb in zip(np.split(x, p), np.split(y, p))]
    g = sum(partials)
    norm = np.linalg.norm(g)
    slices = np.split(g, p)
    right = beta * v + _clipped(g, clip, norm)
    own = np.concatenate([_clipped(s, clip, np.linalg.norm(s)) for s in slices])
    partial = np.concatenate([_clipped(s, clip, np.linalg.norm(q)) for s, q in zip(slices,
                                                                                    partials)])
    squares = np.sqrt(sum(np.sum(q * q) for q in partials))
    moved = beta * v + g
    each = sum(_clipped(q, clip, np.linalg.norm(q)) for q in partials)  # clipped, then summed
    slips = {
        _UNCLIPPED: moved,
        "each device clipped by the norm of its own slice: the norm is the whole gradient's, and "
        "after the reduce-scatter no device holds it; combine one number from every device":
            beta * v + own,
        "the norm of this device's partial gradient (before the reduce-scatter) is not the "
        "norm of the summed gradient: take the norm of the reduce-scattered slices":
            beta * v + partial,
        "the partial gradients' squares were summed before the reduce-scatter (a square of a "
        "sum is not the sum of the squares): take the norm of the reduce-scattered slices":
            beta * v + _clipped(g, clip, squares),
        "the slices' norms were added: a norm adds squares, ‖g‖ = sqrt(sum of every slice's "
        "sum of squares)": beta * v + _clipped(g, clip, sum(np.linalg.norm(s) for s in slices)),
        "that is clipping by the squared norm: take the square root of the sum of squares":
            beta * v + _clipped(g, clip, norm**2),
        "the momentum was clipped, not the gradient: clip g before the momentum update":
            moved * min(1.0, clip / np.linalg.norm(moved)),
        "clipping only shrinks a gradient longer than the threshold: the factor is min(1, C/‖g‖)":
            beta * v + g * clip / norm,
        "that clips each entry (by value), not the gradient's norm: scale the whole gradient by "
        "min(1, C/‖g‖)": beta * v + np.clip(g, -clip, clip),
        f"the factor is √p = {np.sqrt(p):.3g}× too large, the norm √p too small, as when the "
        "slices' sums of squares are averaged (pmean divides by p): the whole gradient's squared "
        "norm is their sum (psum)":
            beta * v + _clipped(g, clip, norm / np.sqrt(p)),
        "that is the largest slice's norm (a pmax), not the whole gradient's: the squares of "
        "every slice add up": beta * v + _clipped(g, clip, max(np.linalg.norm(s) for s in slices)),
        "that is the largest entry (max |g|, the ∞-norm), not the Euclidean norm ‖g‖: add the "
        "squares of every entry": beta * v + _clipped(g, clip, np.max(np.abs(g))),
        "each device clipped its partial gradient before the reduce-scatter: the sum of clipped "
        "partials is not the clipped sum; clip after the reduce-scatter, by the summed "
        "gradient's norm": beta * v + each,
        "that is the norm of the weights w, not of the gradient: clip by ‖g‖":
            beta * v + _clipped(g, clip, np.linalg.norm(w)),
        "that is the norm of the momentum v, not of the gradient: clip by ‖g‖":
            beta * v + _clipped(g, clip, np.linalg.norm(v)),
        "each slice's squares were averaged (jnp.mean, a root mean square), not summed: that "
        "norm is √(entries per slice) too small; ‖g‖ = sqrt(sum of every entry's square)":
            beta * v + _clipped(g, clip, np.sqrt(sum(np.mean(s * s) for s in slices))),
        "the squares were averaged (a root mean square, ‖g‖/√n), not summed: that norm is "
        "√(entries) too small; ‖g‖ = sqrt(sum of every entry's square)":
            beta * v + _clipped(g, clip, norm / np.sqrt(len(g))),
    }
    return right, slips


def _unnamed(got, right, host, *, p: int, beta: float, clip: float) -> str:
    """What a ``v_next`` that matches no named slip did to the gradient, read from the values:
    the factor each slice was scaled by, against min(1, C/‖g‖)."""
    if got.shape != right.shape:
        return (f"v_next has shape {got.shape}, not {right.shape}: the momentum in slices of "
                "features / p, as sliced_step returns it")
    x, y, w, v = host
    g = 2 * x.T @ (x @ w - y) / len(y)  # the whole gradient, unclipped
    want = min(1.0, clip / np.linalg.norm(g))
    pairs = list(zip(np.split(got - beta * v, p), np.split(g, p)))
    factors = [float(np.vdot(m, s) / np.vdot(s, s)) for m, s in pairs]
    if not all(_near(m, f * s) for f, (m, s) in zip(factors, pairs)):
        return ("v_next − β·v is not the gradient times one number: clipping scales the whole "
                "gradient by min(1, C/‖g‖) and changes nothing else (the momentum update stays "
                "v_next = β·v + g)")
    if not np.allclose(factors, factors[0], rtol=1e-4):
        return ("the devices scaled their slices by different factors ("
                f"{', '.join(f'{f:.3g}' for f in factors)}): every device must use the same one, "
                "from the whole gradient's norm")
    ratio = factors[0] / want
    if ratio <= 0:
        return (f"the gradient was scaled by {factors[0]:.3g}: the factor min(1, C/‖g‖) is "
                f"{want:.3g}, positive")
    off = f"{ratio:.3g}× too large" if ratio > 1 else f"{1 / ratio:.3g}× too small"
    return (f"the gradient was scaled by {factors[0]:.3g}, where min(1, C/‖g‖) is {want:.3g} "
            f"({off}): the norm you clipped by, or the threshold, is not ‖g‖ or CLIP — or the "
            "momentum update is not v ← β·v + g, the page's rule")


def _shrinks_short(step, mesh, beta: float, clip: float) -> bool:
    """Whether ``step`` scales a gradient shorter than the threshold by ‖g‖/C, the inverted
    ratio min(1, ‖g‖/C) (which leaves a longer one unclipped)."""
    p = mesh.size
    rows, features, over = _CASES[1]  # the gradient shorter than the threshold
    host, placed = _inputs(mesh, rows * p, features * p, over * clip, 62)
    try:
        got = np.asarray(step(*placed)[1], dtype=np.float64)
    except Exception:  # noqa: BLE001 - any failure: not this slip, the first message stands
        return False
    x, y, w, v = host
    g = 2 * x.T @ (x @ w - y) / len(y)
    return _near(got, beta * v + g * np.linalg.norm(g) / clip)


def _near(got, want) -> bool:
    return got.shape == want.shape and np.allclose(got, want, rtol=1e-5,
                                                   atol=1e-5 * float(np.max(np.abs(want))))


def _program(exercise: str, name: str, step, placed, features: int, p: int) -> None:
    """Fail unless the compiled program reduce-scatters the gradient, all-gathers the weights
    and sends nothing else of more than a few bytes (one number per device)."""
    jitted = step if hasattr(step, "lower") else jax.jit(step)
    try:
        ops = collectives_in(jitted, *placed).hlo
    except Exception as error:  # noqa: BLE001 - any failure to compile is the student's to fix
        if through_package_kernel(error):
            fail(exercise, f"{name} calls the package's kernels; write the jax.shard_map with "
                 "its collectives yourself")
        fail(exercise, f"{name} does not compile as one JAX program ({error_line(error)}); "
             "build it from jax.shard_map and wrap it in jax.jit")
    if runs_package_kernel(jitted, placed):
        fail(exercise, f"{name} runs the package's kernels inside; write the jax.shard_map with "
             "its collectives yourself")
    few, whole = 4 * p, 4 * features  # bytes: one float32 per device; the whole gradient
    largest = max((op.bytes for op in ops if op.op == "all-reduce"), default=0)
    if largest >= whole:
        fail(exercise, f"the right numbers, but the program all-reduces {largest} bytes: every "
             "device receives the whole gradient to compute its norm, which the sliced step "
             "exists to avoid; the norm needs only one number from each device")
    if largest > few:
        what = ("a slice-long vector (a slice of the gradient, or of its squares, added entry "
                "by entry)" if largest == whole // p else "more than one number per device")
        fail(exercise, f"the right numbers, but the program all-reduces {largest} bytes, {what}: "
             "sum the slice's squares to one number on each device first, and all-reduce that "
             "one number")
    if not any(op.op == "reduce-scatter" for op in ops):
        fail(exercise, "the right numbers, but the program has no reduce-scatter: compute the "
             "gradient inside the step and reduce-scatter it with psum_scatter, as "
             "sliced_momentum_kernel does")
    gathers = sorted(op.bytes for op in ops if op.op == "all-gather")
    if gathers.count(whole) > 1 or not gathers or any(few < b < whole for b in gathers):
        fail(exercise, "the right numbers, but the program gathers more than the new weights "
             f"(all-gathers of {', '.join(map(str, gathers))} bytes): gathering the gradient "
             "sends every device all of it; the norm needs only one number from each device")
    if gathers[-1] != whole:
        fail(exercise, "the right numbers, but the weights are not all-gathered: gather the "
             "updated slices with jax.lax.all_gather(..., tiled=True, to=\"invarying\")")
    other = sorted({op.op for op in ops} - {"all-reduce", "reduce-scatter", "all-gather"})
    if other:
        fail(exercise, f"the right numbers, but the program also has {', '.join(other)}: the "
             "step needs a reduce-scatter, the norm's few bytes and one all-gather")


def check_clipped_step(step, mesh, *, lr: float, beta: float, clip: float) -> None:
    """Exercise 06: ``step(x, y, w, v) -> (w_next, v_next)``, the sliced momentum step with the
    gradient clipped by the whole gradient's norm first, ``g ← g · min(1, clip / ‖g‖)``.

    The check calls ``step`` on inputs of its own (one where clipping acts, one where it does not,
    neither of the page's shapes), compares the values with NumPy and names the likely slip,
    checks the placements (momentum sliced, weights gathered) and reads the compiled program: the
    gradient reduce-scattered, the weights all-gathered, any other collective a few bytes.
    """
    exercise = "clipping by the global norm in the sliced step"
    same_device_count(exercise, mesh.size, "mesh")
    name = "clipped_step"
    function_given(exercise, name, step)
    if isinstance(step, (np.ndarray, jax.Array)) or package_kernel_in(step):
        fail(exercise, f"{name} is (or wraps) one of the package's kernels; write the "
             "jax.shard_map with its collectives yourself")
    p = mesh.size
    for seed, (rows, features, over) in enumerate(_CASES, start=61):
        rows, features = rows * p, features * p
        host, placed = _inputs(mesh, rows, features, over * clip, seed)
        failure, out = "", None
        try:
            out = step(*placed)
        except Exception as error:  # noqa: BLE001 - the student's function failed: say how
            failure = call_failed(name, f"x, y, w, v with x of shape {(rows, features)}", error,
                                  lambda error, text: "")
        if failure:
            fail(exercise, failure)  # outside the except: no traceback chained into the package
        if not isinstance(out, (tuple, list)) or len(out) != 2:
            fail(exercise, f"{name}(x, y, w, v) must return (w_next, v_next), two arrays; got "
                 f"{type(out).__name__}")
        x, y, w, v = host
        right, slips = _momenta(x, y, w, v, p=p, beta=beta, clip=clip)
        acts = "clipping acts" if over > 1 else "the gradient is shorter than the threshold"
        try:
            got = np.asarray(out[1], dtype=np.float64)
        except (TypeError, ValueError) as error:
            fail(exercise, f"v_next must be an array of numbers ({error_line(error)})")
        if not _near(got, right):
            slip = next((why for why, wrong in slips.items() if _near(got, wrong)), None)
            if slip == _UNCLIPPED and over > 1 and _shrinks_short(step, mesh, beta, clip):
                slip = _INVERTED  # min(1, ‖g‖/C): only a short gradient tells it apart
            fail(exercise, f"v_next ({acts}): " + (slip or _unnamed(got, right, (x, y, w, v),
                                                                  p=p, beta=beta, clip=clip)))
        for key, got, want in (("v_next", out[1], right), ("w_next", out[0], w - lr * right)):
            check_values(exercise, f"{key} (on the check's own inputs, {acts})", got,
                         want.astype(np.float32), atol=1e-5 * float(np.max(np.abs(want))),
                         rtol=1e-5)
        check_placement(exercise, "w_next", out[0], (features,), p)
        check_placement(exercise, "v_next", out[1], (features // p,), p)
        _program(exercise, name, step, placed, features, p)
    passed(exercise, f"clipped where the gradient is {_CASES[0][2]:g}× the threshold, unchanged "
           f"where it is {_CASES[1][2]:g}×; the gradient reduce-scattered, the norm's few bytes "
           "all-reduced, the weights gathered")
