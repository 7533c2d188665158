"""The one curves module (``results.curves``): its readers give what the four older reader
families gave on every saved curve, its plan and runner, and the registry's part-five plans.

The older readings are kept below as small functions, copied from the code they replaced (at
6eaaf92), rather than read from a fixture: the saved curves' numbers are unchanged (only
``diloco.json``'s record shape was converted, tested below), so what must hold is that the same
curve read the new way gives the old number, for every curve of every file and for targets across
each curve's whole range."""

import numpy as np
import pytest

from course_utils.results.curves import (
    CurvePlan,
    loss_at_step,
    points_of,
    run_curves,
    seconds_to,
    step_to,
    steps_to_band,
)
from course_utils.results.diloco import (
    ABLATIONS,
    COMPARED,
    DP,
    PLAN,
    saved_diloco_results,
)
from course_utils.results.strategies import saved_strategy_results
from course_utils.results.streaming import (
    BASELINE,
    CURVE_LOCAL_STEPS,
    CURVE_STRATEGIES,
    REPLICA_ROWS,
    dated_curves,
    saved_streaming_curves,
)
from course_utils.results.training import crossing_step, saved_training_results, steps_to
from course_utils.training.strategies import SAVED_PLANS, SPECS, saved_in
from course_utils.training.streaming import schedule


def _old_steps_to(points, target):  # results.training.steps_to at 6eaaf92
    return next((step for step, loss in points if loss <= target), None)


def _old_crossing_step(points, target):  # results.training.crossing_step at 6eaaf92
    before = None
    for step, loss in points:
        if loss <= target:
            if before is None:
                return float(step)
            (s0, l0) = before
            return s0 + (step - s0) * (l0 - target) / (l0 - loss)
        before = (step, loss)
    return None


def _old_synced_step(points, target, merges):  # results.streaming.steps_to_target's staircase
    first = _old_steps_to(points, target)
    return None if first is None else max((m for m in merges if m <= first), default=0)


def _targets(points):
    """Targets across the curve: each evaluation's loss, between two, above and below all."""
    losses = sorted({loss for _, loss in points})
    between = [(a + b) / 2 for a, b in zip(losses, losses[1:])]
    return losses + between + [losses[0] - 0.01, losses[-1] + 0.01]


def _saved_curves():
    """Every held-out curve of every saved file of curves (the records as they are)."""
    strategies = [run.heldout_loss for run in saved_strategy_results().runs]
    diloco = saved_diloco_results()
    return ([c.heldout_loss for c in saved_training_results().curves] + strategies
            + [c.heldout_loss for c in diloco.curves] + [r.heldout_loss for r in diloco.lr_runs]
            + [c.heldout_loss for c in saved_streaming_curves().curves])


def test_the_new_readers_give_the_old_readings_on_every_saved_curve():
    curves = _saved_curves()
    assert len(curves) == 250  # training 108, strategies 19, diloco 93 + 15, streaming 15
    read = 0
    for points in curves:
        steps = [s for s, _ in points]
        for target in _targets(points):
            assert step_to(points, target, read="evaluated") == _old_steps_to(points, target)
            assert step_to(points, target) == _old_crossing_step(points, target)
            merges = steps[::2]
            assert step_to(points, target, read="sync", syncs=merges) == _old_synced_step(
                points, target, merges)
            read += 1
        middle = (steps[0] + steps[-1]) / 2
        assert loss_at_step(points, middle) == float(np.interp(middle, *zip(*points)))
    assert read > 5_000


def test_the_pages_readers_are_the_new_readers_with_today_s_option():
    training = saved_training_results()
    for curve in training.curves[:12]:
        for target in _targets(curve.heldout_loss):
            assert steps_to(curve, target) == _old_steps_to(curve.heldout_loss, target)
            assert crossing_step(curve, target) == _old_crossing_step(curve.heldout_loss, target)
    streaming = saved_streaming_curves()
    for c in streaming.curves:
        sync = SPECS[c.strategy].sync
        merges = [e.step for e in schedule(streaming.steps, local_steps=streaming.local_steps,
                                           fragments=sync.fragments, overlap=sync.overlap)
                  if e.kind == "merge"]
        # step 22 reads each evaluation dated at the merge it sees (``dated_curves``), as the
        # evaluation: the old staircase's step (the merge that the first evaluation sees)
        dated = dated_curves(streaming, c.strategy)[c.seed]
        for target in _targets(c.heldout_loss):
            old = (_old_steps_to(c.heldout_loss, target) if sync.outer is None
                   else _old_synced_step(c.heldout_loss, target, merges))
            assert step_to(dated, target, read="evaluated") == old


def test_first_reaching_and_staying_a_band_and_seconds():
    curve = ((10, 1.0), (20, 0.5), (30, 0.7), (40, 0.4), (50, 0.45))
    assert step_to(curve, 0.6) == pytest.approx(18.0)  # first reached, between 10 and 20
    assert step_to(curve, 0.6, stay=True) == pytest.approx(100 / 3)  # stays from 30 + 10/3 on
    assert step_to(curve, 0.6, read="evaluated", stay=True) == 40
    assert step_to(curve, 0.42, stay=True) is None  # 50 is above it again: never stays
    assert step_to(curve, 0.3) is None  # never reached: said so, not a number
    assert steps_to_band(curve, (0.9, 0.6), read="evaluated") == {0.9: 20, 0.6: 20}
    assert seconds_to(curve, 0.6, 0.5) == pytest.approx(9.0)
    assert seconds_to(curve, 0.3, 0.5) is None
    with pytest.raises(ValueError, match="targets 0.2 to 0.6 lie outside the curve's losses, "
                                         "0.4 to 1; give a band within them"):
        steps_to_band(curve, (0.2, 0.6))
    with pytest.raises(ValueError, match="read='nearest': give one of linear, evaluated, sync"):
        step_to(curve, 0.6, read="nearest")
    with pytest.raises(ValueError, match="step 5 is outside the curve's evaluations, 10 to 50"):
        loss_at_step(curve, 5)


