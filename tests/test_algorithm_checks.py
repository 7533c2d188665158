"""The ring-step self-check passes a step of the reversed ring and names what is wrong in typical
ones."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from course_utils import (
    bucketed_step_time,
    collective_time,
    data_mesh,
    plan_buckets,
    reduce_scatter_step,
)
from course_utils.checks.algorithms import check_bucket_model
from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.ring import check_ring_step
from course_utils.collectives.ring import encoded_step, ring_reduce_scatter, ring_scatter_sum


def _step(send_to, chunk, also=None):
    """A ring step that sends to ``send_to(j, p)`` and adds its own chunk ``chunk(i, s, p)``."""

    def step(partial, chunks, s, axis_name):
        p, i = chunks.shape[0], jax.lax.axis_index(axis_name)
        received = partial
        if send_to:
            pairs = [(j, send_to(j, p)) for j in range(p)]
            received = jax.lax.ppermute(partial, axis_name, pairs)
        extra = also(partial, axis_name) if also else 0
        return received + chunks[chunk(i, s, p)] + extra

    return step


def _previous(j, p):
    return (j - 1) % p


def _arrived(i, s, p):  # the received partial sum's chunk, on the ring i → i − 1
    return (i + s + 2) % p


RIGHT = _step(_previous, _arrived)


def _model_axis(partial, chunks, s, axis_name):
    """The right step with the axis name typed in, and wrong: 'model'."""
    p, i = chunks.shape[0], jax.lax.axis_index(axis_name)
    pairs = [(j, (j - 1) % p) for j in range(p)]
    return jax.lax.ppermute(partial, "model", pairs) + chunks[(i + s + 2) % p]


def _data_axis(partial, chunks, s, axis_name):
    """The right step with the notebook's axis name typed in instead of the argument."""
    p, i = chunks.shape[0], jax.lax.axis_index("data")
    pairs = [(j, (j - 1) % p) for j in range(p)]
    return jax.lax.ppermute(partial, "data", pairs) + chunks[(i + s + 2) % p]


def _four_typed_in(partial, chunks, s, axis_name):
    """The right step with this notebook's p typed in."""
    p, i = 4, jax.lax.axis_index(axis_name)
    pairs = [(j, (j - 1) % p) for j in range(p)]
    return jax.lax.ppermute(partial, axis_name, pairs) + chunks[(i + s + 2) % p]


axis = "data"  # as the notebook's own global


def _notebook_axis(partial, chunks, s, axis_name):
    """The right step with the notebook's ``axis`` global instead of the argument."""
    p, i = chunks.shape[0], jax.lax.axis_index(axis)
    pairs = [(j, (j - 1) % p) for j in range(p)]
    return jax.lax.ppermute(partial, axis, pairs) + chunks[(i + s + 2) % p]


def _whole_loop(partial, chunks, s, axis_name):
    """The package's whole loop, run the other way, inside the step."""
    return ring_scatter_sum(chunks, axis_name, direction=-1)


def _wrapper(partial, chunks, s, axis_name):
    """A wrapper around the package's step, which the exercise forbids."""
    return reduce_scatter_step(partial, chunks, s, axis_name)


PREBUILT = encoded_step(lambda c: c, lambda c: c)  # the package's step, built outside my_step


def _around_prebuilt(partial, chunks, s, axis_name):
    return PREBUILT(partial, chunks, s, axis_name)


