"""Part five's saved sweep (``results.diloco``, ``scripts/diloco_sweep.py``): made by the plan
and protocol it states, on the stream, its first steps what the code trains, read back through
typed records with one-line errors, and its band of targets reached by data parallelism."""

import json

import numpy as np
import pytest

from course_utils import replica_mesh, train
from course_utils.results.curves import HeldoutCurve, step_to
from course_utils.results.diloco import (
    DP,
    EVERY_H,
    PLAN,
    PROTOCOL,
    DilocoResults,
    pick_lr,
    saved_diloco_results,
    sweep_band,
    sweep_cost,
    sweep_curves,
)
from course_utils.results.records import load, saved_path
from course_utils.training.optimizers import (
    ADAMW_LR,
    OUTER_LR,
    OUTER_MOMENTUM,
    scheduled_adamw,
)

SAVED = saved_diloco_results()


def test_the_sweep_is_the_plan_s_and_its_protocol_picked_the_learning_rate_in_use():
    assert (SAVED.plan, SAVED.protocol) == (PLAN, PROTOCOL)
    assert (SAVED.adamw_lr, SAVED.outer_lr, SAVED.outer_momentum) == (
        ADAMW_LR, OUTER_LR, OUTER_MOMENTUM)
    assert [(r.lr, r.seed) for r in SAVED.lr_runs] == [(lr, seed) for lr in PLAN.lr_grid
                                                       for seed in PLAN.seeds]
    pick = pick_lr(SAVED.lr_runs)
    assert pick.picked == ADAMW_LR and pick.picked in pick.tied and pick.winner in pick.tied
    assert min(PLAN.lr_grid) < ADAMW_LR < max(PLAN.lr_grid)  # not at the grid's edge
    for skewed in (False, True):
        for strategy, h in [(DP, 1)] + [(s, h) for s in EVERY_H for h in PLAN.local_steps]:
            curves = sweep_curves(SAVED, strategy, h, skewed)
            assert list(curves) == list(PLAN.seeds)
            for curve in curves.values():  # the training loss at the held-out's steps
                assert [s for s, _ in curve.train_loss] == [s for s, _ in curve.heldout_loss]
    kinds = [{"warm_start": PLAN.warm_start}] * len(PLAN.local_steps)
    runs = [("diloco", h, kind) for h, kind in zip(PLAN.local_steps, kinds)] + [
        ("diloco", PLAN.attribution_h, {"replicas": r}) for r in PLAN.attribution_replicas]
    for strategy, h, kind in runs + [(s, h, {}) for s in EVERY_H for h in PLAN.local_steps]:
        for curve in sweep_curves(SAVED, strategy, h, False, **kind).values():
            syncs = len(curve.heldout_loss)  # evaluated at every sync
            assert syncs >= 8 and curve.heldout_loss[-1][0] == PLAN.steps


def _lr_runs(lows: dict[float, list[float]]) -> tuple[HeldoutCurve, ...]:
    """Made-up protocol runs: each seed's curve falls to its ``lows`` value, then rises."""
    return tuple(HeldoutCurve(DP, 16, ((16, 1.0), (32, low), (48, low + 0.1)), seed, lr=lr)
                 for lr, seeds in lows.items() for seed, low in enumerate(seeds))


def test_the_protocol_picks_the_lowest_seed_mean_minimum_and_of_ties_the_largest_rate():
    apart = pick_lr(_lr_runs({1e-4: [0.5, 0.6], 3e-4: [0.30, 0.32], 1e-3: [0.33, 0.35]}))
    assert (apart.winner, apart.tied, apart.picked) == (3e-4, (3e-4,), 3e-4)  # ranges apart
    tie = pick_lr(_lr_runs({1e-4: [0.5, 0.6], 3e-4: [0.30, 0.34], 1e-3: [0.33, 0.37]}))
    assert (tie.winner, tie.tied, tie.picked) == (3e-4, (3e-4, 1e-3), 1e-3)  # the larger kept
    smaller = pick_lr(_lr_runs({1e-4: [0.31, 0.36], 3e-4: [0.30, 0.32], 1e-3: [0.40, 0.41]}))
    assert (smaller.tied, smaller.picked) == ((1e-4, 3e-4), 3e-4)  # a smaller tie: the winner
    # the minimum over the run, not the end: the curves rise by 0.1 after their lowest point
    assert [s.range for s in tie.scores][1] == (0.30, 0.34)


