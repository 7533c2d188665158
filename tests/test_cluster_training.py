"""What part four computes from a ``course cluster --measure training`` run (steps to a target
loss, the step model of a row) and the saved full run. The run itself is tested in
``test_cluster.py``, with the other cluster runs, which must not overlap (one lock, one set of
namespaces). No test asserts a time."""

import pytest

from course_utils.results.cluster import ClusterSetup
from course_utils.results.meta import Machine, RunMeta
from course_utils.results.training import (
    HeldoutCurve,
    OwnWorkRow,
    TrainingResults,
    TrainingRow,
    crossing_step,
    loss_at,
    own_work_s,
    seed_curves,
    steps_to,
)
from course_utils.tools.cluster.training import TRAINING_PLANS

META = RunMeta("course cluster --measure training", Machine("3.11", "0.10.2", "0.10.2", cores=2),
               1.0)
CLUSTER = ClusterSetup(2, 2, "full", "reno", "bbr")
CURVE = HeldoutCurve("data_parallel", 64, ((10, 0.9), (20, 0.5), (30, 0.4)))
ROW = TrainingRow("data_parallel", "200mbit", 64, 0.3, 0.05, 0.25, 6.7e6)


def test_the_steps_to_a_target_are_its_first_evaluation_at_or_below():
    assert steps_to(CURVE, 0.45) == 30 and steps_to(CURVE, 0.1) is None


def test_the_crossing_is_interpolated_between_evaluations():
    assert crossing_step(CURVE, 0.45) == pytest.approx(25.0)  # halfway from 0.5 to 0.4
    assert crossing_step(CURVE, 0.5) == pytest.approx(20.0)  # on an evaluation
    assert crossing_step(CURVE, 0.95) == 10.0  # the first evaluation is already below
    assert crossing_step(CURVE, 0.3) is None
    assert loss_at(CURVE, 25) == pytest.approx(0.45)
    with pytest.raises(ValueError, match="step 40 is outside the curve's evaluations, 10 to 30"):
        loss_at(CURVE, 40)


def test_a_strategys_curves_are_read_by_seed():
    other = HeldoutCurve("data_parallel", 64, ((10, 0.8), (20, 0.6), (30, 0.5)), seed=1)
    results = TrainingResults(META, CLUSTER, 1e9, (ROW,), (other, CURVE))
    assert list(seed_curves(results, "data_parallel", 64).values()) == [CURVE, other]
    with pytest.raises(ValueError, match="no held-out curve of zero3 at batch size 64"):
        seed_curves(results, "zero3", 64)


def test_a_bad_measure_gets_one_line(capsys):
    from course_utils.tools.cli import main

    with pytest.raises(SystemExit):
        main(["cluster", "--measure", "jitter"])
    assert "invalid choice: 'jitter'" in capsys.readouterr().err


def test_the_step_model_of_a_row_adds_its_compute_to_its_link_time():
    from course_utils.results.training import modelled_step_s

    slow = TrainingRow("data_parallel", "50mbit", 64, 1.0, 0.05, 0.95)
    fast = TrainingRow("data_parallel", "200mbit", 64, 1.0, 0.05, 0.95)
    link = modelled_step_s(slow, 2, 2) - 0.05
    assert link == pytest.approx(4 * (modelled_step_s(fast, 2, 2) - 0.05))  # a quarter the rate
    accumulated = TrainingRow("accumulation", "50mbit", 64, 1.0, 0.2, 0.8)
    assert modelled_step_s(accumulated, 2, 2) == pytest.approx(0.2 + link)  # the same bytes
    own = OwnWorkRow("data_parallel", 32, 0.02), OwnWorkRow("topk_ef", 32, 0.05)
    scheme = TrainingRow("topk_ef", "50mbit", 64, 1.0, 0.05, 0.95)
    work = own_work_s(TrainingResults(META, CLUSTER, 1e9, (), (), own), "topk_ef")
    assert work == pytest.approx(0.03)  # its step minus data parallelism's, in one process
    assert modelled_step_s(scheme, 2, 2, own_s=work) == pytest.approx(
        modelled_step_s(scheme, 2, 2) + 0.03)
    with pytest.raises(ValueError, match="no part-four row 'ddp'"):
        modelled_step_s(TrainingRow("ddp", "50mbit", 64, 1.0, 0.05, 0.95), 2, 2)


@pytest.mark.parametrize("strategy, batch_size", [("data_parallel", 128), ("topk_ef", 128),
                                                  ("accumulation", 128)])
