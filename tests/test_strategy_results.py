"""The saved strategy runs (course_utils/saved/strategies.json, read by notebooks 14-16) stay in
sync with the code; their figure is valid.

Regenerate them as ``course_utils.results.strategies.saved_strategy_results`` says when these fail.
"""

import json

import numpy as np
import pytest

from course_utils import validate_figure_data
from course_utils.results.records import from_json, saved_path, to_json
from course_utils.results.strategies import (
    BATCH_SIZE,
    DEVICES,
    HELDOUT_EVERY,
    PLAN,
    PLAN_STEPS,
    StrategyResults,
    data_loss_at,
    find_run,
    heldout_at,
    run_label,
    saved_strategy_results,
    sent_bytes,
    tradeoff_figure_data,
)

SAVED = saved_strategy_results()
FIRST_STEPS = 16  # a multiple of every H: local SGD's bytes per step come out the same

RERUN = f"""
from course_utils.results.records import to_json
from course_utils.results.strategies import PLAN, run_plan
short = [dict(o, steps={FIRST_STEPS}) for o in PLAN]
print(json.dumps(to_json(run_plan(data_mesh(), short))))
"""


def test_the_saved_runs_are_the_plan():
    assert (SAVED.devices, SAVED.steps) == (DEVICES, PLAN_STEPS)
    assert (SAVED.batch_size, SAVED.heldout_every) == (BATCH_SIZE, HELDOUT_EVERY)
    assert [r.label for r in SAVED.runs] == [run_label(o) for o in PLAN]
    for run, options in zip(SAVED.runs, PLAN):
        assert len(run.loss) == options.get("steps", PLAN_STEPS) == run.steps
        assert [s for s, _ in run.heldout_loss] == list(
            range(HELDOUT_EVERY, run.steps + 1, HELDOUT_EVERY))


def test_the_saved_file_reads_back_as_records_and_writes_out_the_same():
    text = saved_path("strategies.json").read_text()
    raw = json.loads(text)
    assert to_json(SAVED) == raw  # the file's format is what the records write
    assert all(r["state_bytes_per_device"] == sum(r["memory"].values()) for r in raw["runs"])
    run = find_run(SAVED, "topk_ef 0.6%")
    assert (run.topk_fraction, run.local_steps, run.skewed) == (0.006, None, None)
    assert find_run(SAVED, "local_sgd H=8 skewed").averaged_loss[0][0] == 8


def test_the_saved_runs_start_as_the_code_runs_them_now(run_with_devices):
    now = from_json(StrategyResults, run_with_devices(DEVICES, RERUN))
    for saved, fresh in zip(SAVED.runs, now.runs):
        np.testing.assert_allclose(saved.loss[:FIRST_STEPS], fresh.loss, rtol=1e-4,
                                   err_msg=saved.label)
        assert saved.heldout_loss[0] == pytest.approx(fresh.heldout_loss[0], rel=1e-4)
        assert saved.bytes_per_step == pytest.approx(fresh.bytes_per_step), saved.label
        assert saved.memory == fresh.memory, saved.label


def test_the_closing_figure_is_valid_and_reads_each_run():
    data = tradeoff_figure_data(SAVED)
    validate_figure_data(data)
    points = {name: (x, y) for s in data["panels"][0]["series"]
              for name, x, y in zip(s["point_labels"], s["x"], s["y"])}
    dp = find_run(SAVED, "data_parallel")
    assert points["DP = ZeRO-1/2/3"] == (1.0, heldout_at(dp, PLAN_STEPS))
    for zero in ("zero1", "zero2", "zero3"):  # the one point stands for them: same bytes, loss
        run = find_run(SAVED, zero)
        assert (run.bytes_per_step, heldout_at(run, PLAN_STEPS)) == (dp.bytes_per_step,
                                                                 heldout_at(dp, PLAN_STEPS))
    assert points["ZeRO-3 regather"][0] == pytest.approx(1.5)
    assert points["bf16"][0] == pytest.approx(0.5)
    h8 = find_run(SAVED, "local_sgd H=8")
    assert points["H=8"][1] == dict(h8.heldout_loss)[PLAN_STEPS]
    bars = data["panels"][1]
    assert len(bars["labels"]) == 10 and bars["series"][0]["y"][3] == round(
        find_run(SAVED, "zero3").memory.total / 1024, 1)


def test_reading_a_run_that_is_not_there_says_which_are():
    with pytest.raises(KeyError, match="no run 'zero4'; the runs are: data_parallel, zero1"):
        find_run(SAVED, "zero4")
    with pytest.raises(ValueError, match="ran 192 steps, not 10"):
        data_loss_at(find_run(SAVED, "zero1"), 10)
    with pytest.raises(ValueError, match="no held-out loss at step 10; it has one every 16"):
        heldout_at(find_run(SAVED, "zero1"), 10)
    run = find_run(SAVED, "zero1")
    assert sent_bytes(run)[-1] == pytest.approx(PLAN_STEPS * run.bytes_per_step)
