
import subprocess
import sys

import numpy as np
import pytest
from matplotlib.figure import Figure

from course_utils import (
    array_holdings,
    grid_panel,
    holdings,
    placement_figure_data,
    plot_figure,
    validate_figure_data,
)

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


TITLES = [
    "Stored: values one device holds afterwards",
    "Sent: bytes one rank sends (ring model, p = 4)",
]


def test_builder_reproduces_the_seed_structure_with_a_title_per_panel():
    data = placement_figure_data([8, 2, 8], 32, 4)
    assert [panel.pop("title") for panel in data["panels"]] == TITLES
    assert data == SEED


def test_renderer_applies_the_house_style():
    panel = {
        "kind": "line",
        "title": "t",
        "x": [2**k for k in range(3, 24)],
        "xscale": "log",
        "yscale": "log",
        "xunit": "bytes",
        "xlabel": "S",
        "ylabel": "µs",
        "hline": 1,
        "vline": 2**10,
        "series": [
            {"label": "measured", "y": [1.0] * 21, "low": [0.5] * 21, "high": [2.0] * 21},
            {"label": "model", "y": [3.0] * 21, "style": "model"},
        ],
    }
    fig = plot_figure({"panels": [panel] * 5})
    assert [ax.get_subplotspec().get_geometry()[:2] for ax in fig.axes] == [(3, 2)] * 5
    ax = fig.axes[0]
    measured, model, reference, marked = ax.lines
    assert measured.get_color() != model.get_color()  # two names, two colours
    assert fig.axes[1].lines[0].get_color() == measured.get_color()  # in every panel alike
    assert list(marked.get_xdata()) == [2**10, 2**10]
    assert measured.get_marker() == "o" and measured.get_linestyle() == "-"
    assert model.get_marker() == "None" and model.get_linestyle() == "--"
    assert list(reference.get_ydata()) == [1, 1]
    assert len(ax.collections) == 1  # the band
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) <= 8 and labels[-1] == "8 MiB"
    assert ax.get_title() == "t" and ax.get_legend() is None
    (legend,) = fig.legends  # one legend for the figure, beside the panels, each name once
    assert [t.get_text() for t in legend.get_texts()] == ["measured", "model"]
    right = max(a.get_window_extent().x1 for a in fig.axes)
    assert legend.get_window_extent().x0 > right


def test_series_and_bars_carry_human_names_and_value_labels_never_overlap():
    bars = {"kind": "bar", "title": "t", "ylabel": "KiB",
            "labels": ["data_parallel", "zero1", "topk_ef"],
            "series": [{"label": "local_sgd", "y": [168.0, 169.0, 1.0]}]}
    fig = plot_figure({"panels": [bars]})
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "data\nparallelism", "ZeRO-1", "top-k +\nerror\nfeedback"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["local SGD"]
    crowded = {**bars, "labels": [str(i) for i in range(40)],
               "series": [{"label": "s", "y": [1234.5 + i for i in range(40)]}]}
    values = plot_figure({"panels": [crowded]}).axes[0].texts
    assert 0 < len(values) < 40  # 40 labels of 4 digits do not fit side by side: some left out
    assert {t.get_text() for t in values} <= {f"{1234.5 + i:.4g}" for i in range(40)}


