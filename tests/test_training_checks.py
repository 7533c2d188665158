"""The self-checks of steps 14-16 pass right answers and name what is wrong in wrong ones."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.local_sgd import check_local_sgd_h
from course_utils.checks.training import (
    _UNSEEN,
    _stage_slips,
    check_int8_feedback,
    check_peak_prediction,
)
from course_utils.problems.classification import padded_size
from course_utils.training.strategies import zero_peak_bytes

P = 4
LAYERS = [8192, 256, 2048, 256]  # the page's layers as laid out (padding included), p = 4


def right_peak(layer_sizes, p):
    n = sum(layer_sizes)
    whole, piece = 4 * n, 4 * n / p
    return {"data_parallel": 3 * whole, "zero1": 2 * whole + 2 * piece,
            "zero2": 2 * whole + 2 * piece, "zero3": 3 * piece + 4 * max(layer_sizes)}


def peak_of_arrays(layer_sizes, p):  # another form: NumPy numbers, ints, array shapes counted
    n, nbytes = int(np.sum(layer_sizes)), np.float32().nbytes
    slice_, layer = n // p * nbytes, np.max(layer_sizes) * nbytes
    return {"zero3": np.int64(3 * slice_ + layer), "zero2": n * nbytes * 2 + 2 * slice_,
            "zero1": np.float64(2 * n * nbytes + 2 * slice_), "data_parallel": 3 * n * nbytes}


def peak_by_arrays_held(layer_sizes, p):  # a third form: the arrays each step holds, listed
    n = sum(layer_sizes)
    held = {"data_parallel": [n, n, n], "zero1": [n, n, n / p, n / p],
            "zero2": [n, n / p, n / p, n], "zero3": [n / p] * 3 + [max(layer_sizes)]}
    return {stage: 4.0 * sum(values) for stage, values in held.items()}


def peak_with(**changed):
    """The right peak with one stage's answer replaced: ``stage=fn(sizes, p, right)``."""
    def predicted_peak(layer_sizes, p):
        right = right_peak(layer_sizes, p)
        return {**right, **{s: f(layer_sizes, p, right[s]) for s, f in changed.items()}}
    return predicted_peak


def state3(sizes, p):
    return 12 * sum(sizes) / p


def page_vector(layer_sizes, p):  # n taken from the page's padded_size, not the layers
    n = padded_size(p)
    return {"data_parallel": 12 * n, "zero1": 8 * n + 8 * n / p, "zero2": 8 * n + 8 * n / p,
            "zero3": 12 * n / p + 4 * max(layer_sizes)}


def test_peak_right_in_three_forms(capsys):
    check_peak_prediction(right_peak, LAYERS, P)
    check_peak_prediction(peak_of_arrays, LAYERS, P)
    check_peak_prediction(peak_by_arrays_held, np.array(LAYERS), np.int64(P))
    out = capsys.readouterr().out
    assert out.count("PASSED: the peak during a step") == 3
    assert "zero3 65024 B" in out and "right at 3 layer lists more" in out


def test_the_unseen_cases_tell_every_slip_apart():
    for stage in ("data_parallel", "zero1", "zero2", "zero3"):
        slips = list(_stage_slips(stage).values()) + [
            lambda s, p, stage=stage: zero_peak_bytes(s, p)[stage]]  # the right answer
        cases = [(tuple(LAYERS), P), *_UNSEEN]
        values = [tuple(slip(*case) for case in cases) for slip in slips]
        assert len(set(values)) == len(values), stage


