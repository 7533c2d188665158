"""course cluster --measure training: part four's steps timed on the cluster, written as
training.json with the keys the notebooks read, nothing left behind; and what the notebooks
compute from it (steps and time to a target loss). No test asserts a time."""

import json
import subprocess
import sys

import pytest

from course_utils.models.cost_model import Topology
from course_utils.models.step import strategy_traffic
from course_utils.problems.classification import PART_FOUR, padded_size
from course_utils.results.records import from_json
from course_utils.results.training import (
    HeldoutCurve,
    TrainingMeta,
    TrainingResults,
    TrainingRow,
    steps_to,
    time_to,
)
from course_utils.tools.cluster.netns import check_can_run, leftovers
from course_utils.tools.cluster.training import TRAINING_PLANS

needs_root = pytest.mark.skipif(check_can_run() is not None,
                                reason="needs root and iproute2 (CI runs as root)")
ROW_KEYS = {"strategy", "link_rate", "batch_size", "step_s", "compute_s", "communication_s",
            "link_bytes"}


@needs_root
def test_the_quick_plan_writes_training_json_and_leaves_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.tools.cli", "cluster", "--measure", "training",
         "--hosts", "2", "--devices-per-host", "1", "--link-rate", "200mbit", "--plan", "quick",
         "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads((tmp_path / "training.json").read_text())
    results = from_json(TrainingResults, data, "training.json")
    plan = TRAINING_PLANS["quick"]
    assert {(r.strategy, r.batch_size) for r in results.rows} == {
        (s, b) for s in plan["strategies"] for b in plan["batch_sizes"]}
    assert all(set(row) == ROW_KEYS for row in data["rows"])
    assert results.meta.hosts == 2 and results.meta.cores > 0 and results.meta.default_tcp
    # host 0's link counter saw what the step model says one data-parallel step sends
    dp = strategy_traffic("data_parallel", padded_size(2, PART_FOUR), Topology(2, 1))
    for row in results.rows:
        assert row.link_bytes == pytest.approx(dp.link_bytes, rel=0.05)
        assert row.step_s == pytest.approx(row.compute_s + row.communication_s)
    for curve in results.curves:
        assert len(curve.heldout_loss) == plan["steps"] // plan["every"]
        assert curve.heldout_loss[-1][1] < curve.heldout_loss[0][1]
    assert leftovers() == []


META = TrainingMeta(2, 2, "full", "3.11", "0.10.2", "0.10.2", 2, "reno", "bbr", 1.0)
CURVE = HeldoutCurve("data_parallel", 64, ((10, 0.9), (20, 0.5), (30, 0.4)))
ROW = TrainingRow("data_parallel", "200mbit", 64, 0.3, 0.05, 0.25, 6.7e6)


def test_time_to_a_target_is_the_steps_to_it_times_the_step_time():
    results = TrainingResults(META, (ROW,), (CURVE,))
    assert steps_to(CURVE, 0.45) == 30 and steps_to(CURVE, 0.1) is None
    assert time_to(results, "data_parallel", "200mbit", 64, 0.5) == pytest.approx(20 * 0.3)
    assert time_to(results, "data_parallel", "200mbit", 64, 0.1) is None
    with pytest.raises(ValueError, match="no run of bf16 at 200mbit and batch size 64"):
        time_to(results, "bf16", "200mbit", 64, 0.5)


def test_a_bad_measure_gets_one_line(capsys):
    from course_utils.tools.cli import main

    with pytest.raises(SystemExit):
        main(["cluster", "--measure", "overlap"])
    assert "invalid choice: 'overlap'" in capsys.readouterr().err


def test_the_step_model_of_a_row_adds_its_compute_to_its_link_time():
    from course_utils.results.training import modelled_step_s

    slow = TrainingRow("data_parallel", "50mbit", 64, 1.0, 0.05, 0.95)
    fast = TrainingRow("data_parallel", "200mbit", 64, 1.0, 0.05, 0.95)
    link = modelled_step_s(slow, 2, 2) - 0.05
    assert link == pytest.approx(4 * (modelled_step_s(fast, 2, 2) - 0.05))  # a quarter the rate
    accumulated = TrainingRow("accumulation", "50mbit", 64, 1.0, 0.2, 0.8)
    assert modelled_step_s(accumulated, 2, 2) == pytest.approx(0.2 + link)  # the same bytes
    with pytest.raises(ValueError, match="no step model for 'ddp'"):
        modelled_step_s(TrainingRow("ddp", "50mbit", 64, 1.0, 0.05, 0.95), 2, 2)


@pytest.mark.parametrize("strategy, batch_size", [("data_parallel", 32), ("topk_ef", 32),
                                                  ("accumulation", 32)])
def test_the_saved_curves_are_what_the_code_trains_in_their_first_steps(strategy, batch_size):
    from course_utils.devices.setup import data_mesh
    from course_utils.results.training import saved_training_results
    from course_utils.tools.cluster.training import TRAINING_PLANS
    from course_utils.training.part_four import ACCUMULATION, STEPS, TOPK_FRACTION
    from course_utils.training.train import train

    saved = saved_training_results()
    every = TRAINING_PLANS[saved.meta.plan]["every"]
    curve = next(c for c in saved.curves if (c.strategy, c.batch_size) == (strategy, batch_size))
    mesh = data_mesh()
    assert mesh.size == saved.meta.hosts * saved.meta.devices_per_host
    run = train(mesh, STEPS[strategy], steps=every, batch_size=batch_size,
                accumulate=ACCUMULATION if strategy == "accumulation" else 1,
                topk_fraction=TOPK_FRACTION, heldout_every=every, mlp=PART_FOUR)
    assert run.heldout_loss[0][0] == curve.heldout_loss[0][0] == every
    assert run.heldout_loss[0][1] == pytest.approx(curve.heldout_loss[0][1], rel=1e-4)


def test_the_saved_run_is_a_full_plan_of_every_strategy():
    from course_utils.results.training import saved_training_results

    saved = saved_training_results()
    plan = TRAINING_PLANS["full"]
    assert saved.meta.plan == "full"
    assert {r.strategy for r in saved.rows} == set(plan["strategies"])
    assert {r.link_rate for r in saved.rows} == {"50mbit", "200mbit", "1gbit", "10gbit"}
    assert all(r.link_bytes and r.link_bytes > 0 for r in saved.rows)
