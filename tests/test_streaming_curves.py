"""Streaming DiLoCo's saved curves (``results.streaming``, ``saved/streaming.json``): the plan it
holds, its first steps as the code trains them, and the target read from it."""

import pytest

from course_utils.results.meta import Machine, RunMeta
from course_utils.results.records import save, saved_path
from course_utils.results.streaming import (
    BASELINE,
    CURVE_LOCAL_STEPS,
    CURVE_STEPS,
    CURVE_STRATEGIES,
    DATA_SEED,
    HELDOUT_EVERY,
    REPLICA_ROWS,
    SEEDS,
    StreamingCurves,
    bytes_of,
    curves_of,
    saved_streaming_curves,
    steps_to_target,
    streaming_target,
    train_streaming_curves,
)
from course_utils.results.training import HeldoutCurve
from course_utils.tools.cluster.diloco import DILOCO_PLANS
from course_utils.training.strategies import SPECS


def test_the_saved_run_is_the_plan_every_strategy_from_every_seed(tmp_path):
    saved = saved_streaming_curves()
    save(saved, tmp_path / "streaming.json")  # the file is what the writer writes
    assert (tmp_path / "streaming.json").read_text() == saved_path("streaming.json").read_text()
    assert (saved.local_steps, saved.steps, saved.heldout_every) == (
        CURVE_LOCAL_STEPS, CURVE_STEPS, HELDOUT_EVERY)
    # a replica's rows are a cluster host's: time to target is these steps × that step time
    assert saved.batch_size * saved.devices_per_replica == REPLICA_ROWS
    assert all(plan["batch_size"] == REPLICA_ROWS for plan in DILOCO_PLANS.values())
    assert CURVE_LOCAL_STEPS in DILOCO_PLANS["full"]["local_steps"]
    assert (saved.replicas, saved.devices_per_replica, saved.data_seed) == (2, 2, DATA_SEED)
    for strategy in CURVE_STRATEGIES:
        curves = curves_of(saved, strategy)
        assert list(curves) == list(range(SEEDS))
        for curve in curves.values():
            assert [s for s, _ in curve.heldout_loss] == list(range(HELDOUT_EVERY, CURVE_STEPS + 1,
                                                                    HELDOUT_EVERY))
        ends = [c.heldout_loss[-1][1] for c in curves.values()]
        assert len(set(ends)) == len(ends)  # the seeds draw different runs
    assert [b.strategy for b in saved.bytes] == list(CURVE_STRATEGIES)


def _first_seen(strategy: str) -> int:
    """The first evaluation that sees ``strategy``'s first change of its held-out parameters:
    data parallelism's first, else the first after its first merge (H/F + τ steps)."""
    sync = SPECS[strategy].sync
    if sync.outer is None:
        return HELDOUT_EVERY
    first_merge = CURVE_LOCAL_STEPS // sync.fragments + sync.overlap
    return -(-first_merge // HELDOUT_EVERY) * HELDOUT_EVERY


@pytest.mark.parametrize("strategy", CURVE_STRATEGIES)
def test_the_saved_curves_are_what_the_runner_trains_in_their_first_steps(strategy):
    from course_utils.training.diloco import replica_mesh

    saved = saved_streaming_curves()
    mesh = replica_mesh(saved.replicas)
    assert mesh.size == saved.replicas * saved.devices_per_replica
    curve = curves_of(saved, strategy)[0]
    fresh = train_streaming_curves(mesh, seeds=(0,), steps=_first_seen(strategy),
                                   strategies=(strategy,))  # seed 0 only: the others differ
    (run,) = fresh.curves
    first = curve.heldout_loss[:len(run.heldout_loss)]
    assert [s for s, _ in run.heldout_loss] == [s for s, _ in first]
    # a quantized sync rounds each value to a level: where another JAX release's float sums differ
    # in the last bits, a value on a level's edge lands one level over (4 bits: 1/7 of its block's
    # largest), which moves the held-out loss by about 2e-4 of itself (JAX 0.10.0 against 0.10.2)
    quantized = SPECS[strategy].sync.dtype != "float32"
    assert [loss for _, loss in run.heldout_loss] == pytest.approx([loss for _, loss in first],
                                                                   rel=1e-3 if quantized else 1e-4)
    if len(run.heldout_loss) > 1:  # past the first merge: the held-out parameters moved
        assert run.heldout_loss[-1][1] < run.heldout_loss[0][1]
    (sent,), saved_sent = fresh.bytes, bytes_of(saved, strategy)
    assert saved_sent.per_step == pytest.approx(sent.per_step)
    assert saved_sent.per_sync == (None if sent.per_sync is None else pytest.approx(sent.per_sync))


def _results(curves) -> StreamingCurves:
    meta = RunMeta("test", Machine("3", "0", "0"), 1.0)
    return StreamingCurves(meta, 2, 2, 8, 8, 50, 10, 0, tuple(curves), ())  # H = 8


def test_the_target_is_step_20_s_rule_with_data_parallelism_adamw_as_the_baseline():
    curves = [HeldoutCurve(BASELINE, 8, ((10, 0.8), (20, 0.6), (50, 0.1)), seed)
              for seed in (0, 1)]
    curves += [HeldoutCurve("diloco", 8, ((10, 0.9), (20, 0.8), (50, 0.6)), 0),
               HeldoutCurve("diloco", 8, ((10, 0.9), (20, 0.7), (50, 0.7)), 1)]
    results = _results(curves)
    assert streaming_target(results) == pytest.approx(0.8)  # at 0.2 · 50 steps
    assert streaming_target(results, fraction=0.3) == pytest.approx(0.7)  # halfway, step 15
    assert steps_to_target(results, BASELINE, 0.7) == pytest.approx({0: 15.0, 1: 15.0})
    assert steps_to_target(results, BASELINE, 0.05) == {0: None, 1: None}
    # DiLoCo's synced loss moves at its syncs (every H = 8): the sync the evaluation first sees
    assert steps_to_target(results, "diloco", 0.75) == {0: 48, 1: 16}
    assert steps_to_target(results, "diloco", 0.65) == {0: 48, 1: None}
    assert steps_to_target(results, "diloco", 0.75, interpolate=False) == {0: 50, 1: 20}
    with pytest.raises(ValueError, match="no curve of 'streaming_diloco'; the run has "
                                         "dp_adamw, diloco"):
        curves_of(results, "streaming_diloco")
    # Streaming DiLoCo's fragments (F = 4, τ = 1) merge after steps 3, 5, 7, …: seen at 20, 19
    streaming = _results([HeldoutCurve("streaming_diloco", 8, ((10, 0.9), (20, 0.5)), 0)])
    assert steps_to_target(streaming, "streaming_diloco", 0.75) == {0: 19}
