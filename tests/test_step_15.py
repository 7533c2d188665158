"""What step 15's prose reads off the saved part-three runs still holds on them."""

import pytest

from course_utils.results.strategies import (
    PLAN_STEPS as STEPS,
)
from course_utils.results.strategies import (
    find_run,
    heldout_at,
    heldout_figure_data,
    saved_strategy_results,
)

SAVED = saved_strategy_results()


def gap(label: str) -> float:
    """``label``'s held-out loss after the run, relative to data parallelism's."""
    dp = heldout_at(find_run(SAVED, "data_parallel"), STEPS)
    return heldout_at(find_run(SAVED, label), STEPS) / dp - 1


def test_rounding_schemes_end_on_data_parallelism():
    assert abs(gap("bf16")) < 1e-3 and abs(gap("int8")) < 1e-3


def test_error_feedback_then_powersgd_end_closer_than_plain_topk():
    schemes = ["topk", "topk_ef 0.6%", "topk_ef", "powersgd"]
    assert max(gap(s) for s in schemes) == gap("topk")  # furthest away: no error feedback
    assert gap("topk") > gap("topk_ef") > gap("powersgd") > 0
    topk, topk_ef = find_run(SAVED, "topk"), find_run(SAVED, "topk_ef")
    assert topk.bytes_per_step == topk_ef.bytes_per_step  # "the same bytes"
    assert find_run(SAVED, "powersgd").bytes_per_step > topk_ef.bytes_per_step  # "more bytes"


def test_the_per_step_panel_starts_where_asked_and_refuses_a_step_past_the_run():
    data = heldout_figure_data(SAVED, ["data_parallel", "topk"], from_step=STEPS // 2)
    per_step, per_byte = data["panels"]
    assert min(per_step["series"][0]["x"]) >= STEPS // 2
    assert f"from step {STEPS // 2}" in per_step["title"]
    assert len(per_byte["series"][0]["x"]) > len(per_step["series"][0]["x"])  # the whole run
    with pytest.raises(ValueError, match="past the last held-out point"):
        heldout_figure_data(SAVED, ["data_parallel"], from_step=STEPS + 1)
