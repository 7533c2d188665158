"""train(): every strategy on the same task; ZeRO stages equal data parallelism, bf16 halves the
bytes, local SGD divides them by H, error feedback loses nothing; bad input is refused."""

import numpy as np
import pytest

from course_utils import (
    N_PARAMS,
    STRATEGIES,
    STRATEGY_STEPS,
    classification_task,
    data_mesh,
    padded_size,
    shard_shapes,
    topk_select,
    train,
)
from course_utils.problems.classification import init_params, loss_sum
from course_utils.training.batches import micro_batch_rows, split_task
from course_utils.training.strategies import Context, state_specs

EVERY_STRATEGY = """
from course_utils import train, STRATEGIES
mesh = data_mesh()
runs = {s: train(mesh, s, steps=6, local_steps=3 if s == "local_sgd" else 1)
        for s in STRATEGIES}
print(json.dumps({s: {"loss": r.loss, "bytes_per_step": r.bytes_per_step,
                      "memory": r.memory.parts(), "final_loss": r.final_loss,
                      "params": r.params.tolist(),
                      "ops": [(c.op, c.dtype) for c in r.collectives]}
                  for s, r in runs.items()}))
"""


@pytest.fixture(scope="module", params=[2, 4, 8])
def runs(request, run_with_devices):
    return request.param, run_with_devices(request.param, EVERY_STRATEGY)


def test_every_zero_stage_follows_the_data_parallel_run(runs):
    _, r = runs
    dp = r["data_parallel"]
    for stage in ("zero1", "zero2", "zero3", "zero3_regather"):
        np.testing.assert_allclose(r[stage]["loss"], dp["loss"], rtol=1e-5)
        np.testing.assert_allclose(r[stage]["params"], dp["params"], rtol=1e-4, atol=1e-6)
    assert dp["loss"][-1] < dp["loss"][0]


def test_bytes_per_step_follow_the_ring_payload(runs):
    p, r = runs
    n_bytes = 4 * padded_size(p)
    dp = r["data_parallel"]["bytes_per_step"]
    assert dp == pytest.approx(2 * (p - 1) / p * n_bytes)
    for stage in ("zero1", "zero2", "zero3"):
        assert r[stage]["bytes_per_step"] == pytest.approx(dp)
    assert r["zero3_regather"]["bytes_per_step"] == pytest.approx(1.5 * dp)
    assert r["bf16"]["bytes_per_step"] == pytest.approx(dp / 2)
    assert ("all-gather", "u16") in [tuple(o) for o in r["bf16"]["ops"]]
    assert ("all-to-all", "s8") in [tuple(o) for o in r["int8"]["ops"]]
    assert r["int8"]["bytes_per_step"] == pytest.approx(dp / 4 * (1 + 4 / 64))
    # local SGD: 6 steps, averaged after steps 3 and 6, each averaging one all-reduce
    assert r["local_sgd"]["bytes_per_step"] == pytest.approx(dp / 3)


def test_memory_per_device_is_read_from_the_shards(runs):
    p, r = runs
    whole, piece = 4 * padded_size(p), 4 * padded_size(p) // p
    expected = {
        "data_parallel": (whole, whole, whole),
        "zero1": (whole, whole, piece),
        "zero2": (whole, piece, piece),
        "zero3": (piece, piece, piece),
        "topk_ef": (whole, whole, 2 * whole),
    }
    for strategy, (params, grads, optimizer) in expected.items():
        assert r[strategy]["memory"] == {"parameters": params, "gradients": grads,
                                         "optimizer": optimizer}, strategy


def test_compressed_runs_still_learn(runs):
    _, r = runs
    for strategy in ("bf16", "int8", "topk_ef", "powersgd", "local_sgd"):
        assert r[strategy]["final_loss"] < r[strategy]["loss"][0], strategy


def test_error_feedback_loses_nothing():
    rng = np.random.default_rng(0)
    g, residual = rng.standard_normal((2, 1000)).astype(np.float32)
    acc = g + residual
    sent, kept, indices = topk_select(acc, 10)
    new_residual = acc - sent
    assert np.array_equal(np.asarray(sent) + np.asarray(new_residual), acc)
    assert np.count_nonzero(np.asarray(sent)) == 10
    assert set(np.asarray(indices).tolist()) == set(np.argsort(-np.abs(acc))[:10].tolist())
    np.testing.assert_array_equal(np.asarray(kept), acc[np.asarray(indices)])


def test_the_task_is_deterministic_and_its_skewed_shards_see_few_classes():
    x1, y1 = classification_task(3)
    x2, y2 = classification_task(3)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    _, skewed = classification_task(3, skewed=True)
    quarter = len(skewed) // 4
    assert len(set(skewed[:quarter].tolist())) <= 3
    assert padded_size(4) % (4 * 64) == 0 and padded_size(4) >= N_PARAMS


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "zero4"}, "unknown strategy 'zero4'; choose one of"),
        ({"steps": 0}, "steps"),
        ({"local_steps": 4}, "local_steps applies to local_sgd"),
        ({"topk_fraction": 2.0}, "topk_fraction must be a number in (0, 1]"),
        ({"skewed": "yes"}, "skewed must be True or False"),
    ],
)
def test_bad_arguments_get_a_short_error(kwargs, message):
    args = {"strategy": "data_parallel", "steps": 1, **kwargs}
    strategy = args.pop("strategy")
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train(data_mesh(), strategy, **args)


def test_strategies_list_every_scheme_of_the_issue():
    assert {"data_parallel", "zero1", "zero2", "zero3", "bf16", "int8", "topk", "topk_ef",
            "powersgd", "local_sgd"} <= set(STRATEGIES)


