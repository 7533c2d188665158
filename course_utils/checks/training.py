"""Self-checks for steps 14–15: memory per ZeRO stage, error feedback around int8 (step 16's H
for a byte budget is in ``local_sgd``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from course_utils.checks.helpers import (
    call_without,
    check_keys,
    fail,
    function_given,
    number,
    off_by,
    passed,
    unit_causes,
)
from course_utils.constants import SCALE_BUCKET
from course_utils.display import error_line
from course_utils.training.run import Memory
from course_utils.training.strategies import ZERO_STAGES, spec

STAGES = ZERO_STAGES
# what each stage keeps in slices of 1/p, in the order parameters, gradient, optimizer state:
# the parts its description's ``init`` places ``sliced``
_SLICED = {stage: tuple(part for part, placed in (("parameters", spec(stage).parts.params),
                                                  ("gradients", spec(stage).parts.gradient),
                                                  ("optimizer", spec(stage).parts.optimizer))
                        if placed == "sliced") for stage in STAGES}


def check_memory_prediction(fn, measured: Mapping[str, Memory], n: int, p: int) -> None:
    """Exercise 14: ``fn(n, p) -> {stage: bytes per device}`` for every stage of ``STAGES``,
    against ``measured[stage]``, the ``Memory`` record ``train`` read from the shards of a flat
    vector of ``n`` values on ``p`` devices, then at sizes and device counts never shown."""
    exercise = "memory per ZeRO stage"
    function_given(exercise, "predicted_memory", fn)
    predicted = _predicted(exercise, fn, n, p)
    for stage in STAGES:
        if number(predicted[stage]) is None:
            fail(exercise, f"{stage}: give a number of bytes, got {predicted[stage]!r}")
    # a unit slip shows in every stage at once; a slicing slip (which at p = 4 can give the same
    # number as a unit slip in one stage) only in some
    unit = [unit_causes(number(predicted[s]), measured[s].total) for s in STAGES]
    everywhere = [c for c in unit[0] if all(c in u for u in unit[1:])]
    for stage in STAGES:
        got, want = number(predicted[stage]), measured[stage].total
        if np.isclose(got, want):
            continue
        causes = everywhere or [_slicing_hint(stage, got, measured)
                                or " — or ".join(unit_causes(got, want))
                                or _memory_slip(stage, got, want, p)]
        fail(exercise, f"{stage}: {off_by(got, want)}; {' — or '.join(causes)}")
    for other_n, other_p in _UNSEEN:
        got = _predicted(exercise, fn, other_n, other_p)
        wrong = [s for s in STAGES if number(got[s]) is None
                 or not np.isclose(number(got[s]), _stage_bytes(s, other_n, other_p))]
        if wrong:
            fail(exercise, f"right at this notebook's n = {n}, p = {p}, but not at n = "
                           f"{other_n}, p = {other_p} ({', '.join(wrong)}): write each stage's "
                           "bytes in n and p, not numbers read off this run")
    passed(exercise, ", ".join(f"{s} {measured[s].total} B" for s in STAGES)
           + f"; and at {len(_UNSEEN)} other sizes and device counts")


# (n, p) the notebook never shows; n a multiple of p, as the padded vector is
_UNSEEN = ((4096, 8), (1200, 3), (512, 2), (640, 1))


def _stage_bytes(stage: str, n: int, p: int) -> float:
    """Bytes per device of ``stage``'s three float32 parts: whole (4n) or sliced (4n/p)."""
    return sum(4 * n / p if part in _SLICED[stage] else 4 * n
               for part in ("parameters", "gradients", "optimizer"))


def _predicted(exercise: str, fn, n: int, p: int) -> Mapping:
    try:
        predicted = fn(n, p)
    except Exception as error:  # noqa: BLE001 - the student's code failed: say how, in a line
        fail(exercise, f"predicted_memory({n}, {p}) raised {error_line(error)}")
    if not isinstance(predicted, Mapping):
        fail(exercise, f"predicted_memory(n, p) returned a {type(predicted).__name__}; return a "
                       "dict {stage: bytes}")
    check_keys(exercise, "predicted_memory(n, p)", predicted, STAGES)
    return predicted


def _memory_slip(stage: str, got: float, want: float, p: int) -> str:
    """The likely mistake behind a wrong byte count that is no unit or slicing slip."""
    from course_utils.problems.classification import N_PARAMS

    if np.isclose(got, want * p):
        return "that is all p devices together: give what ONE device holds"
    if np.isclose(got, _stage_bytes(stage, N_PARAMS, p)):
        return "n is the padded vector's length (N_PARAMS plus padding), not N_PARAMS"
    return ("add what one device holds, in bytes, of the parameters, the gradient and the "
            "momentum, each whole (4n) or in a slice (4n/p)")


