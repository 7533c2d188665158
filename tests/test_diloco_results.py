"""Part five's saved sweep (``results.diloco``, ``scripts/diloco_sweep.py``): made by the plan
and protocol it states, its first steps what the code trains, read back through typed records
with one-line errors, and the target rule step 20's."""

import json

import numpy as np
import pytest

from course_utils import adamw, replica_mesh, train
from course_utils.results.diloco import (
    DP,
    PLAN,
    PROTOCOL,
    DilocoResults,
    rows_to_target,
    saved_diloco_results,
    sweep_cost,
    sweep_curves,
    sweep_target,
)
from course_utils.results.records import load, saved_path
from course_utils.training.optimizers import ADAMW_LR, OUTER_LR, OUTER_MOMENTUM

SAVED = saved_diloco_results()


def test_the_sweep_is_the_plan_s_and_its_protocol_picked_the_learning_rate_in_use():
    assert (SAVED.plan, SAVED.protocol) == (PLAN, PROTOCOL)
    assert (SAVED.adamw_lr, SAVED.outer_lr, SAVED.outer_momentum) == (
        ADAMW_LR, OUTER_LR, OUTER_MOMENTUM)
    ends = {run.lr: run.heldout_loss[-1][1] for run in SAVED.lr_runs}
    assert list(ends) == list(PLAN.lr_grid) and min(ends, key=ends.get) == ADAMW_LR
    assert min(PLAN.lr_grid) < ADAMW_LR < max(PLAN.lr_grid)  # not at the grid's edge
    for skewed in (False, True):
        for strategy, h in [(DP, 1)] + [(s, h) for s in ("local_sgd_adamw", "diloco")
                                        for h in PLAN.local_steps]:
            assert list(sweep_curves(SAVED, strategy, h, skewed)) == list(PLAN.seeds)


@pytest.mark.parametrize("strategy, h, skewed, seed, steps", [
    (DP, 1, False, 0, 32), ("diloco", 8, True, 1, 16), ("local_sgd_adamw", 32, False, 2, 32)])
def test_the_saved_curves_are_what_the_code_trains_in_their_first_steps(strategy, h, skewed,
                                                                        seed, steps):
    mesh = replica_mesh(PLAN.replicas)
    assert mesh.size == PLAN.devices
    every = PLAN.heldout_every if h == 1 else h
    options = {} if h == 1 else {"local_steps": h}
    run = train(mesh, strategy, steps=steps, batch_size=PLAN.batch_size, seed=seed,
                data_seed=PLAN.data_seed, skewed=skewed, heldout_every=every, **options)
    saved = sweep_curves(SAVED, strategy, h, skewed)[seed].heldout_loss
    assert [s for s, _ in run.heldout_loss] == [s for s, _ in saved[:len(run.heldout_loss)]]
    np.testing.assert_allclose([v for _, v in run.heldout_loss],
                               [v for _, v in saved[:len(run.heldout_loss)]], rtol=1e-4)


def test_the_protocol_s_first_run_is_what_the_code_trains():
    run = train(replica_mesh(PLAN.replicas), DP, steps=PLAN.heldout_every, seed=PLAN.lr_seed,
                batch_size=PLAN.batch_size, data_seed=PLAN.data_seed,
                heldout_every=PLAN.heldout_every, optimizer=adamw(PLAN.lr_grid[0]))
    assert run.heldout_loss[0][1] == pytest.approx(SAVED.lr_runs[0].heldout_loss[0][1], rel=1e-4)


def test_the_target_is_data_parallelism_s_seed_mean_at_the_fraction_and_its_rows_interpolate():
    for skewed in (False, True):
        target = sweep_target(SAVED, skewed)
        dp = sweep_curves(SAVED, DP, 1, skewed).values()
        at = 0.2 * PLAN.steps  # TARGET_FRACTION of the run, where the curve still falls
        before = [np.interp(at - PLAN.heldout_every, *zip(*c.heldout_loss)) for c in dp]
        assert np.mean(before) > target  # still falling there
        rows = rows_to_target(SAVED, DP, 1, skewed, target)
        assert np.mean(list(rows.values())) == pytest.approx(at * PLAN.rows_per_step, rel=0.05)
    cost = sweep_cost(SAVED, "diloco", 32)
    assert cost.bytes_across_replicas == pytest.approx(
        sweep_cost(SAVED, DP, 1).bytes_across_replicas / 32, rel=0.05)
    with pytest.raises(ValueError, match="no run of diloco at H=16, skewed=False in the sweep"):
        sweep_curves(SAVED, "diloco", 16, False)


def test_a_bad_file_is_named_in_one_line_with_the_command(tmp_path):
    data = json.loads(saved_path("diloco.json").read_text())
    del data["plan"]["steps"]
    (tmp_path / "diloco.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="diloco.json: plan.steps: missing") as error:
        load(DilocoResults, tmp_path / "diloco.json")
    assert "\n" not in str(error.value)
