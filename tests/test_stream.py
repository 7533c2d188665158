"""The stream task (``problems.stream``): fresh rows of the mixture every step, the same rows
for strategies on as many devices, a fixed held-out sample, the floor; bad input refused."""

import numpy as np
import pytest

from course_utils import data_mesh, replica_mesh, train
from course_utils.problems.classification import (
    PART_THREE_MLP,
    classification_task,
    init_params,
    padded_size,
)
from course_utils.problems.stream import bayes_loss, heldout_rows, stream_rows, task_centres
from course_utils.training.batches import StreamBatches
from course_utils.training.optimizers import adamw, momentum, warmup_cosine

STREAM = {"steps": 6, "batch_size": 32, "heldout_every": 3, "stream": True}

def test_every_step_and_every_device_draws_new_rows_of_the_mixture():
    centres = task_centres()
    x, y = classification_task(0)
    seen = {stream_rows(centres, PART_THREE_MLP, seed=0, step=t, block=d, rows=64)[0].tobytes()
            for t in range(3) for d in range(4)}
    assert len(seen) == 12  # no two (step, device) blocks alike
    big_x, big_y = stream_rows(centres, PART_THREE_MLP, seed=0, step=0, block=0, rows=40_000)
    for k in range(PART_THREE_MLP.classes):  # the fixed task's centres and noise
        assert np.abs(big_x[big_y == k].mean(axis=0) - x[y == k].mean(axis=0)).max() < 0.2
    assert abs(big_x[big_y == 0].std() - x[y == 0].std()) < 0.05
    held, again = heldout_rows(), heldout_rows()
    assert np.array_equal(held[0], again[0])
    assert not {r.tobytes() for r in held[0]} & {r.tobytes() for r in big_x}  # no row shared

def test_strategies_on_as_many_devices_see_the_same_rows_at_each_step():
    flat, replicas = data_mesh(), replica_mesh()
    a = StreamBatches(flat, "data", PART_THREE_MLP, batch_size=8, seed=3)
    b = StreamBatches(replicas, ("host", "device"), PART_THREE_MLP, batch_size=8, seed=3)
    for _ in range(3):
        xa, ya = a.next()
        xb, yb = b.next()
        np.testing.assert_array_equal(np.asarray(xa), np.asarray(xb))
        np.testing.assert_array_equal(np.asarray(ya), np.asarray(yb))
    other = StreamBatches(flat, "data", PART_THREE_MLP, batch_size=8, seed=4).next()[0]
    assert not np.array_equal(np.asarray(other), np.asarray(xa))

def test_a_stream_run_repeats_exactly_and_learns_towards_the_floor():
    mesh = data_mesh()
    first = train(mesh, "data_parallel", **STREAM)
    again = train(mesh, "data_parallel", **STREAM)
    assert first.heldout_loss == again.heldout_loss and first.loss == again.loss
    other = train(mesh, "data_parallel", **{**STREAM, "seed": 1})
    assert other.loss != first.loss
    floor, error = bayes_loss(rows=50_000)
    assert error < 0.005 and 0.25 < floor < 0.4
    assert floor < first.heldout_loss[-1][1] < first.heldout_loss[0][1] < np.log(8) + 0.2
    assert first.final_loss == pytest.approx(first.heldout_loss[-1][1], rel=1e-6)

def test_diloco_runs_on_the_stream_under_a_warm_up_and_cosine_schedule():
    schedule = adamw(warmup_cosine(1e-3, steps=6, warmup=2))
    run = train(replica_mesh(), "diloco", local_steps=3, optimizer=schedule, **STREAM)
    assert len(run.heldout_loss) == 2 and run.averaged_loss is not None
    assert run.heldout_loss != train(replica_mesh(), "diloco", local_steps=3,
                                     **STREAM).heldout_loss
    first = train(data_mesh(), "data_parallel", optimizer=schedule, **{**STREAM, "steps": 1,
                                                                          "heldout_every": None})
    n = first.params.size  # the schedule's first step has learning rate 0: nothing moves
    np.testing.assert_array_equal(first.params, init_params(padded_size(4), 0)[:n])

def test_a_skewed_stream_gives_each_device_its_share_of_the_classes():
    batches = StreamBatches(data_mesh(), "data", PART_THREE_MLP, batch_size=64, seed=0, skewed=True)
    y = np.asarray(batches.first[1]).reshape(4, 64)  # 8 classes over 4 devices
    assert [sorted(set(row.tolist())) for row in y] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    run = train(replica_mesh(), "diloco", local_steps=3, skewed=True, **STREAM)
    assert run.heldout_loss != train(replica_mesh(), "diloco", local_steps=3,
                                     **STREAM).heldout_loss
    with pytest.raises(ValueError, match="cannot be shared out over 9 blocks"):
        stream_rows(task_centres(), PART_THREE_MLP, seed=0, step=0, block=0, rows=4, skewed_of=9)


@pytest.mark.parametrize("options, message", [
    ({"batch_size": None}, "give batch_size"),
    ({"stream": "yes"}, "stream must be True or False"),
])
def test_bad_stream_options_are_refused_in_one_line(options, message):
    with pytest.raises(ValueError, match=message):
        train(data_mesh(), "data_parallel", **{**STREAM, **options})


def test_a_warm_start_continues_the_stream_where_the_first_run_stopped():
    sgd = momentum(0.05, 0.0)  # no optimizer state: two halves make the same run
    mesh, options = data_mesh(), {**STREAM, "optimizer": sgd}
    whole = train(mesh, "data_parallel", **options)
    half = train(mesh, "data_parallel", **{**options, "steps": 3})
    rest = train(mesh, "data_parallel", start=half.params, first_step=3,
                 **{**options, "steps": 3})
    np.testing.assert_allclose(rest.params, whole.params, rtol=1e-6, atol=1e-7)
    assert [s for s, _ in rest.heldout_loss] == [6]
    diloco = train(replica_mesh(), "diloco", local_steps=3, start=half.params, first_step=3,
                   **{**STREAM, "steps": 3})
    assert diloco.heldout_loss[0][0] == 6 and diloco.heldout_loss[0][1] < half.heldout_loss[0][1]
    with pytest.raises(ValueError, match="start from a run on as many devices"):
        train(mesh, "data_parallel", start=half.params[:-4], **STREAM)
    with pytest.raises(ValueError, match="give stream=True"):
        train(mesh, "data_parallel", first_step=3, steps=2)