def test_peak_slips_are_named():
    cases = [
        (peak_with(zero3=lambda s, p, r: state3(s, p) + 4 * sum(s) / len(s)),
         "zero3: .*; the layer held at the peak is the largest, not one of the mean size"),
        (peak_with(zero3=lambda s, p, r: state3(s, p) + 4 * s[-1]),
         "zero3: .*; every layer is gathered in its turn, so the largest decides the peak, "
         "not the last$"),
        (peak_with(zero3=lambda s, p, r: state3(s, p) + 4 * s[0]),
         r"zero3: .* at layers \[512, 4096, 128, 1024, 32\] on p = 8 \(a case the page never "
         r"shows\); the largest layer decides the peak, wherever it sits, not the first$"),
        (peak_with(zero3=lambda s, p, r: state3(s, p) + 4 * sum(s)),
         "ZeRO-3 gathers one layer at a time, not all at once"),
        (peak_with(zero3=lambda s, p, r: state3(s, p) + 4 * sorted(s)[0]),
         r"zero3: .*; that is the smallest layer \(an ascending sort puts it first\)"),
        (peak_with(zero3=lambda s, p, r: state3(s, p) + 4 * sum(sorted(s)[-2:])),
         "zero3: .*; the shape model holds one gathered layer at a time, the largest: not the "
         r"next one beside it \(a prefetch"),
        (peak_with(data_parallel=lambda s, p, r: 8 * sum(s)),
         r"data_parallel: .*; data parallelism's state is three whole vectors .*: parameters, "
         "momentum and the gradient"),
        (peak_with(zero3=lambda s, p, r: 4 * max(s)),
         "at the peak the device still holds its state, three slices of n/p"),
        (peak_with(zero3=lambda s, p, r: state3(s, p) + 4 * max(s) / p),
         r"the gathered layer is whole \(all p chunks of it\)"),
        (peak_with(zero2=lambda s, p, r: 4 * sum(s) + 12 * sum(s) / p),
         r"zero2: .*; ZeRO-2 computes the whole local gradient \(f32\[n\]\) before its "
         r"reduce-scatter \(only what it keeps between steps is a slice\), and it keeps the "
         "parameters whole$"),
        (peak_with(zero2=lambda s, p, r: 4 * sum(s) + 8 * sum(s) / p),
         "during the step ZeRO-2 also holds the whole local gradient"),
        (peak_with(zero1=lambda s, p, r: 8 * sum(s) + 4 * sum(s) / p),
         r"zero1: .*; ZeRO-1 updates its slice with its slice of the summed gradient"),
        (peak_with(zero1=lambda s, p, r: r - 4 * sum(s) / p + 4 * sum(s)),
         "zero1: .*; one slice of n/p is counted whole: at the peak ZeRO-1 holds two"),
        (peak_with(zero3=lambda s, p, r: r + 4 * sum(s) - 4 * sum(s) / p),  # one part whole
         r"zero3: .*; between steps zero3 keeps parameters, the gradient and the momentum in "
         r"slices of n/p \(the table at the top of the page\)$"),
        (peak_with(zero3=lambda s, p, r: r - 4 * sum(s) / p),
         r"its state is three slices of n/p \(parameters, gradient, momentum\), not two$"),
        (peak_with(data_parallel=lambda s, p, r: r + 4 * sum(s)),  # the sum or the new w
         r"data_parallel: .*; data parallelism sums and updates in place: the all-reduce sums "
         "the gradient it keeps, and the new w and v replace the old, whole"),
        (peak_with(zero1=lambda s, p, r: r + 4 * sum(s), zero2=lambda s, p, r: r + 4 * sum(s)),
         r"zero1: .*; updates happen in place, whole or sliced: ZeRO-1's all-gathered w "
         "replaces the old w, so w counts once"),
        (peak_with(zero2=lambda s, p, r: r + 4 * sum(s)),
         r"zero2: .*; updates happen in place, whole or sliced: ZeRO-2's all-gathered w"),
        (lambda s, p: right_peak(s, p - 1),
         r"zero1: it is .* too large; a slice is n/p values \(p slices make the whole vector\), "
         r"not n/\(p − 1\)$"),
        (peak_with(zero3=lambda s, p, r: state3(s, p - 1) + 4 * max(s)),
         r"zero3: .*; a slice is n/p values"),
        (peak_with(zero3=lambda s, p, r: state3(s, p) + max(s)),
         r"zero3: .*; count the gathered layer in bytes too: 4 per value, 4 × its size$"),
        (page_vector,
         r"data_parallel: .* on p = 8 .*; n is sum\(layer_sizes\), the vector these layers "
         r"make \(padding included\); padded_size\(p\) is this page's vector"),
        (lambda s, p: {k: v / 4 for k, v in right_peak(s, p).items()},
         r"every stage is off in every case: count bytes \(4 per float32 value\), not values$"),
        (lambda s, p: {k: v * p for k, v in right_peak(s, p).items()},
         "every stage is off in every case: that is all p devices together"),
        (peak_with(zero2=lambda s, p, r: r / 4), r"zero2: it is 4× too small; count bytes"),
        (peak_with(zero3=lambda s, p, r: r + 1),
         "zero3: .*; a stage's peak is its state between steps plus"),
        (lambda s, p: right_peak(LAYERS, P),  # typed in from the page
         r"data_parallel: .* at layers \[512, 4096, 128, 1024, 32\] on p = 8 .*; that is the "
         "page's number in every case: write the bytes from layer_sizes and p"),
    ]
    for answer, message in cases:
        with pytest.raises(ExerciseFailed, match=message):
            check_peak_prediction(answer, LAYERS, P)


