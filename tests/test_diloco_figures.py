"""Step 21's figure of the saved DiLoCo sweep: seed means and ranges, rows and bytes on the x
axes, built from a small sweep made up here (the saved one: tests of ``results.diloco``)."""

from dataclasses import replace

import pytest

from course_utils.figures.data import validate_figure_data
from course_utils.results.curves import HeldoutCurve
from course_utils.results.diloco import (
    DP,
    PLAN,
    DilocoResults,
    SweepCost,
)
from course_utils.results.diloco_figures import diloco_figure_data, seed_band
from course_utils.results.meta import RunMeta, this_machine

HS = (8, 32)
PER_STEP = {DP: 1000.0, "local_sgd_adamw": 125.0, "diloco": 125.0,  # across, at H = 8
            "diloco_sgd": 125.0}


def _curve(strategy, h, skewed, seed):
    every = 16 if h == 1 else h
    # losses that fall with the step, by 0.01 per seed, and 0.1 higher on skewed shards
    return HeldoutCurve(strategy, 16, tuple(
        (s, 1.0 / s + 0.01 * seed + 0.1 * skewed) for s in range(every, 65, every)), seed, h,
        skewed, train_loss=())


def _sweep(*, across=None):
    runs = [(DP, 1)] + [(s, h) for s in ("local_sgd_adamw", "diloco", "diloco_sgd") for h in HS]
    curves = tuple(_curve(s, h, skewed, seed) for s, h in runs for skewed in (False, True)
                   for seed in (0, 1, 2))
    costs = tuple(SweepCost(s, h, (PER_STEP[s] * 8 / h) if across is None else across,
                            1.0, {"parameters": 4}) for s, h in runs)
    return DilocoResults(RunMeta("made up", this_machine(), 1.0), "made up",
                         replace(PLAN, local_steps=HS), 3e-4, 0.7, 0.9, (), curves, costs)


def test_a_band_is_the_seeds_mean_and_range():
    steps, mean, low, high = seed_band(_sweep(), "diloco", 32, False)
    assert steps == [32, 64]
    assert mean == pytest.approx([1 / 32 + 0.01, 1 / 64 + 0.01])
    assert low == pytest.approx([1 / 32, 1 / 64]) and high == pytest.approx([1 / 32 + 0.02,
                                                                             1 / 64 + 0.02])


def test_four_panels_rows_and_bytes_on_iid_and_skewed_shards():
    data = diloco_figure_data(_sweep())
    validate_figure_data(data)
    titles = [p["title"] for p in data["panels"]]
    assert titles == ["i.i.d. stream: against the rows seen", "i.i.d. stream: against the bytes "
                      "sent", "skewed stream: against the rows seen", "skewed stream: against "
                      "the bytes sent"]
    rows, sent = data["panels"][0], data["panels"][1]
    assert [s["label"] for s in rows["series"]] == [
        "data parallelism", "local SGD H=8", "local SGD H=32", "DiLoCo H=8", "DiLoCo H=32"]
    dp, diloco32 = rows["series"][0], rows["series"][4]
    assert dp["x"][:2] == [16 * PLAN.rows_per_step, 32 * PLAN.rows_per_step]
    assert diloco32["x"] == [32 * PLAN.rows_per_step, 64 * PLAN.rows_per_step]
    assert sent["series"][4]["x"] == [32 * 125.0 * 8 / 32, 64 * 125.0 * 8 / 32]
    assert all(t & (t - 1) == 0 for t in sent["x"]) and sent["x"][-1] * 4 > 64 * 1000.0
    skewed = data["panels"][2]["series"][4]
    assert skewed["y"] == pytest.approx([y + 0.1 for y in diloco32["y"]])


def test_one_h_only_and_a_sweep_with_nothing_across_refused():
    data = diloco_figure_data(_sweep(), local_steps=[32])
    assert [s["label"] for s in data["panels"][0]["series"]] == [
        "data parallelism", "local SGD H=32", "DiLoCo H=32"]
    with pytest.raises(ValueError, match="sent nothing across the replicas"):
        diloco_figure_data(_sweep(across=0.0))
    with pytest.raises(ValueError, match="no cost of local_sgd_adamw at H=16"):
        diloco_figure_data(_sweep(), local_steps=[16])
    ablation = diloco_figure_data(_sweep(), local_steps=[8], strategies=["diloco_sgd"])
    assert [s["label"] for s in ablation["panels"][0]["series"]] == [
        "data parallelism", "DiLoCo, no momentum H=8"]
    with pytest.raises(ValueError, match="no curves of dp_adamw, adam in the figure; choose "
                                         "among local_sgd_adamw"):
        diloco_figure_data(_sweep(), strategies=[DP, "adam"])


def test_the_saved_sweep_s_legend_reads_the_registry_s_short_labels():
    from course_utils.results.diloco import EVERY_H, saved_diloco_results

    data = diloco_figure_data(saved_diloco_results(), local_steps=[8], strategies=EVERY_H)
    assert [s["label"] for s in data["panels"][0]["series"]] == [
        "data parallelism", "local SGD H=8", "DiLoCo H=8", "DiLoCo, no momentum H=8",
        "DiLoCo, steady step 1 H=8"]