def test_on_the_stream_data_parallelism_does_not_rise_and_reaches_every_target_of_the_band():
    band = sweep_band()
    assert band.floor < band.targets[-1] < band.targets[0] < band.start
    for skewed in (False, True):
        curves = sweep_curves(SAVED, DP, 1, skewed).values()
        ends = [c.heldout_loss[-1][1] for c in curves]
        rises = [end - min(x for _, x in c.heldout_loss) for end, c in zip(ends, curves)]
        assert max(rises) <= max(ends) - min(ends)  # within the seeds' range at the end
        for target in band.targets:
            assert all(step_to(c, target, read="evaluated", stay=True) for c in curves)


@pytest.mark.parametrize("strategy, h, skewed, seed, steps, replicas", [
    (DP, 1, False, 0, 16, None), ("diloco", 8, True, 1, 16, None),
    ("local_sgd_adamw", 32, False, 2, 32, None), ("diloco_sgd", 8, False, 1, 16, None),
    ("diloco_unit_step", 8, True, 2, 16, None), ("diloco", 32, False, 0, 32, 1)])
def test_the_saved_curves_are_what_the_code_trains_in_their_first_steps(strategy, h, skewed,
                                                                        seed, steps, replicas):
    mesh = replica_mesh(replicas or PLAN.replicas)
    assert mesh.size == PLAN.devices
    every = PLAN.heldout_every if h == 1 else h
    options = {} if h == 1 else {"local_steps": h}
    run = train(mesh, strategy, steps=steps, batch_size=PLAN.batch_size, seed=seed,
                data_seed=PLAN.data_seed, skewed=skewed, heldout_every=every, stream=True,
                optimizer=scheduled_adamw(PLAN.steps), **options)
    curve = sweep_curves(SAVED, strategy, h, skewed, replicas=replicas)[seed]
    saved = curve.heldout_loss[:len(run.heldout_loss)]
    assert [s for s, _ in run.heldout_loss] == [s for s, _ in saved]
    np.testing.assert_allclose([v for _, v in run.heldout_loss], [v for _, v in saved], rtol=1e-4)
    trained = ([loss for _, loss in run.averaged_loss] if h > 1 else  # exact, or a window's mean
               [np.mean(run.loss[s - every:s]) for s, _ in run.heldout_loss])
    np.testing.assert_allclose(trained, [v for _, v in curve.train_loss[:len(trained)]],
                               rtol=1e-4)


def test_the_protocol_s_first_run_and_a_warm_start_are_what_the_code_trains():
    run = train(replica_mesh(PLAN.replicas), DP, steps=PLAN.heldout_every, seed=PLAN.seeds[0],
                batch_size=PLAN.batch_size, data_seed=PLAN.data_seed, stream=True,
                heldout_every=PLAN.heldout_every,
                optimizer=scheduled_adamw(PLAN.steps, PLAN.lr_grid[0]))
    assert run.heldout_loss[0][1] == pytest.approx(SAVED.lr_runs[0].heldout_loss[0][1], rel=1e-4)
    mesh, warm, h = replica_mesh(PLAN.replicas), PLAN.warm_start, PLAN.local_steps[0]
    common = {"batch_size": PLAN.batch_size, "data_seed": PLAN.data_seed, "stream": True}
    first = train(mesh, DP, steps=warm, optimizer=scheduled_adamw(PLAN.steps), **common)
    run = train(mesh, "diloco", steps=h, local_steps=h, heldout_every=h, start=first.params,
                first_step=warm, optimizer=scheduled_adamw(PLAN.steps, offset=warm), **common)
    saved = sweep_curves(SAVED, "diloco", h, False, warm_start=warm)[0].heldout_loss[0]
    assert run.heldout_loss[0][0] == saved[0] == warm + h
    assert run.heldout_loss[0][1] == pytest.approx(saved[1], rel=1e-4)


def test_diloco_sends_a_h_th_of_data_parallelism_s_bytes_and_a_missing_run_is_named():
    cost = sweep_cost(SAVED, "diloco", 32)
    assert cost.bytes_across_replicas == pytest.approx(
        sweep_cost(SAVED, DP, 1).bytes_across_replicas / 32, rel=0.05)
    with pytest.raises(ValueError, match="no run of diloco at H=16, skewed=False in the sweep"):
        sweep_curves(SAVED, "diloco", 16, False)
    with pytest.raises(ValueError, match="skewed=False, replicas=3 in the sweep"):
        sweep_curves(SAVED, "diloco", 32, False, replicas=3)


def test_a_bad_file_is_named_in_one_line_with_the_command(tmp_path):
    data = json.loads(saved_path("diloco.json").read_text())
    del data["plan"]["steps"]
    (tmp_path / "diloco.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="diloco.json: plan.steps: missing") as error:
        load(DilocoResults, tmp_path / "diloco.json")
    assert "\n" not in str(error.value)