def test_peak_shortcut_and_bad_input():
    import course_utils as cu

    cases = [
        (None, "predicted_peak is not defined"),
        (right_peak(LAYERS, P), "predicted_peak is an object of type dict, not a function"),
        (zero_peak_bytes, "predicted_peak calls the package's zero_peak_bytes, the model this "
                          "exercise asks you to write"),
        (lambda s, p: cu.zero_peak_bytes(s, p), "calls the package's zero_peak_bytes"),
        (lambda s: 1, r"predicted_peak\(\[8192, 256, 2048, 256\], 4\) raised TypeError"),
        (lambda s, p: 1 / 0, r"raised ZeroDivisionError"),
        (lambda s, p: list(right_peak(s, p).values()), "returned a list; return a dict"),
        (lambda s, p: {"zero1": 1}, "exactly the keys .*: it lacks 'data_parallel', 'zero2'"),
        (lambda s, p: {**right_peak(s, p), "fsdp": 1}, "'fsdp' is not asked for"),
        (lambda s, p: {**right_peak(s, p), "zero2": "a lot"},
         r"\['zero2'\]: give a number of bytes, got 'a lot'"),
        (lambda s, p: {**right_peak(s, p), "zero3": float("nan")}, "give a number of bytes"),
        (lambda s, p: {**right_peak(s, p), "zero3": np.ones(2)}, "give a number of bytes"),
    ]
    for answer, message in cases:
        with pytest.raises(ExerciseFailed, match=message):
            check_peak_prediction(answer, LAYERS, P)


def _right(g, residual):
    acc = g + residual
    buckets = acc.reshape(-1, 64)
    scale = jnp.max(jnp.abs(buckets), axis=1, keepdims=True) / 127
    sent = (jnp.round(buckets / jnp.where(scale > 0, scale, 1.0)) * scale).reshape(-1)
    return sent, acc - sent


