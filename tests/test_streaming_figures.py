"""Step 22's figure data: the fragments' sync schedule and held-out loss against wall-clock time."""

import pytest

from course_utils import plot_figure, validate_figure_data
from course_utils.figures.streaming import schedule_figure_data, wall_clock_figure_data


def test_the_schedule_marks_each_send_and_the_steps_it_overlaps():
    data = schedule_figure_data([(3, 0), (7, 1), (11, 0)], fragments=2, tau=2, steps=13)
    validate_figure_data(data)
    cells = data["panels"][0]["cells"]
    assert [i for i, v in enumerate(cells[0]) if v is not None] == [3, 4, 5, 11, 12]
    assert cells[0][3:6] == [0.0, 1.0, 2.0] and cells[0][11:] == [0.0, 1.0]  # cut at the end
    assert [i for i, v in enumerate(cells[1]) if v is not None] == [7, 8, 9]
    assert data["panels"][0]["title"].endswith("1 … 2: the inner steps its sync overlaps, "
                                               "merged after the last")
    one = schedule_figure_data([(3, 0)], fragments=1, tau=1, steps=5)["panels"][0]["title"]
    assert one.endswith("; 1: the inner step its sync overlaps, merged after it")  # not 1 … 1
    assert plot_figure(data).png()[:4] == b"\x89PNG"


@pytest.mark.parametrize("sends, match", [
    ([(0, 2)], "fragment 2 is outside 0 … 1"),
    ([(0, 0), (2, 0)], "syncs overlap at step 2: tau must be below"),
])
def test_a_schedule_that_cannot_be_drawn_says_why(sends, match):
    with pytest.raises(ValueError, match=match):
        schedule_figure_data(sends, fragments=2, tau=2, steps=8)


def _curves(*finals):
    return [[(0, 2.0), (10, 1.0), (20, final)] for final in finals]


def test_wall_clock_is_steps_times_the_step_time_with_the_seeds_range():
    curves = {"data_parallel": _curves(0.5, 0.7, 0.6), "diloco": _curves(0.4, 0.4, 0.4)}
    times = {"10mbit": {"data_parallel": 3.0, "diloco": 0.5}, "1gbit": {"diloco": 0.1}}
    data = wall_clock_figure_data(curves, times, floor=0.3, targets={"95 %": 0.8, "99 %": 0.45},
                                  titles={"10mbit": "10 Mbit/s"})
    validate_figure_data(data)
    slow, fast = data["panels"]
    assert slow["title"] == "10 Mbit/s" and fast["title"] == "1gbit"
    dp = slow["series"][0]
    assert dp["x"] == [30.0, 60.0]  # step 0 left out: a log axis has no 0 s
    assert dp["y"] == pytest.approx([1.0, 0.6]) and (dp["low"][1], dp["high"][1]) == (0.5, 0.7)
    # no time for DP at 1 Gbit/s; the floor and the targets as dashed lines across the data
    assert [s["label"] for s in fast["series"]] == ["diloco", "floor", "95 %", "99 %"]
    assert fast["series"][0]["x"] == pytest.approx([1.0, 2.0])
    lines = slow["series"][2:]
    assert [t["y"] for t in lines] == [[0.3, 0.3], [0.8, 0.8], [0.45, 0.45]]
    assert all(t["style"] == "model" and t["x"] == [5.0, 60.0] for t in lines)
    assert [t["color"] for t in lines] == ["black", "0.35", "0.65"]  # the targets told apart
    assert slow["yscale"] == "log"
    assert slow["x"][0] <= 30.0 and slow["x"][-1] >= 60.0  # the ticks span the data
    assert plot_figure(data).png()[:4] == b"\x89PNG"


def test_the_ceiling_zooms_in_on_the_targets():
    curves = {"dp": _curves(0.5, 0.7), "diloco": [[(0, 2.0), (10, 1.5), (20, 0.4)]] * 2}
    data = wall_clock_figure_data(curves, {"10mbit": {"dp": 1.0, "diloco": 1.0}}, floor=0.3,
                                  targets={}, ceiling=1.2)
    dp, diloco, _ = data["panels"][0]["series"]  # and the floor
    assert dp["x"] == [10.0, 20.0] and diloco["x"] == [20.0]  # 1.5 is above the ceiling
    with pytest.raises(ValueError, match="every evaluation of dp is above the ceiling 0.4"):
        wall_clock_figure_data({"dp": _curves(0.5)}, {"1gbit": {"dp": 1.0}}, floor=0.3,
                               targets={}, ceiling=0.4)


def test_seeds_at_different_steps_and_a_rate_with_nothing_are_refused():
    uneven = [[(0, 1.0), (10, 0.5)], [(0, 1.0), (20, 0.5)]]
    with pytest.raises(ValueError, match="evaluated at different steps"):
        wall_clock_figure_data({"dp": uneven}, {"10mbit": {"dp": 1.0}}, floor=0.1, targets={})
    with pytest.raises(ValueError, match="no strategy has both a curve and a step time at 1gbit"):
        wall_clock_figure_data({"dp": _curves(0.5)}, {"1gbit": {"diloco": 1.0}}, floor=0.1,
                               targets={})
