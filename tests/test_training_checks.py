"""The self-checks of steps 14-16 pass right answers and name what is wrong in wrong ones."""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.local_sgd import check_local_sgd_h
from course_utils.checks.training import check_int8_feedback, check_memory_prediction
from course_utils.training.run import Memory

N, P = 1024, 4
WHOLE, PIECE = 4 * N, 4 * N // P
MEASURED = {
    "data_parallel": Memory(parameters=WHOLE, gradients=WHOLE, optimizer=WHOLE),
    "zero1": Memory(parameters=WHOLE, gradients=WHOLE, optimizer=PIECE),
    "zero2": Memory(parameters=WHOLE, gradients=PIECE, optimizer=PIECE),
    "zero3": Memory(parameters=PIECE, gradients=PIECE, optimizer=PIECE),
}
RIGHT = {s: sum(memory.parts().values()) for s, memory in MEASURED.items()}


def right_memory(n, p):
    return {"data_parallel": 12 * n, "zero1": 8 * n + 4 * n // p, "zero2": 4 * n + 8 * n / p,
            "zero3": np.int64(12 * n // p)}


def test_memory_right_and_wrong(capsys):
    check_memory_prediction(right_memory, MEASURED, N, P)
    assert "PASSED" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match="predicted_memory is not defined"):
        check_memory_prediction(None, MEASURED, N, P)
    cases = [
        ({"zero1": 1}, "exactly the keys .*: it lacks 'data_parallel', 'zero2', 'zero3'$"),
        ({**RIGHT, "ZeRO-1": 1, "fsdp": 2}, "'ZeRO-1', 'fsdp' are not asked for$"),
        ({**RIGHT, "zero2": "a lot"}, "zero2: give a number of bytes"),
        ({**RIGHT, "zero3": RIGHT["zero3"] / 4}, r"4× too small; count bytes \(4 per float32"),
        ({**RIGHT, "zero3": RIGHT["zero3"] / 2**10}, "1024× too small; give bytes, not KiB"),
        ({**RIGHT, "zero2": 3 * WHOLE}, r"counts 0 of the three parts as 1/p slices; zero2 "
         r"keeps gradients and the momentum \(optimizer state\) in"),
        ({**RIGHT, "zero1": RIGHT["zero2"]}, r"counts 2 of the three parts as 1/p slices; zero1 "
         r"keeps the momentum \(optimizer state\) in slices of n/p$"),
        ({**RIGHT, "data_parallel": RIGHT["zero1"]},
         "data_parallel keeps nothing in slices of n/p, every part whole$"),
        ({**RIGHT, "zero3": 2 * WHOLE},  # no count of slices gives it: no part named
         r"zero3: .*; add what one device holds, in bytes, of the parameters, the gradient and "
         r"the momentum, each whole \(4n\) or in a slice \(4n/p\)$"),
        ({**RIGHT, "zero1": RIGHT["zero1"] * P}, "all p devices together: give what ONE"),
        ({**RIGHT, "zero3": RIGHT["zero3"] + 1}, "zero3: .*; add what one device holds"),
        ({**RIGHT, "zero3": 8 * RIGHT["zero3"]}, "8× too large; count bytes, not bits$"),
        # at p = 4, slicing everything in one stage gives what counting values gives there:
        # the slicing is named, and values only when every stage is off by the same 4
        ({**RIGHT, "data_parallel": RIGHT["zero3"]},
         r"data_parallel: it is 4× too small; that counts 3 of the three parts as 1/p slices; "
         "data_parallel keeps nothing in slices of n/p, every part whole$"),
        ({s: v / 4 for s, v in RIGHT.items()},
         r"data_parallel: it is 4× too small; count bytes \(4 per float32 value\), not values$"),
    ]
    for answer, message in cases:
        with pytest.raises(ExerciseFailed, match=message):
            check_memory_prediction(lambda n, p, answer=answer: answer, MEASURED, N, P)


def test_memory_typed_in_or_read_off_the_run_is_caught():
    cases = [
        (lambda n, p: RIGHT, r"right at this notebook's n = 1024, p = 4, but not at n = 4096, "
         r"p = 8 \(data_parallel, zero1, zero2, zero3\): write each stage's bytes in n and p"),
        (lambda n, p: {**right_memory(n, p), "zero1": 8 * N + N},
         r"not at n = 4096, p = 8 \(zero1\)"),
        (RIGHT, "predicted_memory is an object of type dict, not a function"),
        (lambda n: RIGHT, r"predicted_memory\(1024, 4\) raised TypeError"),
        (lambda n, p: list(RIGHT.values()), "returned a list; return a dict {stage: bytes}"),
    ]
    for answer, message in cases:
        with pytest.raises(ExerciseFailed, match=message):
            check_memory_prediction(answer, MEASURED, N, P)


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