def _slicing_hint(stage: str, got: float, measured: Mapping[str, Memory]) -> str | None:
    """If ``got`` is what the three parts add up to with another number of them sliced, which
    parts ``stage`` slices; else ``None``."""
    whole = max(max(m.parts().values()) for m in measured.values())
    piece = min(min(m.parts().values()) for m in measured.values())
    sliced = _SLICED[stage]
    for count in range(4):
        if count != len(sliced) and np.isclose(got, count * piece + (3 - count) * whole):
            kept = " and ".join(sliced).replace("optimizer", "the momentum (optimizer state)")
            kept = kept or "nothing"
            return (f"that counts {count} of the three parts as 1/p slices; {stage} keeps "
                    f"{kept} in slices of n/p" + ("" if sliced else ", every part whole"))
    return None


def int8_feedback(g: np.ndarray, residual: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Error feedback around int8 quantization, one device's view: ``acc = g + residual``, each
    bucket of ``SCALE_BUCKET`` values sent as codes ``round(acc / s)`` with ``s = max |acc| /
    127`` over the bucket; ``sent`` is what the receiver rebuilds (codes · s), and the new
    residual ``acc − sent`` what was not sent.

    Examples:
        >>> g = np.linspace(-1, 1, 64, dtype=np.float32)
        >>> sent, kept = int8_feedback(g, np.zeros(64, np.float32))
        >>> float(np.max(np.abs(kept))) <= 1 / 127 / 2 + 1e-7, bool(np.allclose(sent + kept, g))
        (True, True)
    """
    return _int8_feedback(g, residual)


def _int8_feedback(g, residual, *, compress_g=False, bucket=SCALE_BUCKET, levels=127,
                   rounding=np.round, codes_only=False):
    """``int8_feedback`` with one thing changed (the slips): ``g`` compressed without the
    residual, another bucket or number of levels, another rounding, the codes sent unscaled."""
    acc = (g + residual).astype(np.float32)
    source = g if compress_g else acc
    buckets = source.reshape(-1, bucket)
    scales = np.max(np.abs(buckets), axis=1, keepdims=True) / levels
    codes = rounding(buckets / np.where(scales > 0, scales, 1.0))
    sent = (codes if codes_only else codes * scales).reshape(-1).astype(np.float32)
    return sent, acc - sent


RESIDUAL_BOUND = 0.5  # |new residual| ≤ s / 2: each code is rounded to the nearest whole number


def check_int8_feedback(fn, residual_bound=None) -> None:
    """Exercise 15: ``fn(g, residual) -> (sent, new_residual)``, error feedback around int8
    quantization (``int8_feedback``), within float rounding, on random vectors of two sizes
    (multiples of ``SCALE_BUCKET``, one bucket all zeros), as JAX arrays and traced inside
    ``jax.jit``; and ``residual_bound``, the student's prediction of the largest |new residual|
    in units of its bucket's scale (``RESIDUAL_BOUND``). The package's quantizers and int8
    collectives are refused."""
    import jax
    import jax.numpy as jnp

    from course_utils.collectives.compression import dequantize_int8, int8_all_reduce, quantize_int8
    from course_utils.training.quantize import quantize, quantized_all_reduce

    exercise = "error feedback around int8"
    function_given(exercise, "my_int8_feedback", fn)
    forbidden = (quantize_int8, dequantize_int8, int8_all_reduce, quantize, quantized_all_reduce)
    rng = np.random.default_rng(15)
    _judge_bound(exercise, residual_bound)
    for n in (512, 320):  # two sizes: a size written into the function fails one
        g = rng.standard_normal(n).astype(np.float32)
        residual = (0.01 * rng.standard_normal(n)).astype(np.float32)
        g[SCALE_BUCKET:2 * SCALE_BUCKET] = residual[SCALE_BUCKET:2 * SCALE_BUCKET] = 0  # padding
        result = call_without(
            exercise, fn, (jnp.asarray(g), jnp.asarray(residual)), forbidden=forbidden,
            refusal="my_int8_feedback calls the package's {}, which this exercise asks you not "
                    "to call: quantize each bucket yourself",
            call=f"my_int8_feedback(g, residual) with n = {n}")
        _judge_int8(exercise, result, g, residual)
    try:
        g = np.linspace(-1, 1, 128, dtype=np.float32)
        jax.jit(fn)(g, np.zeros_like(g))
    except Exception as error:  # noqa: BLE001 - the student's code failed: say how, in a line
        fail(exercise, "my_int8_feedback must also run on traced JAX arrays, as inside "
                       "jax.shard_map (use jax.numpy, no NumPy on the arrays and no Python "
                       f"loop over their values): {error_line(error)}")
    passed(exercise, f"every bucket of {SCALE_BUCKET} sent as int8 codes times its scale; "
                     "sent + new residual = g + old residual, to float rounding; |new residual| "
                     "≤ s / 2")


def _judge_bound(exercise: str, bound) -> None:
    """Fail unless ``bound``, the predicted largest |new residual| in units of the bucket's
    scale, is ``RESIDUAL_BOUND``, naming the likely slip."""
    value = number(bound)
    if value is None:
        fail(exercise, "set RESIDUAL_BOUND to a number: the largest |new residual| an entry can "
                       "have, as a multiple of its bucket's scale s")
    if np.isclose(value, RESIDUAL_BOUND, rtol=1e-6):
        return
    slips = {1.0: "a code is rounded to the nearest whole number, so an entry is off by at most "
                  "half a step",
             1 / 127: "give it in units of the scale s, not of the bucket's largest value",
             0.5 / 127: "give it in units of the scale s, not of the bucket's largest value",
             127 / 2: "in units of s, one step of the codes is 1: the bound is a fraction of it",
             0.0: "int8 cannot send every value exactly: the residual keeps the rounding"}
    why = next((w for v, w in slips.items() if np.isclose(value, v, rtol=1e-6)),
               "think of one entry x: its code is round(x / s), and what is left is x − code · s")
    fail(exercise, f"RESIDUAL_BOUND = {value:g} is not the largest |new residual| in units of s: "
                   f"{why}")


def _judge_int8(exercise: str, result, g: np.ndarray, residual: np.ndarray) -> None:
    """Fail with the likely slip unless ``result`` is ``int8_feedback(g, residual)``."""
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        what = f"{len(result)} things" if isinstance(result, (tuple, list)) else "one value"
        fail(exercise, f"my_int8_feedback returned {what}: return two vectors, "
                       "(sent, new_residual)")
    try:
        sent, kept = (np.asarray(a, dtype=np.float32) for a in result)
    except (TypeError, ValueError) as error:
        fail(exercise, f"sent and new_residual must be vectors of numbers ({error_line(error)})")
    if sent.shape != g.shape or kept.shape != g.shape:
        fail(exercise, f"return two vectors shaped like g {g.shape}: sent (what the receiver "
                       f"rebuilds, codes × scale) and the new residual; got {sent.shape} and "
                       f"{kept.shape}")
    acc = g + residual
    want_sent, want_kept = int8_feedback(g, residual)
    tol = 1e-5 * float(np.max(np.abs(acc)))
    zero = np.flatnonzero(np.all(acc.reshape(-1, SCALE_BUCKET) == 0, axis=1))
    bad = ~np.isfinite(sent.reshape(-1, SCALE_BUCKET)[zero]) if zero.size else np.array([])
    if bad.any() or not np.isfinite(sent).all() or not np.isfinite(kept).all():
        fail(exercise, "sent holds NaN or inf" + (
            ": a bucket of zeros has scale 0, and 0 / 0 is NaN; divide by the scale only "
            "where it is above 0 (jnp.where(scale > 0, scale, 1)), so that it sends zeros"
            if bad.any() else ""))

    def near(a, b):
        return a.shape == b.shape and np.allclose(a, b, rtol=0, atol=tol)

    def mostly(a, b):  # a slip: nine entries in ten agree (a code on a rounding edge may not)
        return a.shape == b.shape and float(np.mean(np.abs(a - b) <= tol)) >= 0.9

    if near(sent, want_kept) and near(kept, want_sent):
        fail(exercise, "the two vectors come back swapped: return (sent, new_residual)")
    if not near(sent, want_sent):
        slips = {
            "you quantize g alone: compress g + residual, so that what was held back before "
            "gets its turn": _int8_feedback(g, residual, compress_g=True)[0],
            f"one scale per bucket of {SCALE_BUCKET} values (max |value| of the bucket / 127), "
            "not one for the whole vector": _int8_feedback(g, residual, bucket=g.size)[0],
            "int8 codes run from −127 to 127: the scale is max |value| / 127":
                _int8_feedback(g, residual, levels=128)[0],
            "int8 codes run from −127 to 127, not 255 levels: the scale is max |value| / 127":
                _int8_feedback(g, residual, levels=255)[0],
            "round to the nearest code (jnp.round): astype(jnp.int8) cuts toward zero":
                _int8_feedback(g, residual, rounding=np.trunc)[0],
            "round to the nearest code (jnp.round), not down (floor)":
                _int8_feedback(g, residual, rounding=np.floor)[0],
            "sent is what the receiver rebuilds: the codes times their bucket's scale, not the "
            "codes": _int8_feedback(g, residual, codes_only=True)[0],
            "that is g + residual itself: nothing was quantized": acc,
        } | {f"the buckets hold {SCALE_BUCKET} values, not {b}": _int8_feedback(
            g, residual, bucket=b)[0] for b in (16, 32, 128) if g.size % b == 0}
        why = next((w for w, wrong in slips.items() if mostly(sent, wrong)),
                   "each bucket of 64 values of g + residual: codes round(x / s), s = max |x| / "
                   "127, and sent = codes · s")
        fail(exercise, f"sent is not what int8 with a scale per bucket sends: {why}")
    if not near(kept, want_kept):
        if near(kept, residual):
            why = "the residual is returned unchanged: it must become what was not sent"
        elif near(kept, g - sent):
            why = "the new residual forgets the old one: it is (g + residual) − sent"
        elif near(kept, sent - acc):
            why = "the sign is flipped: the new residual is (g + residual) − sent"
        elif near(kept, np.zeros_like(kept)):
            why = "a zero residual drops what was not sent: keep (g + residual) − sent"
        else:
            why = "the new residual must be (g + residual) − sent"
        fail(exercise, f"new_residual is wrong: {why}")
