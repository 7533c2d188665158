import copy

import pytest
from matplotlib.figure import Figure

from course_utils import placement_figure_data, plot_figure, validate_figure_data

SEED = {
    "panels": [
        {
            "kind": "bar",
            "labels": ["all-reduce", "reduce-scatter", "after gather"],
            "ylabel": "values stored per device",
            "series": [{"label": "observed local shape", "y": [8, 2, 8]}],
        },
        {
            "kind": "bar",
            "labels": ["all-reduce", "reduce-scatter", "scatter + gather"],
            "ylabel": "modeled bytes per rank",
            "series": [{"label": "idealized ring payload", "y": [48.0, 24.0, 48.0]}],
        },
    ]
}


def test_builder_reproduces_the_seed_structure():
    assert placement_figure_data([8, 2, 8], 32, 4) == SEED


def test_renderer_draws_one_axes_per_panel_with_the_values():
    fig = plot_figure(SEED)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert [p.get_height() for p in fig.axes[1].patches] == [48.0, 24.0, 48.0]
    line = {
        "panels": [
            {
                "kind": "line",
                "x": [2, 4, 8],
                "xlabel": "ranks",
                "title": "t",
                "series": [{"label": "a", "y": [1, 2, 3]}, {"label": "b", "y": [2, 2, 2]}],
            }
        ]
    }
    fig = plot_figure(line)
    assert len(fig.axes[0].lines) == 2 and fig.axes[0].get_xlabel() == "ranks"
    line["panels"][0]["yscale"] = "log"
    assert plot_figure(line).axes[0].get_yscale() == "log"


def _broken(path, value):
    data = copy.deepcopy(SEED)
    target = data
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return data


@pytest.mark.parametrize(
    "data, match",
    [
        ({}, "'panels' must be a non-empty list"),
        ({"panels": []}, "'panels' must be a non-empty list"),
        (_broken(["panels", 0, "kind"], "pie"), r"panels\[0\]\.kind is 'pie'"),
        (
            _broken(["panels", 1, "series", 0, "y"], [1.0, 2.0]),
            r"panels\[1\]\.series\[0\]\.y has 2 values but labels has 3",
        ),
        (
            _broken(["panels", 0, "series", 0, "y"], [8, "two", 8]),
            r"panels\[0\]\.series\[0\]\.y holds non-numeric",
        ),
        (_broken(["panels", 0, "series", 0, "y"], [8, True, 8]), "non-numeric"),
        (_broken(["panels", 0, "labels"], []), r"panels\[0\]\.labels must be a non-empty list"),
        (_broken(["panels", 0, "series"], []), r"panels\[0\]\.series must be a non-empty list"),
        (_broken(["panels", 0, "ylabel"], 3), r"panels\[0\]\.ylabel must be a string"),
        (
            {"panels": [{"kind": "line", "x": ["a"], "series": [{"y": [1]}]}]},
            r"panels\[0\]\.x must hold numbers",
        ),
        ({"panels": ["bar"]}, r"panels\[0\] must be a dict"),
        (
            {"panels": [{"kind": "line", "x": [1], "xscale": "symlog", "series": [{"y": [1]}]}]},
            r"panels\[0\]\.xscale",
        ),
    ],
)
def test_malformed_data_names_the_field(data, match):
    with pytest.raises(ValueError, match=match):
        validate_figure_data(data)
    with pytest.raises(ValueError, match=match):
        plot_figure(data)


def test_builder_needs_three_sizes():
    with pytest.raises(ValueError, match="needs 3 values"):
        placement_figure_data([8, 2], 32, 4)