def test_skewed_shards_hold_the_same_rows_in_another_order():
    x, y = classification_task(0)
    xs, ys = classification_task(0, skewed=True)
    assert sorted(map(tuple, np.c_[x, y].tolist())) == sorted(map(tuple, np.c_[xs, ys].tolist()))


# the options part four needs: minibatches, gradient accumulation as state, a held-out loss


@pytest.fixture(scope="module")
def mesh():
    return data_mesh()


def test_zero1_and_zero2_differ_by_the_gradient_their_state_keeps(mesh):
    n = padded_size(mesh.size)
    ctx = Context(mesh.axis_names[0], mesh.size, n, 15360, k=1)
    states = {s: STRATEGY_STEPS[s].init(init_params(n), mesh, ctx) for s in ("zero1", "zero2")}
    assert shard_shapes(states["zero1"].gradient) == [(n,)] * mesh.size
    assert shard_shapes(states["zero2"].gradient) == [(n // mesh.size,)] * mesh.size
    assert state_specs(states["zero1"]).momentum == state_specs(states["zero2"]).momentum
    run = train(mesh, "zero2", steps=1)
    assert run.memory.total == sum(run.memory.parts().values()) == 4 * n * (1 + 2 / mesh.size)


@pytest.mark.parametrize("strategy", ["data_parallel", "zero2", "topk_ef"])
def test_accumulating_k_micro_batches_of_the_shard_is_one_full_step(mesh, strategy):
    full = train(mesh, strategy, steps=3)
    accumulated = train(mesh, strategy, steps=3, accumulate=4)
    np.testing.assert_allclose(accumulated.loss, full.loss, rtol=1e-5)
    np.testing.assert_allclose(accumulated.params, full.params, rtol=1e-4, atol=1e-6)
    assert accumulated.bytes_per_step == full.bytes_per_step  # one communication per 4
    # the sum lives in the state: one more whole local gradient per device
    assert accumulated.memory.gradients == full.memory.gradients + 4 * padded_size(mesh.size)
    assert "accumulated" in accumulated.shards and "accumulated" not in full.shards


def test_minibatches_are_drawn_by_the_seed_and_the_whole_shard_is_the_full_batch(mesh):
    full = train(mesh, "data_parallel", steps=3)
    shard = len(classification_task()[1]) // mesh.size
    shuffled = train(mesh, "data_parallel", steps=3, batch_size=shard)  # every row, reordered
    np.testing.assert_allclose(shuffled.loss, full.loss, rtol=1e-5)
    small = [train(mesh, "data_parallel", steps=3, batch_size=32, seed=seed) for seed in (0, 0)]
    assert small[0].loss == small[1].loss
    assert not np.allclose(small[0].loss, full.loss, rtol=1e-3)
    other = train(mesh, "data_parallel", steps=3, batch_size=32, accumulate=2)
    assert other.loss != small[0].loss


def test_a_data_seed_keeps_the_rows_while_the_seed_draws_the_start_and_the_minibatches(mesh):
    kwargs = {"steps": 2, "batch_size": 32, "heldout_every": 2}
    default = train(mesh, "data_parallel", **kwargs)
    assert train(mesh, "data_parallel", data_seed=0, **kwargs).loss == default.loss
    other = train(mesh, "data_parallel", seed=1, data_seed=0, **kwargs)
    assert other.loss != default.loss
    # the same held-out rows: the loss of seed 1's parameters on seed 0's held-out rows
    _, _, (x_held, y_held) = split_task(0, skewed=False, heldout=True)
    want = float(loss_sum(other.params, x_held, y_held)) / len(y_held)
    assert other.heldout_loss[-1][1] == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="data_seed"):
        train(mesh, "data_parallel", steps=1, data_seed=-1)


def test_the_heldout_loss_is_the_loss_of_the_parameters_on_rows_held_out(mesh):
    run = train(mesh, "data_parallel", steps=4, heldout_every=2)
    assert [s for s, _ in run.heldout_loss] == [2, 4]
    _, y, (x_held, y_held) = split_task(0, skewed=False, heldout=True)
    assert len(y) + len(y_held) == len(classification_task()[1])
    want = float(loss_sum(run.params, x_held, y_held)) / len(y_held)
    assert run.heldout_loss[-1][1] == pytest.approx(want, rel=1e-5)
    assert run.heldout_loss[-1][1] != pytest.approx(run.final_loss, rel=1e-4)
    assert train(mesh, "data_parallel", steps=1).heldout_loss is None


def test_micro_batches_cut_each_shard_and_minibatches_stay_in_it():
    rng = np.random.default_rng(0)
    pieces = [micro_batch_rows(12, 2, batch_size=None, accumulate=3, micro=j, rng=rng)
              for j in range(3)]
    assert sorted(np.concatenate(pieces).tolist()) == list(range(12))
    drawn = micro_batch_rows(12, 2, batch_size=4, accumulate=1, micro=0, rng=rng)
    assert all(r < 6 for r in drawn[:4]) and all(r >= 6 for r in drawn[4:])
    assert len(set(drawn.tolist())) == 8


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"strategy": "zero3", "accumulate": 2}, "accumulate does not apply to zero3; use one of"),
        ({"accumulate": 7}, "accumulate=7 does not divide a device's 3840 rows"),
        ({"accumulate": 0}, "accumulate must be a positive integer"),
        ({"batch_size": 3841}, "batch_size=3841 is more than a device's 3840 rows"),
        ({"batch_size": 0}, "batch_size must be a positive integer"),
        ({"heldout_every": 0}, "heldout_every must be a positive integer"),
    ],
)
def test_bad_batch_options_get_a_short_error(mesh, kwargs, message):
    args = {"strategy": "data_parallel", "steps": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        train(mesh, args.pop("strategy"), **args)