def test_an_old_record_shape_and_an_unknown_strategy_get_one_line():
    with pytest.raises(ValueError, match="not a dict; read the saved file with its saved_"):
        step_to({"strategy": "diloco", "heldout_loss": [[8, 0.5]]}, 0.6)  # JSON, not a record
    with pytest.raises(ValueError, match="not a list"):
        points_of([0.9, 0.5])  # losses without their steps
    with pytest.raises(ValueError, match="unknown strategy 'ddp'; choose one of"):
        next(run_curves(None, [CurvePlan("ddp", (0,))]))
    with pytest.raises(ValueError, match="unknown strategy 'ddp'"):
        dated_curves(saved_streaming_curves(), "ddp")


def test_the_runner_trains_every_seed_of_every_plan_in_order(monkeypatch):
    calls = []

    def train(mesh, strategy, **options):
        calls.append((strategy, options["seed"], options["steps"]))
        return len(calls)

    monkeypatch.setattr("course_utils.training.train.train", train)
    plans = [CurvePlan(BASELINE, (0, 1), {"steps": 4}), CurvePlan(DP, (2,), {"steps": 8})]
    seen = []
    runs = list(run_curves("mesh", plans, on_run=lambda plan, seed: seen.append(seed)))
    assert calls == [(BASELINE, 0, 4), (BASELINE, 1, 4), (DP, 2, 8)] and seen == [0, 1, 2]
    assert [(plan.strategy, seed, run) for plan, seed, run in runs] == [
        (BASELINE, 0, 1), (BASELINE, 1, 2), (DP, 2, 3)]


def test_part_five_s_plans_are_the_registry_s():
    # what results/diloco.py and results/streaming.py listed by name at 6eaaf92
    assert (DP, COMPARED, ABLATIONS) == ("dp_adamw", ("local_sgd_adamw", "diloco"),
                                         ("diloco_sgd", "diloco_unit_step"))
    assert CURVE_STRATEGIES == ("dp_adamw", "diloco", "diloco_int8", "diloco_4bit",
                                "streaming_diloco") and BASELINE == "dp_adamw"
    assert (CURVE_LOCAL_STEPS, REPLICA_ROWS) == (32, 512)
    sweep, streaming = SAVED_PLANS["diloco.json"], SAVED_PLANS["streaming.json"]
    assert (PLAN.local_steps, PLAN.seeds, PLAN.steps, PLAN.heldout_every) == (
        sweep.local_steps, sweep.seeds, sweep.steps, sweep.heldout_every)
    assert PLAN.batch_size * PLAN.devices // PLAN.replicas == sweep.replica_rows
    saved = saved_streaming_curves()
    assert (saved.steps, saved.heldout_every, saved.local_steps) == (
        streaming.steps, streaming.heldout_every, CURVE_LOCAL_STEPS)
    assert saved_diloco_results().plan == PLAN
    assert saved_in("diloco.json") == (DP,) + COMPARED + ABLATIONS  # the baseline first
    assert saved_in("strategies.json", "baseline") == saved_in("training.json", "baseline") == (
        "data_parallel",)
    with pytest.raises(ValueError, match="no saved curves 'sweep.json' in the registry; choose "
                                         "one of diloco.json, strategies.json, streaming"):
        saved_in("sweep.json")


def test_a_sync_reading_without_syncs_gets_one_line():
    with pytest.raises(ValueError, match=r"give their steps \(syncs=\)"):
        step_to(((10, 0.9), (20, 0.5)), 0.5, read="sync")


def test_a_band_lead_pairs_seeds_and_names_where_it_flips():
    from course_utils.results.curves import band_lead, reducible_band

    targets = reducible_band(1.0, 0.0, (0.5, 0.8))  # 0.5 and 0.2 (to rounding)
    a = [((1, 1.0), (2, 0.4), (3, 0.1)), ((1, 1.0), (2, 0.45), (3, 0.3))]
    b = [((1, 1.0), (2, 0.6), (3, 0.3)), ((1, 1.0), (2, 0.6), (3, 0.1))]
    lead = band_lead(a, b, targets, read="evaluated", step_s_a=2.0, step_s_b=1.0)
    # A's steps cost twice B's: at 0.5 A needs 2 steps (4 s), B 3 (3 s) in both seeds
    assert lead.leads[targets[0]] == (0.75, 0.75) and lead.holds() == ()
    fast = band_lead(a, b, targets, read="evaluated")
    assert fast.holds() == (targets[0],)  # 2 steps against 3 in both seeds
    assert fast.leads[targets[1]] == (float("inf"), 0.0)  # 0.2: only A in seed 0, only B in 1
    assert fast.flips() == (targets[1],)
    with pytest.raises(ValueError, match="pair the seeds"):
        band_lead(a, b[:1], targets)
    with pytest.raises(ValueError, match="nothing is left to learn"):
        reducible_band(0.1, 0.2)
