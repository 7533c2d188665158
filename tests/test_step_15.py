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


def test_error_feedback_leads_topk_clearly_and_powersgd_leads_it_by_little():
    """Cell 28: top-k+EF below top-k by more than a hundredth at every evaluation of the second
    half; PowerSGD below top-k+EF there by only a few thousandths. Cell 7: top-k+EF's error of
    the sum after the long runs is about a tenth of top-k's."""
    second = [s for s, _ in find_run(SAVED, "data_parallel").heldout_loss if s > STEPS // 2]

    def gaps(a, b):
        return [heldout_at(find_run(SAVED, a), s) - heldout_at(find_run(SAVED, b), s)
                for s in second]

    assert min(gaps("topk", "topk_ef")) > 0.01
    assert 0 < min(gaps("topk_ef", "powersgd")) and max(gaps("topk_ef", "powersgd")) < 0.01
    ratio = find_run(SAVED, "topk_ef").cumulative_error / find_run(SAVED, "topk").cumulative_error
    assert 0.05 < ratio < 0.15