# (the page's common wrong answers: tests/test_mistakes.py)
WRONG = [
    (_step(None, _arrived), "no device receives anything"),
    (_step(_previous, lambda i, s, p: (i + s + 1) % p), "added to the wrong chunk"),
    (_step(_previous, _arrived, also=lambda x, a: x), "counted more than once"),
    (_step(_previous, _arrived, also=lambda x, a: jax.lax.psum(x, a)), "the program has"),
    (lambda partial, chunks, s, axis_name: chunks, "must return one chunk"),
    (lambda partial, chunks, s, axis_name: 1 / 0, "raised ZeroDivisionError"),
    (_step(lambda j, p: (j + 1) % p, lambda i, s, p: (i - s - 2) % p), "the page's ring; this "
                                                                       "ring runs the other way"),
    (_model_axis, "names the axis 'model', but the mesh's only axis is 'data'"),
    (_notebook_axis, "reads the notebook's axis for the axis"),
    (_whole_loop, "uses the package's ring_scatter_sum"),
    (_four_typed_in, "right on 4 devices but wrong on 3"),
    (reduce_scatter_step, "uses the package's reduce_scatter_step"),
    (_wrapper, "uses the package's reduce_scatter_step"),
    (jax.jit(reduce_scatter_step, static_argnums=(2, 3)), "uses the package's reduce_scatter_s"),
    (PREBUILT, "uses the package's encoded_step"),
    (_around_prebuilt, "uses the package's encoded_step"),
    (None, "my_step is not defined"),
    (3, "object of type int, not a function"),
    (lambda partial, chunks, s, axis_name: jax.lax.ppermute(  # passed on, nothing added
        partial, axis_name, [(j, (j - 1) % chunks.shape[0]) for j in range(chunks.shape[0])]),
     "nothing is added"),
    (lambda partial, chunks, s, axis_name: (partial, chunks), "must return one array"),
    (_data_axis, "names the axis 'data' itself: the check runs it on a mesh whose axis is "
                 "called 'ring_data'"),
]


def test_a_step_written_by_hand_passes(capsys):
    check_ring_step(RIGHT, data_mesh())
    out = capsys.readouterr().out
    assert "PASSED: one step of the reversed ring (3 steps" in out
    assert "right on 3 devices too" in out


@pytest.mark.parametrize("p", [1, 2, 3])
def test_below_4_devices_a_right_step_is_not_verified(capsys, p):
    # at 2 devices the two rings are one swap; at 3 some wrong chunk indices sum right
    mesh = Mesh(np.asarray(jax.devices()[:p]), ("data",))
    check_ring_step(RIGHT, mesh)
    out = capsys.readouterr().out
    assert out.startswith("NOT VERIFIED: one step of the reversed ring") and "PASSED" not in out
    if p == 2:  # the page's forward step is not told apart here either
        check_ring_step(_step(lambda j, q: (j + 1) % q, lambda i, s, q: (i - s - 2) % q), mesh)
        assert capsys.readouterr().out.startswith("NOT VERIFIED")


def test_the_reversed_ring_sums_every_chunk():
    mesh = data_mesh()
    p = mesh.size
    blocks = np.arange(p * 2 * p, dtype=np.float32).reshape(p, 2 * p)
    summed = ring_reduce_scatter(mesh, step=RIGHT, direction=-1)(blocks)
    np.testing.assert_allclose(np.asarray(summed), blocks.sum(axis=0).reshape(p, 2))
    with pytest.raises(ValueError, match="direction must be 1 or -1, got 0"):
        ring_reduce_scatter(mesh, direction=0)


@pytest.mark.parametrize("step, match", WRONG)
def test_wrong_steps_are_named(step, match):
    with pytest.raises(ExerciseFailed, match=match):
        check_ring_step(step, data_mesh())


SIZES = [2**16] * 64
MODEL = dict(ranks=8, alpha_s=5e-5, bandwidth_bytes_per_s=1e9, backward_s=0.01)
CANDIDATES = [2**14, 2**16, 2**18, 2**20, 2**22]


def _recurrence(overlap=True, wait=True, scale=1.0, by_count=False, algorithm="ring",
                sent=lambda nbytes, bucket_bytes: nbytes, alpha_once=False):
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
                                               alpha_s=0.0 if alpha_once else alpha_s,
                                               bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                                               algorithm=algorithm) + alpha_once * alpha_s
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
    (_recurrence(alpha_once=True), "α at each of its 2\\(p − 1\\) message steps, not once"),
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