def _as_int8(g, residual):  # another right form: codes as int8, clipped, a scale without 0s
    acc = g + residual
    buckets = acc.reshape(acc.shape[0] // 64, 64)
    scale = jnp.abs(buckets).max(axis=-1)[:, None] / 127.0
    codes = jnp.clip(jnp.rint(buckets / scale), -127, 127).astype(jnp.int8)
    sent = (codes.astype(jnp.float32) * scale).ravel()
    return sent, acc - sent


def test_int8_feedback_right_and_wrong(capsys):
    for right in (_right, _as_int8):
        check_int8_feedback(right, 0.5)
        assert "to float rounding" in capsys.readouterr().out

    def keeps_old_residual(g, residual):
        return _right(g, residual)[0], residual

    def raises(g, residual):
        raise ValueError("shapes do not match")

    cases = [  # (the page's common wrong answers: tests/test_mistakes.py)
        (None, "my_int8_feedback is not defined"),
        (3, "is an object of type int, not a function"),
        (keeps_old_residual, "the residual is returned unchanged"),
        (lambda g, r: (g + r, 0 * g), "that is g \\+ residual itself: nothing was quantized"),
        (lambda g, r: (_right(g, r)[0], 0 * g), "a zero residual drops what was not sent"),
        (lambda g, r: (_right(g, r)[0], _right(g, r)[0] - g - r), "the sign is flipped"),
        (raises, "raised ValueError: shapes do not match"),
        (lambda g, r: (g[:64], r), "return two vectors shaped like g"),
        (lambda g, r: _right(g, r)[::-1], r"swapped: return \(sent, new_residual\)"),
    ]
    for fn, message in cases:
        with pytest.raises(ExerciseFailed, match=message):
            check_int8_feedback(fn, 0.5)


def test_int8_feedback_refuses_the_package_quantizers_and_tells_numpy_to_trace():
    from course_utils.collectives.compression import dequantize_int8, quantize_int8

    def through_package(g, residual):
        acc = g + residual
        sent = dequantize_int8(*quantize_int8(acc))
        return sent, acc - sent

    with pytest.raises(ExerciseFailed, match="calls the package.s (de)?quantize_int8, which"):
        check_int8_feedback(through_package, 0.5)

    def in_numpy(g, residual):
        acc = np.asarray(g) + np.asarray(residual)
        sent = np.zeros_like(acc)
        for i in range(0, acc.size, 64):  # a loop over the values, in place
            scale = np.abs(acc[i:i + 64]).max() / 127 or 1.0
            sent[i:i + 64] = np.round(acc[i:i + 64] / scale) * scale
        return sent, acc - sent

    with pytest.raises(ExerciseFailed, match="must also run on traced JAX arrays"):
        check_int8_feedback(in_numpy, 0.5)


def _h_right(nbytes, p, steps, budget):
    averagings = budget // (2 * (p - 1) / p * nbytes)  # whole averagings the budget pays for
    return steps // (averagings + 1) + 1


def _h_by_search(nbytes, p, steps, budget):
    ring = 2 * (p - 1) * nbytes / p
    return next(h for h in range(1, steps + 2) if steps // h * ring <= budget)


def _h_by_loop(nbytes, p, steps, budget, *, spent=lambda sent, budget: sent > budget):
    """A while loop on the bytes in float ((p - 1) / p first); ``spent``: H is too small."""
    h = 1
    while spent(steps // h * ((p - 1) / p * 2 * nbytes), budget):
        h += 1
    return h


def test_local_sgd_h_right_forms_pass(capsys):
    check_local_sgd_h(_h_right)
    check_local_sgd_h(_h_by_search)
    check_local_sgd_h(_h_by_loop)
    check_local_sgd_h(lambda *args: float(_h_right(*args)))
    check_local_sgd_h(lambda *args: np.int64(_h_by_search(*args)))
    assert capsys.readouterr().out.count("PASSED: H for a byte budget") == 5


def test_local_sgd_h_tries_a_budget_spent_exactly_and_one_below_one_averaging():
    with pytest.raises(ExerciseFailed, match=r"my_local_sgd_h\(96000, 4, 100, 1440000\): a "
                       "smaller H also stays within the budget: return the smallest; at most the "
                       "budget: a run that spends exactly the budget fits"):
        check_local_sgd_h(partial(_h_by_loop, spent=lambda sent, budget: sent >= budget))
    with pytest.raises(ExerciseFailed, match=r"\(96000, 4, 100, 72000\): this budget is below "
                       "one averaging"):
        check_local_sgd_h(lambda nbytes, p, steps, budget: min(
            steps, _h_right(nbytes, p, steps, budget)))


@pytest.mark.parametrize("fn, said", [
    (lambda nbytes, p, steps, budget: _h_right(8 * nbytes, p, steps, budget),
     "do not count bits"),
    (lambda nbytes, p, steps, budget: steps,
     "your H does not depend on nbytes: the bytes per averaging come from it"),
    (lambda nbytes, p, steps, budget: _h_right(nbytes, 16, steps, budget),
     r"your H does not depend on p: the ring's factor \(p−1\)/p comes from it"),
])
def test_local_sgd_h_says_the_notebook_only_when_it_is_the_notebook(fn, said):
    with pytest.raises(ExerciseFailed, match=said) as failed:
        check_local_sgd_h(fn)
    assert "notebook" not in str(failed.value)


def _h_with(per_round):
    """The search with a slip's bytes per averaging."""
    return lambda nbytes, p, steps, budget: next(
        h for h in range(1, steps + 2) if steps // h * per_round(nbytes, p) <= budget + 0.5)


def test_local_sgd_h_names_the_slip_and_refuses_the_package():
    from course_utils.training.strategies import local_sgd_bytes
    from course_utils.training.train import train

    def averagings(nbytes, p, budget):
        return budget // (2 * (p - 1) / p * nbytes)

    cases = [
        (None, "my_local_sgd_h is not defined"),
        (lambda nbytes, p, steps, budget: -(-steps // averagings(nbytes, p, budget)),
         r"steps // H times .*not steps / H"),
        (lambda nbytes, p, steps, budget: steps // averagings(nbytes, p, budget),
         "a smaller H may too: find the smallest"),
        (lambda nbytes, p, steps, budget: -(-steps // (averagings(nbytes, p, budget) + 1)),
         r"that H averages m \+ 1 times"),
        (lambda nbytes, p, steps, budget: int(
            steps // (budget / (2 * (p - 1) / p * nbytes) + 1)) + 1, "whole averagings only"),
        (_h_with(lambda nbytes, p: 2 * nbytes), r"\(p−1\)/p is missing"),
        (_h_with(lambda nbytes, p: (p - 1) / p * nbytes), "both passes"),
        (_h_with(lambda nbytes, p: 8 * (p - 1) / p * nbytes), "do not multiply by 4"),
        (_h_with(lambda nbytes, p: 2 * p / (p - 1) * nbytes), r"not p/\(p−1\)"),
        (lambda nbytes, p, steps, budget: _h_right(nbytes, jax.device_count(), steps, budget),
         "use the argument p, not N_DEVICES"),
        (lambda nbytes, p, steps, budget: _h_right(4 * 10752, 4, steps, budget),
         "does not change with the argument nbytes: use the arguments, not this notebook's n"),
        (lambda nbytes, p, steps, budget: _h_right(nbytes, p, steps, budget) + 1,
         "a smaller H also stays within the budget"),
        (lambda nbytes, p, steps, budget: _h_right(nbytes, p, steps, budget) + 0.5,
         "a whole number of steps"),
        (lambda nbytes, p, steps, budget: "8", "a whole number of steps"),
        (lambda nbytes, p, steps, budget: max(1, _h_right(nbytes, p, steps, budget) - 1),
         "above the budget"),
        (lambda nbytes, p, steps, budget: next(
            h for h in range(1, steps + 1) if local_sgd_bytes(nbytes, p, steps, h) <= budget),
         "calls local_sgd_bytes"),
        (lambda nbytes, p, steps, budget: train(None, "local_sgd", steps=steps), "calls train"),
        (lambda nbytes, p, steps: 1, "raised TypeError"),
    ]
    for fn, message in cases:
        with pytest.raises(ExerciseFailed, match=message):
            check_local_sgd_h(fn)


STEP_17 = {"hosts": 2, "devices": 4, "nbytes": 16 * 2**20, "rate_bits": 1e9}  # its exercise