def test_the_saved_curves_are_what_the_runner_trains_in_their_first_steps(strategy, batch_size):
    from course_utils.results.training import saved_training_results
    from course_utils.tools.cluster.training import TRAINING_PLANS, train_curves

    saved = saved_training_results()
    every = TRAINING_PLANS[saved.cluster.plan]["every"]
    p = saved.cluster.hosts * saved.cluster.devices_per_host
    curve = seed_curves(saved, strategy, batch_size)[0]  # seed 0's first evaluation only
    (fresh,) = train_curves([(strategy, batch_size, every, every)], p, seeds=(0,))
    assert fresh.heldout_loss[0][0] == curve.heldout_loss[0][0] == every
    assert fresh.heldout_loss[0][1] == pytest.approx(curve.heldout_loss[0][1], rel=1e-4)


def test_the_saved_run_is_a_full_plan_of_every_strategy():
    from course_utils.results.training import saved_training_results

    saved = saved_training_results()
    plan = TRAINING_PLANS["full"]
    assert saved.cluster.plan == "full" and saved.meta.runs == 3
    assert {r.strategy for r in saved.rows} == set(plan["strategies"])
    assert {r.link_rate for r in saved.rows} == {"50mbit", "200mbit", "1gbit", "10gbit"}
    assert all(r.link_bytes and r.link_bytes > 0 for r in saved.rows)
    seeds, firsts = {}, {}
    for c in saved.curves:
        seeds.setdefault((c.strategy, c.batch_size), set()).add(c.seed)
        firsts.setdefault((c.strategy, c.batch_size), set()).add(c.heldout_loss[0][1])
    assert set(map(frozenset, seeds.values())) == {frozenset(range(plan["seeds"]))}
    # each seed draws another run (another start and minibatch order)
    assert all(len(firsts[key]) == plan["seeds"] for key in firsts)
    for c in saved.curves:  # at least the plan's steps (some longer), evaluated every ``every``
        steps = [s for s, _ in c.heldout_loss]
        assert steps == list(range(plan["every"], steps[-1] + 1, plan["every"]))
        assert steps[-1] >= plan["steps"][c.batch_size]


def test_alpha_is_one_extra_call_s_cost_spread_over_its_message_steps():
    from course_utils.results.cluster import per_message_s, saved_cluster_results

    saved = saved_cluster_results("2x2")
    alpha = per_message_s(saved, 6)
    run = saved.runs[0]
    per_call = (run.buckets.separate - run.buckets.one_bucket) / (run.buckets.count - 1)
    assert alpha[run.link_rate] == pytest.approx(per_call / 6)
    assert set(alpha) == {r.link_rate for r in saved.runs} and min(alpha.values()) > 0
    with pytest.raises(ValueError, match="messages must be at least 1"):
        per_message_s(saved, 0)


def test_curves_are_copied_for_the_same_updates_and_kept_when_saved(monkeypatch):
    from course_utils.tools.cluster import training

    wanted = [("data_parallel", 32, 10, 10), ("hsdp", 32, 10, 10)]
    curves = training.train_curves(wanted, 4, seeds=(0,))
    assert [(c.strategy, c.seed) for c in curves] == [("data_parallel", 0), ("hsdp", 0)]
    assert curves[1].heldout_loss == curves[0].heldout_loss  # HSDP's updates are DP's

    def no_training(*args, **kwargs):
        raise AssertionError("a kept curve was trained again")

    monkeypatch.setattr("course_utils.training.train.train", no_training)
    assert training.train_curves(wanted[:1], 4, seeds=(0,), kept=curves) == curves[:1]


def test_the_cluster_reads_the_saved_curves_and_trains_nothing_again(monkeypatch):
    from course_utils.results.training import saved_training_results
    from course_utils.tools.cluster import training

    def no_training(*args, **kwargs):
        raise AssertionError("the cluster trained a saved curve again")

    monkeypatch.setattr("course_utils.training.train.train", no_training)
    saved = saved_training_results()
    p = saved.cluster.hosts * saved.cluster.devices_per_host
    curves = training.heldout_curves(TRAINING_PLANS[saved.cluster.plan], p)

    def key(c):
        return c.strategy, c.batch_size, c.seed

    assert sorted(curves, key=key) == sorted(saved.curves, key=key)
    with pytest.raises(AssertionError, match="trained a saved curve again"):  # other devices
        training.heldout_curves(TRAINING_PLANS["quick"], p)
