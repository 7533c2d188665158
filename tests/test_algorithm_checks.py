"""The ring-step self-check passes the package's step and names what is wrong in typical ones."""

import jax
import pytest

from course_utils import (
    bucketed_step_time,
    collective_time,
    data_mesh,
    plan_buckets,
    reduce_scatter_step,
    ring_permutation,
)
from course_utils.checks.algorithms import check_bucket_model, check_ring_step
from course_utils.checks.helpers import ExerciseFailed
from course_utils.collectives.ring import encoded_step


def _step(send_to, chunk_offset, also=None):
    """A ring step that sends to ``send_to(j, p)`` and adds chunk ``i - s - chunk_offset``."""

    def step(partial, chunks, s, axis_name):
        p, i = chunks.shape[0], jax.lax.axis_index(axis_name)
        received = partial
        if send_to:
            pairs = [(j, send_to(j, p)) for j in range(p)]
            received = jax.lax.ppermute(partial, axis_name, pairs)
        extra = also(partial, axis_name) if also else 0
        return received + chunks[(i - s - chunk_offset) % p] + extra

    return step


def _backwards(partial, chunks, s, axis_name):
    """The ring run the other way round, each step adding the chunk that does arrive."""
    p, i = chunks.shape[0], jax.lax.axis_index(axis_name)
    received = jax.lax.ppermute(partial, axis_name, [(j, (j - 1) % p) for j in range(p)])
    return received + chunks[(i + s) % p]


def _model_axis(partial, chunks, s, axis_name):
    """The right step with the axis name typed in, and wrong: 'model'."""
    p, i = chunks.shape[0], jax.lax.axis_index(axis_name)
    return jax.lax.ppermute(partial, "model", ring_permutation(p)) + chunks[(i - s - 2) % p]


def _data_axis(partial, chunks, s, axis_name):
    """The right step with the notebook's axis name typed in instead of the argument."""
    p, i = chunks.shape[0], jax.lax.axis_index("data")
    return jax.lax.ppermute(partial, "data", ring_permutation(p)) + chunks[(i - s - 2) % p]


def _wrapper(partial, chunks, s, axis_name):
    """A wrapper around the package's step, which the exercise forbids."""
    return reduce_scatter_step(partial, chunks, s, axis_name)


PREBUILT = encoded_step(lambda c: c, lambda c: c)  # the package's step, built outside my_step


def _around_prebuilt(partial, chunks, s, axis_name):
    return PREBUILT(partial, chunks, s, axis_name)


# (the page's common wrong answers: tests/test_mistakes.py)
WRONG = [
    (_step(None, 2), "no device receives anything"),
    (_step(lambda j, p: (j + 1) % p, 1), "added to the wrong chunk"),
    (_step(lambda j, p: (j + 1) % p, 2, also=lambda x, a: x), "counted more than once"),
    (_step(lambda j, p: (j + 1) % p, 2, also=lambda x, a: jax.lax.psum(x, a)), "the program has"),
    (lambda partial, chunks, s, axis_name: chunks, "must return one chunk"),
    (lambda partial, chunks, s, axis_name: 1 / 0, "raised ZeroDivisionError"),
    (_backwards, "the ring runs backwards"),
    (_model_axis, "names the axis 'model', but the mesh's only axis is 'data'"),
    (reduce_scatter_step, "uses the package's reduce_scatter_step"),
    (_wrapper, "uses the package's reduce_scatter_step"),
    (jax.jit(reduce_scatter_step, static_argnums=(2, 3)), "uses the package's reduce_scatter_s"),
    (PREBUILT, "uses the package's encoded_step"),
    (_around_prebuilt, "uses the package's encoded_step"),
    (None, "my_step is not defined"),
    (3, "object of type int, not a function"),
    (lambda partial, chunks, s, axis_name: jax.lax.ppermute(  # passed on, nothing added
        partial, axis_name, ring_permutation(chunks.shape[0])), "nothing is added"),
    (lambda partial, chunks, s, axis_name: (partial, chunks), "must return one array"),
    (_data_axis, "names the axis 'data' itself: the check runs it on a mesh whose axis is "
                 "called 'ring_data'"),
]


def test_a_step_written_by_hand_passes(capsys):
    check_ring_step(_step(lambda j, p: (j + 1) % p, 2), data_mesh())
    assert "PASSED: one ring step (3 steps" in capsys.readouterr().out
    assert ring_permutation(4)[-1] == (3, 0)


@pytest.mark.parametrize("step, match", WRONG)
def test_wrong_steps_are_named(step, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_ring_step(step, data_mesh())


SIZES = [2**16] * 64
MODEL = dict(ranks=8, alpha_s=5e-5, bandwidth_bytes_per_s=1e9, backward_s=0.01)
CANDIDATES = [2**14, 2**16, 2**18, 2**20, 2**22]


def _recurrence(overlap=True, wait=True, scale=1.0, by_count=False, algorithm="ring",
                sent=lambda nbytes, bucket_bytes: nbytes):
    """The bucketed step time written by hand, and with a typical slip."""

    def model(sizes, bucket_bytes, ranks, alpha_s, bandwidth_bytes_per_s, backward_s):
        total, produced, finished = sum(sizes), 0, 0.0
        for bucket in plan_buckets(sizes, bucket_bytes):
            nbytes = sum(sizes[i] for i in bucket)
            produced += len(bucket) if by_count else nbytes
            share = produced / (len(sizes) if by_count else total)
            ready = backward_s * share if overlap else backward_s
            start = max(ready, finished) if wait else ready
            finished = start + collective_time(sent(nbytes, bucket_bytes), ranks,
                                               alpha_s=alpha_s,
                                               bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                                               algorithm=algorithm)
        return scale * max(finished, backward_s)

    return model


def _package_model(sizes, bucket_bytes, ranks, alpha_s, bandwidth_bytes_per_s, backward_s):
    return bucketed_step_time(sizes, bucket_bytes, ranks=ranks, alpha_s=alpha_s,
                              bandwidth_bytes_per_s=bandwidth_bytes_per_s, backward_s=backward_s)


@pytest.mark.parametrize("model, match", [
    (_recurrence(overlap=False), "no all-reduce overlaps the backward pass"),
    (_recurrence(wait=False), "also waits for the previous bucket's all-reduce"),
    (_recurrence(by_count=True), "bytes produced so far .* not to the number of gradients"),
    (_recurrence(algorithm="tree"), "timed as the ring .* not as tree"),
    (_recurrence(scale=1e6), "in microseconds"),
    (_recurrence(sent=lambda nbytes, cap: 8 * nbytes), "in bytes, not bits"),
    (_recurrence(sent=lambda nbytes, cap: cap), "not bucket_bytes, the most a bucket may hold"),
    (_recurrence(scale=1e3), "in milliseconds"),
    (_package_model, "uses the package's bucketed_step_time"),
    (lambda *args: 0.0157, "too (short|long)"),  # the worked example's answer, typed in
    (lambda *args: (1.0, 2.0), "one number"),
    (None, "my_step_time is not defined"),
])
def test_bucket_model_slips_are_named(model, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_bucket_model(model)


def test_bucket_model_passes(capsys):
    check_bucket_model(_recurrence())
    assert "PASSED: bucketed step time" in capsys.readouterr().out