def test_renderer_draws_one_axes_per_panel_with_the_values():
    fig = plot_figure(placement_figure_data([8, 2, 8], 32, 4))
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert [p.get_height() for p in fig.axes[1].patches] == [48.0, 24.0, 48.0]
    line = {
        "panels": [
            {
                "kind": "line",
                "x": [2, 4, 8],
                "xlabel": "ranks",
                "ylabel": "bytes",
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
    data = placement_figure_data([8, 2, 8], 32, 4)
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
        (_broken(["panels", 1, "title"], ""), r"panels\[1\] needs a title"),
        (_broken(["panels", 0, "series", 0, "style"], "dots"), r"style is 'dots'"),
        (_broken(["panels", 0, "series", 0, "low"], [1]), r"low must be 3 numbers"),
        (_broken(["panels", 0, "hline"], "one"), r"hline must be a number"),
        (_broken(["panels", 0, "vline"], None), r"vline must be a number"),
        (_broken(["panels", 0, "xunit"], "KiB"), r"xunit is 'KiB'"),
        (
            {"panels": [{"kind": "line", "x": ["a"], "series": [{"y": [1]}]}]},
            r"panels\[0\]\.x must hold numbers",
        ),
        ({"panels": ["bar"]}, r"panels\[0\] must be a dict"),
        (
            {"panels": [{"kind": "line", "x": [1], "xscale": "symlog", "series": [{"y": [1]}],
                         "title": "t", "xlabel": "p", "ylabel": "B"}]},
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


def test_grid_panel_shows_who_holds_which_values():
    cells = holdings([[1.0, 2.0], [3.0, 4.0]], 4, offsets=[0, 2])
    assert cells == [[1.0, 2.0, None, None], [None, None, 3.0, 4.0]]
    fig = plot_figure({"panels": [grid_panel("after", cells)] * 4})
    panels = [ax for ax in fig.axes if ax.images]  # each with its colour bar beside it
    assert len(fig.axes) == 8 and len(panels) == 4
    assert len({round(ax.get_position().x0, 3) for ax in panels}) == 2  # two in a row
    held = fig.axes[0].images[0]  # drawn over the hatching that marks positions not held
    assert held.get_zorder() > max(p.get_zorder() for p in fig.axes[0].patches)
    image = fig.axes[0].images[0].get_array()
    assert image.mask.tolist() == [[False, False, True, True], [True, True, False, False]]
    assert [t.get_text() for t in fig.axes[0].texts] == ["1", "2", "3", "4"]
    fixed = plot_figure({"panels": [grid_panel("k", cells, value_range=(0, 8))]})
    assert fixed.axes[0].images[0].get_clim() == (0.0, 8.0)
    wide = [[float(v) for v in range(200)]] * 8  # cells too narrow for "2.8e+02": no values
    assert len(plot_figure({"panels": [grid_panel("w", wide)]}).axes[0].texts) == 0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: holdings([[1.0]], 2, offsets=[0, 1]), "1 blocks but 2 offsets"),
        (lambda: holdings([[1.0, 2.0]], 2, offsets=[1]), "does not fit in 2"),
        (lambda: validate_figure_data({"panels": [grid_panel("t", [])]}), "non-empty list of rows"),
        (
            lambda: validate_figure_data({"panels": [grid_panel("t", [[1.0], [1.0, 2.0]])]}),
            "same, non-zero length",
        ),
        (
            lambda: validate_figure_data({"panels": [grid_panel("t", [["a"]])]}),
            "numbers, or None",
        ),
        (lambda: validate_figure_data({"panels": [grid_panel("", [[1.0]])]}), "needs a title"),
        (
            lambda: validate_figure_data(
                {"panels": [grid_panel("t", [[1.0]], value_range=(2, 1))]}
            ),
            "value_range must be",
        ),
    ],
)
def test_bad_grids_name_the_problem(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_array_holdings_reads_each_devices_shard_at_its_position():
    import jax
    import numpy as np

    from course_utils import data_mesh, placements

    mesh = data_mesh()
    _, replicated, sliced = placements(mesh)
    p = mesh.size
    values = np.arange(2 * p, dtype=np.float32)
    split = array_holdings(jax.device_put(values, sliced))
    assert [[i for i, v in enumerate(row) if v is not None] for row in split] == [
        [2 * d, 2 * d + 1] for d in range(p)
    ]
    assert split[-1][-1] == 2 * p - 1
    assert array_holdings(jax.device_put(values, replicated)) == [values.tolist()] * p
    with pytest.raises(ValueError, match="placed 1-D jax.Array"):
        array_holdings(values)


def test_a_line_series_can_have_its_own_x():
    panel = {"kind": "line", "title": "t", "x": [1, 4], "xlabel": "x", "ylabel": "y",
             "series": [{"label": "a", "x": [1, 2, 4], "y": [3, 2, 1]},
                        {"label": "b", "x": [4], "y": [5]}]}
    ax = plot_figure({"panels": [panel]}).axes[0]
    assert [list(line.get_xdata()) for line in ax.lines] == [[1, 2, 4], [4]]
    with pytest.raises(ValueError, match=r"series\[1\]\.y has 1 values but its x has 2"):
        validate_figure_data({"panels": [{**panel, "series": [
            panel["series"][0], {"x": [1, 2], "y": [5]}]}]})
    with pytest.raises(ValueError, match=r"series\[0\]\.x must be a list of numbers"):
        validate_figure_data({"panels": [{**panel, "series": [{"x": "ab", "y": [1, 2]}]}]})


def test_a_figure_shows_as_png_without_pyplot_or_mathtext():
    """Jupyter displays the figure through ``_repr_png_`` (no ``%matplotlib inline``), and
    neither pyplot nor the mathtext parser is loaded to draw it: both cost each kernel time."""
    script = (
        "import sys\n"
        "from course_utils.figures.plot import plot_figure\n"
        "panel = {'kind': 'line', 'title': 't', 'x': [1, 2, 4], 'xscale': 'log',"
        " 'yscale': 'log', 'xlabel': 'p', 'ylabel': 'µs',"
        " 'series': [{'label': 'a', 'y': [3.0, 30.0, 3000.0]}]}\n"
        "fig = plot_figure({'panels': [panel, panel]})\n"
        "png, shown = fig._repr_png_()\n"
        "assert png[:4] == b'\\x89PNG', png[:8]\n"
        "assert 600 < shown['width'] <= 720, shown  # 7.5 inches at most, 96 CSS px each\n"
        "labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]\n"
        "assert {'10', '100', '1000'} <= set(labels), labels\n"
        "assert not any('$' in t or 'e' in t for t in labels), labels\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "from matplotlib.mathtext import MathTextParser\n"
        "assert MathTextParser._parser is None, 'the mathtext parser was built'\n"
        "print(repr(fig))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("<Figure size 1500x")


def _assert_all_on_canvas(fig):
    drawn = fig.get_tightbbox()  # inches: every label and legend lies on the canvas, none cut
    assert drawn.x0 > 0 and drawn.y0 > 0
    assert drawn.x1 < fig.get_figwidth() and drawn.y1 < fig.get_figheight()


def test_the_png_is_cropped_to_what_is_drawn_and_keeps_every_legend():
    import io

    from PIL import Image

    sizes = [2**k for k in range(8, 22, 2)]
    series = [{"label": f"s{i}", "y": [float(v * (i + 1)) for v in sizes]} for i in range(6)]
    panel = {"kind": "line", "title": "t", "x": sizes, "xscale": "log", "xunit": "bytes",
             "yscale": "log", "xlabel": "bytes", "ylabel": "µs", "series": series}
    fig = plot_figure({"panels": [panel] * 5})
    image = np.asarray(Image.open(io.BytesIO(fig.png())))
    canvas_height = fig.get_figheight() * fig.dpi
    _assert_all_on_canvas(fig)
    assert image.shape[0] < canvas_height - 50  # the unused room below it was cropped
    ink = (image[..., :3] < 255).any(axis=-1)
    pad = round(0.1 * fig.dpi)  # a white border of 0.1 inch, then something drawn on each side
    for side in (ink, ink.T, ink[::-1], ink.T[::-1]):
        assert not side[:pad].any() and side[pad].any()


def test_long_tick_labels_and_an_offset_stay_on_the_canvas():
    panel = {"kind": "line", "title": "t", "x": [2, 4, 8], "xlabel": "ranks p",
             "ylabel": "bytes per rank", "series": [{"label": "a", "y": [1.05e6, 1.6e6, 2.1e6]}]}
    fig = plot_figure({"panels": [panel]})
    fig.png()
    _assert_all_on_canvas(fig)


def test_a_legend_wider_than_the_room_is_not_cut():
    import io

    from PIL import Image

    long = "a legend entry much longer than any panel of the figure is wide, " * 2
    panel = {"kind": "line", "title": "t", "x": [1, 2], "xlabel": "x", "ylabel": "y",
             "series": [{"label": long, "y": [1, 2]}]}
    fig = plot_figure({"panels": [panel]})
    width = Image.open(io.BytesIO(fig.png())).size[0]
    legend = fig.legends[0].get_window_extent()
    assert width >= legend.width  # the whole legend is in the image


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_ring_reduce_scatter_leaves_chunk_i_summed_on_device_i(p):
    from course_utils.figures.data import ring_reduce_scatter_figure_data, ring_reduce_scatter_steps

    blocks = np.arange(p * p, dtype=float).reshape(p, p) ** 2
    steps = ring_reduce_scatter_steps(blocks)
    assert len(steps) == p and all(len(s["sends"]) == p for s in steps[1:])
    np.testing.assert_allclose(np.diag(steps[-1]["holds"]), blocks.sum(axis=0))
    data = ring_reduce_scatter_figure_data(p)
    validate_figure_data(data)
    assert [row[i] for i, row in enumerate(data["panels"][-1]["cells"])] == [p] * p


def _colours(fig) -> dict:
    """``{legend label: line colour}`` of a rendered figure."""
    return {line.get_label(): line.get_color() for ax in fig.axes for line in ax.get_lines()
            if not line.get_label().startswith("_")}


def test_a_strategy_keeps_its_colour_across_steps_15_and_16():
    from course_utils.results.strategies import (
        heldout_figure_data,
        saved_strategy_results,
        tradeoff_figure_data,
    )

    saved = saved_strategy_results()
    step15 = _colours(plot_figure(heldout_figure_data(
        saved, ["data_parallel", "bf16", "int8", "topk", "topk_ef", "topk_ef 0.6%", "powersgd"])))
    step16 = _colours(plot_figure(tradeoff_figure_data(saved)))
    for name in ("top-k", "top-k + error feedback", "PowerSGD"):
        assert step15[name] == step16[name], name
    assert len(set(step15.values())) == len(step15)  # no two curves of one figure alike


def test_the_tradeoff_axis_has_a_tick_at_data_parallelism():
    from course_utils.results.strategies import saved_strategy_results, tradeoff_figure_data

    ticks = tradeoff_figure_data(saved_strategy_results())["panels"][0]["x"]
    assert 1.0 in ticks and all(b == 2 * a for a, b in zip(ticks, ticks[1:]))


@pytest.mark.parametrize("high, two_and_five", [(2e4, True), (2e6, False)])
def test_a_log_axis_of_two_decades_labels_two_and_five_too(high, two_and_five):
    panel = {"kind": "line", "title": "t", "x": [1, 2, 3], "yscale": "log", "xlabel": "x",
             "ylabel": "µs", "series": [{"label": "a", "y": [150.0, 1e3, high]}]}
    ax = plot_figure({"panels": [panel]}).axes[0]
    low, top = ax.get_ylim()
    shown = {t.get_text() for t in ax.get_yticklabels() if low <= t.get_position()[1] <= top}
    assert {"1000", "10k"} <= shown
    assert ({"200", "500", "2000", "5000"} <= shown) == two_and_five
