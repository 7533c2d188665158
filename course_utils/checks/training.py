"""Self-checks for steps 14–15: the peak per ZeRO stage, error feedback around int8 (step 16's H
for a byte budget is in ``local_sgd``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from course_utils.checks.forbidden import uses_forbidden
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
from course_utils.problems.classification import padded_size
from course_utils.training.strategies import ZERO_STAGES, spec, zero_peak_bytes

STAGES = ZERO_STAGES
# layer lists (sizes as laid out: multiples of p) and device counts the page never shows: the
# largest layer in the middle, last, and first; none is the mean
_UNSEEN = (((512, 4096, 128, 1024, 32), 8), ((600, 60, 4800, 1200), 6), ((1000, 3000), 2))


def _sliced(stage: str) -> tuple[str, ...]:
    """What ``stage`` keeps in slices of 1/p between steps (its ``Parts``), in the order
    parameters, gradient, momentum."""
    parts = spec(stage).parts
    return tuple(name for name, placed in (("parameters", parts.params),
                                           ("the gradient", parts.gradient),
                                           ("the momentum", parts.optimizer))
                 if placed == "sliced")


def _state(stage: str, n: int, p: int, count: int | None = None) -> float:
    """Bytes of ``stage``'s three parts between steps, ``count`` of them sliced (its own
    number if ``None``)."""
    count = len(_sliced(stage)) if count is None else count
    return count * 4 * n / p + (3 - count) * 4 * n


def _peak_with_n(stage: str, sizes, p: int, n: int) -> float:
    """``stage``'s peak in the model with the vector's ``sum(sizes)`` values taken as ``n``
    (the gathered layer, ZeRO-3's, kept)."""
    layer = 4.0 * max(sizes) if spec(stage).parts.params == "sliced" else 0.0
    return (zero_peak_bytes(sizes, p)[stage] - layer) * n / sum(sizes) + layer


def _stage_slips(stage: str) -> dict[str, Callable]:
    """The honest slips of one stage's peak: ``{message: fn(sizes, p) -> bytes}``."""
    parts = spec(stage).parts

    def state(sizes, p, count=None):
        return _state(stage, sum(sizes), p, count)

    def right(sizes, p):
        return zero_peak_bytes(sizes, p)[stage]

    sliced = {"a slice is n/p values (p slices make the whole vector), not n/(p − 1)":
              lambda s, p: zero_peak_bytes(s, p - 1)[stage]}

    def in_place(name):
        return (f"updates happen in place, whole or sliced: {name}'s all-gathered w replaces the "
                "old w, so w counts once, not as a second whole vector (the shape model's rules)")

    if parts.params == "sliced":  # ZeRO-3: its state and one gathered layer
        return {
            **sliced,
            "count the gathered layer in bytes too: 4 per value, 4 × its size":
                lambda s, p: state(s, p) + max(s),
            "the layer held at the peak is the largest, not one of the mean size: each layer is "
            "gathered whole in its turn": lambda s, p: state(s, p) + 4 * sum(s) / len(s),
            "every layer is gathered in its turn, so the largest decides the peak, not the "
            "last": lambda s, p: state(s, p) + 4 * s[-1],
            "the largest layer decides the peak, wherever it sits, not the first":
                lambda s, p: state(s, p) + 4 * s[0],
            "that is the smallest layer (an ascending sort puts it first): every layer is "
            "gathered in its turn, so the largest decides the peak":
                lambda s, p: state(s, p) + 4 * min(s),
            "the shape model holds one gathered layer at a time, the largest: not the next one "
            "beside it (a prefetch, which this model leaves out)":
                lambda s, p: state(s, p) + 4 * sum(sorted(s)[-2:]),
            "ZeRO-3 gathers one layer at a time, not all at once: the whole vector gathered is "
            "the peak it avoids": lambda s, p: state(s, p) + 4 * sum(s),
            "at the peak the device still holds its state, three slices of n/p (parameters, "
            "gradient, momentum), beside the gathered layer": lambda s, p: 4 * max(s),
            "its state is three slices of n/p (parameters, gradient, momentum), not two":
                lambda s, p: 8 * sum(s) / p + 4 * max(s),
            "the gathered layer is whole (all p chunks of it), not one device's chunk":
                lambda s, p: state(s, p) + 4 * max(s) / p,
            "one whole layer: its gathered parameters in the forward pass, then its unreduced "
            "gradient in the backward pass, not both": lambda s, p: state(s, p) + 8 * max(s),
            "ZeRO-3 gathers each layer whole before using it: add the layer it holds":
                lambda s, p: state(s, p),
        }
    if parts.gradient == "sliced":  # ZeRO-2: it keeps a slice, computes the whole
        return {
            **sliced,
            in_place("ZeRO-2"): lambda s, p: right(s, p) + 4 * sum(s),
            "ZeRO-2 computes the whole local gradient (f32[n]) before its reduce-scatter (only "
            "what it keeps between steps is a slice), and it keeps the parameters whole":
                lambda s, p: state(s, p) + 4 * sum(s) / p,
            "during the step ZeRO-2 also holds the whole local gradient (f32[n]) before its "
            "reduce-scatter, which its state does not keep": lambda s, p: state(s, p),
        }
    if parts.optimizer == "sliced":  # ZeRO-1: the slice of the sum it updates with
        return {
            **sliced,
            in_place("ZeRO-1"): lambda s, p: right(s, p) + 4 * sum(s),
            "ZeRO-1 updates its slice with its slice of the summed gradient (f32[n/p]), which "
            "its state does not keep: add it": lambda s, p: state(s, p),
            "one slice of n/p is counted whole: at the peak ZeRO-1 holds two (its momentum, "
            "and the slice of the summed gradient it updates with)":
                lambda s, p: state(s, p) + 4 * sum(s),
        }
    return {  # data parallelism: nothing beyond its state
        "data parallelism sums and updates in place: the all-reduce sums the gradient it "
        "keeps, and the new w and v replace the old, whole (the shape model's rules): nothing "
        "beyond its state": lambda s, p: state(s, p) + 4 * sum(s),
        "data parallelism holds nothing beyond its state (the all-reduce works in place)":
            lambda s, p: state(s, p) + 4 * sum(s) / p,
        "data parallelism's state is three whole vectors (the table at the top of the page): "
        "parameters, momentum and the gradient, which the all-reduce sums in place; count all "
        "three, not two": lambda s, p: state(s, p) - 4 * sum(s),
    }


def check_peak_prediction(fn, layer_sizes, p: int) -> None:
    """Exercise 14: ``fn(layer_sizes, p) -> {stage: bytes}``, the peak one device holds during
    a step in step 14's shape model (``zero_peak_bytes``), for every stage of ``STAGES``, at the
    page's ``layer_sizes`` and ``p`` and at layer lists the page never shows (``_UNSEEN``). The
    package's model is refused; a wrong stage is named with the slip that explains it at every
    case."""
    exercise = "the peak during a step"
    function_given(exercise, "predicted_peak", fn)
    page = (tuple(int(size) for size in layer_sizes), int(p))
    answers = [(case, _peak_answer(exercise, fn, *case)) for case in (page, *_UNSEEN)]
    scaled = {"count bytes (4 per float32 value), not values": lambda want, q: want / 4,
              "that is all p devices together: give what ONE device holds":
                  lambda want, q: want * q}
    for why, slip in scaled.items():
        if all(np.isclose(got[s], slip(zero_peak_bytes(*case)[s], case[1]), rtol=1e-6)
               for case, got in answers for s in STAGES):
            fail(exercise, f"every stage is off in every case: {why}")
    for case, got in answers:
        want = zero_peak_bytes(*case)
        for stage in STAGES:
            if np.isclose(got[stage], want[stage], rtol=1e-6):
                continue
            where = ("" if case == page else f" at layers {list(case[0])} on p = {case[1]} "
                     "(a case the page never shows)")
            fail(exercise, f"{stage}: {off_by(got[stage], want[stage])}{where}; "
                           f"{_peak_slip(stage, answers, got[stage], want[stage])}")
    passed(exercise, ", ".join(f"{s} {answers[0][1][s]:.0f} B" for s in STAGES)
           + f" at the page's layers; right at {len(_UNSEEN)} layer lists more")


def _peak_answer(exercise: str, fn, sizes: tuple[int, ...], p: int) -> dict[str, float]:
    """The student's ``fn(list(sizes), p)`` as ``{stage: float}``, or a failure saying what
    is wrong with it."""
    call = f"predicted_peak({list(sizes)}, {p})"
    got = call_without(exercise, fn, (list(sizes), p), forbidden=(zero_peak_bytes,), call=call,
                       refusal="predicted_peak calls the package's {}, the model this exercise "
                               "asks you to write: count each stage's arrays yourself")
    if not isinstance(got, Mapping):
        fail(exercise, f"{call} returned a {type(got).__name__}; return a dict {{stage: bytes}}")
    check_keys(exercise, "predicted_peak(layer_sizes, p)", dict(got), STAGES)
    for stage in STAGES:
        value = number(got[stage])
        if value is None or not np.isfinite(value):
            fail(exercise, f"{call}[{stage!r}]: give a number of bytes, got {got[stage]!r}")
    return {stage: number(got[stage]) for stage in STAGES}


def _peak_slip(stage: str, answers: list, got: float, want: float) -> str:
    """The slip that explains ``stage``'s answers in every case (``answers``: the page's case
    first), else a hint; ``got`` and ``want`` are the first wrong case's."""
    def every(slip) -> bool:
        return all(np.isclose(a[stage], slip(*case), rtol=1e-6) for case, a in answers)

    for why, slip in _stage_slips(stage).items():
        if every(slip):
            return why
    for count in range(4):  # the state between steps miscounted, the rest right
        def miscounted(sizes, q, count=count):
            n = sum(sizes)
            return zero_peak_bytes(sizes, q)[stage] + _state(stage, n, q, count) - _state(
                stage, n, q)
        if count != len(_sliced(stage)) and every(miscounted):
            names = _sliced(stage)
            kept = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1
                                else names) or "nothing"
            return (f"between steps {stage} keeps {kept} in slices of n/p"
                    + ("" if _sliced(stage) else ", every part whole")
                    + " (the table at the top of the page)")
    page = answers[0][0]
    if every(lambda sizes, q: zero_peak_bytes(*page)[stage]):
        return ("that is the page's number in every case: write the bytes from layer_sizes "
                "and p, not numbers read off this page")
    if every(lambda sizes, q: _peak_with_n(stage, sizes, q, padded_size(q))):
        return ("n is sum(layer_sizes), the vector these layers make (padding included); "
                "padded_size(p) is this page's vector, not the one asked about")
    causes = unit_causes(got, want)
    if causes:
        return " — or ".join(causes)
    return ("a stage's peak is its state between steps plus the gradient or parameter arrays "
            "its step holds beyond it, at the shapes the step's code gives them (the shape "
            "model's rules)")


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
    refusal = ("my_int8_feedback calls the package's {}, which this exercise asks you not to "
               "call: quantize each bucket yourself")
    if (name := uses_forbidden(fn, forbidden)) is not None:
        fail(exercise, refusal.format(name))
    rng = np.random.default_rng(15)
    _judge_bound(exercise, residual_bound)
    traced, untraceable = jax.jit(fn), None  # one compile a size, not one per operation
    for n in (512, 320):  # two sizes: a size written into the function fails one
        g = rng.standard_normal(n).astype(np.float32)
        residual = (0.01 * rng.standard_normal(n)).astype(np.float32)
        g[SCALE_BUCKET:2 * SCALE_BUCKET] = residual[SCALE_BUCKET:2 * SCALE_BUCKET] = 0  # padding
        args = (jnp.asarray(g), jnp.asarray(residual))
        try:
            result = traced(*args)
        except Exception as error:  # noqa: BLE001 - run it as written, for its own error
            untraceable = untraceable or error
            result = call_without(exercise, fn, args, forbidden=forbidden, refusal=refusal,
                                  call=f"my_int8_feedback(g, residual) with n = {n}")
        _judge_int8(exercise, result, g, residual)
    if untraceable is not None:
        fail(exercise, "my_int8_feedback must also run on traced JAX arrays, as inside "
                       "jax.shard_map (use jax.numpy, no NumPy on the arrays and no Python "
                       f"loop over their values): {error_line(untraceable)}")
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
