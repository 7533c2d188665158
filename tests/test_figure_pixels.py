"""Every figure-data builder's figure as drawn: at 2, 4 and 8 devices where the figure depends on
p, once where it reads a saved run. No text touches other text, nothing leaves the canvas, and
the PNG is 200 dpi (recorded in the file) and at most 7.5 inches wide."""

from __future__ import annotations

import io
import itertools
from typing import NamedTuple

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.text import Text
from PIL import Image

from course_utils.figures.builders import (
    bars_figure_data,
    model_figure_data,
    timing_figure_data,
)
from course_utils.figures.data import (
    grid_panel,
    holdings,
    placement_figure_data,
    ring_reduce_scatter_figure_data,
)
from course_utils.figures.describe import describe
from course_utils.figures.plot import DPI, MAX_WIDTH, plot_figure
from course_utils.figures.streaming import schedule_figure_data, wall_clock_figure_data
from course_utils.results.bench import figure_data as bench_figure_data
from course_utils.results.bench import saved_results, steps_figure_data
from course_utils.results.cluster import figure_data as cluster_figure_data
from course_utils.results.cluster import saved_cluster_results
from course_utils.results.curves import lead_figure_data
from course_utils.results.diloco import saved_diloco_results
from course_utils.results.diloco_figures import diloco_figure_data
from course_utils.results.strategies import (
    heldout_figure_data,
    local_sgd_figure_data,
    saved_strategy_results,
    tradeoff_figure_data,
)
from course_utils.results.streaming import curves_of, saved_streaming_curves
from course_utils.results.training import saved_training_results
from course_utils.results.training_figures import step_figure_data
from course_utils.training.streaming import schedule


def _collectives_grids(p: int) -> dict:
    """Step 03's four grids: blocks of 8 values per device, before and after each collective."""
    m = 8 * p
    blocks = np.random.default_rng(3).standard_normal((p, m)) * 100  # values like 2.8e+02
    total = blocks.sum(axis=0)
    piece = m // p
    return {"panels": [
        grid_panel("before: each device its own block", holdings(blocks, m)),
        grid_panel("after all-reduce", holdings(np.tile(total, (p, 1)), m)),
        grid_panel("after reduce-scatter", holdings(
            [total[i * piece:(i + 1) * piece] for i in range(p)], m,
            offsets=[i * piece for i in range(p)])),
        grid_panel("after all-gather", holdings(np.tile(total, (p, 1)), m)),
    ]}


def _sweep(p: int, unit: str = "µs") -> dict:
    """A timing sweep like step 05's (three collectives, sizes 4 B to 16 MiB) on p devices."""
    sizes = [4 * 4**k for k in range(12)]
    timed = {name: [{"median_us": (50 + s / 2e3) * p * f, "q1_us": (45 + s / 2.2e3) * p * f,
                     "q3_us": (60 + s / 1.8e3) * p * f} for s in sizes]
             for name, f in (("psum", 1.0), ("psum_scatter", 0.6), ("all-gather", 0.55))}
    return timing_figure_data(sizes, timed, title=f"{p} logical CPU devices: median, band = IQR",
                              xlabel="S (bytes)", ylabel="time per call", unit=unit,
                              vline=sizes[3])


def _algorithms(p: int) -> dict:
    """Step 12's four all-reduce algorithms over p ranks, modelled from 8 B to 1 GiB."""
    from course_utils.models.cost_model import ALGORITHMS
    from course_utils.models.latency import collective_time

    sizes = [2**k for k in range(3, 31, 3)]
    curves = {a: [1e6 * collective_time(n, p, alpha_s=5e-6, bandwidth_bytes_per_s=12.5e9,
                                        algorithm=a) for n in sizes] for a in ALGORITHMS}
    return model_figure_data(sizes, curves, title=f"All-reduce over {p} ranks (model)",
                             xlabel="n (bytes per rank)", ylabel="modelled time (µs)",
                             xunit="bytes", yscale="log")


BY_DEVICES = {
    "timing sweep": _sweep,
    "timing sweep in ms": lambda p: _sweep(p, "ms"),
    "all-reduce algorithms": _algorithms,
    "memory per stage": lambda p: bars_figure_data(
        ["data_parallel", "zero1", "zero2", "zero3"],
        {"state between steps": [126, 84 + 42 / p, 42 + 84 / p, 126 / p],
         "peak during a step (shape model)": [126, 84 + 84 / p, 84 + 84 / p, 126 / p + 32]},
        title=f"memory per device, {p} devices", ylabel="KiB"),
    "placement": lambda p: placement_figure_data([1024, 1024 // p, 1024], 4096, p),
    "ring reduce-scatter": ring_reduce_scatter_figure_data,
    "collectives grids": _collectives_grids,
}
SAVED = {
    "bench": lambda: bench_figure_data(saved_results()),
    "bench steps": lambda: steps_figure_data(saved_results()),
    "cluster 2x2": lambda: cluster_figure_data(saved_cluster_results("2x2")),
    "cluster 2x4": lambda: cluster_figure_data(saved_cluster_results("2x4")),
    "trade-off": lambda: tradeoff_figure_data(saved_strategy_results()),
    "held-out losses": lambda: heldout_figure_data(
        saved_strategy_results(),
        ["data_parallel", "bf16", "int8", "topk", "topk_ef", "topk_ef 0.6%", "powersgd"],
        steps_only_without=["bf16", "int8"], from_step=96),
    "local SGD": lambda: local_sgd_figure_data(saved_strategy_results(), [1, 4, 8, 16]),
    "training steps": lambda: step_figure_data(saved_training_results(),
                                               alpha_s={"50mbit": 4e-4, "10gbit": 5e-4}),
    "leads across a band": lambda: {"panels": [lead_figure_data(  # step 20's two panels
        {rate: ((0.95, 0.96, 0.97, 0.98), [[x * lead for x in (0.97, 1.0, 1.04)]] * 4)
         for rate, lead in (("50 Mbit/s", 9.8), ("200 Mbit/s", 3.9), ("1 Gbit/s", 1.1),
                            ("10 Gbit/s", 0.47))},
        title=f"{scheme} against data parallelism, batch 128", ylabel="lead (× sooner)",
    )["panels"][0] for scheme in ("int8", "topk_ef")]},
    "streaming schedule": lambda: schedule_figure_data(
        [(e.step, e.fragment) for e in schedule(32, local_steps=16, fragments=4, overlap=2)
         if e.kind == "send"], fragments=4, tau=2, steps=33),
    "held-out loss against wall-clock time": lambda: wall_clock_figure_data(
        {name: [c.heldout_loss for c in curves_of(saved_streaming_curves(), name).values()]
         for name in ("dp_adamw", "diloco", "streaming_diloco")},
        {rate: {"dp_adamw": 4.0 / mbit, "diloco": 0.04 + 0.25 / mbit,
                "streaming_diloco": 0.04 + 0.01 / mbit}
         for rate, mbit in (("10mbit", 10), ("50mbit", 50), ("200mbit", 200), ("1gbit", 1000))},
        floor=0.085, targets={"95 % gone": 0.22, "99 % gone": 0.11}, ceiling=0.66),
    "DiLoCo sweep": lambda: diloco_figure_data(saved_diloco_results()),
    "ring budget": lambda: model_figure_data(
        [2, 4, 8, 16, 32, 64], {"all-reduce, sent": [1.0, 1.5, 1.75, 1.88, 1.94, 1.97],
                                "stored: N/p": [0.5, 0.25, 0.125, 0.06, 0.03, 0.016]},
        title="Ring model, N = 1 MiB (dotted: 2N)", xlabel="ranks p", ylabel="MiB per rank",
        hline=2),
}
CASES = [pytest.param(build, p, id=f"{name}, p={p}")
         for name, build in BY_DEVICES.items() for p in (2, 4, 8)]
CASES += [pytest.param(lambda p, build=build: build(), None, id=name)
          for name, build in SAVED.items()]


class _Drawn(NamedTuple):
    text: str
    box: object  # its window extent, axis-aligned
    rotation: float  # degrees
    anchor: tuple  # display coordinates
    height: float  # the font's size in pixels


def _touch(one: _Drawn, other: _Drawn) -> bool:
    """Whether two drawn texts overlap. Two texts turned by the same angle (tick labels at 45°)
    overlap only if their lines are closer than a line's height; their axis-aligned boxes
    overlap long before that."""
    if not one.box.overlaps(other.box):
        return False
    if one.rotation == other.rotation != 0:
        angle = np.radians(one.rotation)
        dx, dy = np.subtract(other.anchor, one.anchor)
        return abs(dx * np.sin(angle) - dy * np.cos(angle)) < 0.9 * min(one.height, other.height)
    return True


def _drawn_texts(fig, monkeypatch) -> list[_Drawn]:
    """(text, window extent) of every text the figure's drawing puts on the canvas (tick labels
    outside the view are never drawn, so they are not counted)."""
    drawn, draw = [], Text.draw

    def recording(self, renderer):
        draw(self, renderer)
        if self.get_visible() and self.get_text().strip():
            drawn.append(_Drawn(self.get_text(), self.get_window_extent(renderer),
                                self.get_rotation(), self.get_transform().transform(
                                    self.get_unitless_position()),
                                self.get_fontsize() * fig.dpi / 72))

    monkeypatch.setattr(Text, "draw", recording)
    FigureCanvasAgg(fig).draw()
    monkeypatch.undo()
    return drawn


@pytest.mark.parametrize("build, p", CASES)
def test_the_drawn_figure_has_no_overlapping_text_and_stays_on_its_canvas(build, p, monkeypatch):
    fig = plot_figure(build(p))
    drawn = _drawn_texts(fig, monkeypatch)
    renderer = FigureCanvasAgg(fig).get_renderer()
    touching = [f"{a.text!r} and {b.text!r}" for a, b in itertools.combinations(drawn, 2)
                if _touch(a, b)]
    assert touching == []
    page = fig.bbox
    outside = [t.text for t in drawn for box in [t.box]
               if not (page.x0 <= box.x0 and box.x1 <= page.x1 and page.y0 <= box.y0
                       and box.y1 <= page.y1)]
    outside += [f"panel {i}" for i, ax in enumerate(fig.axes)
                if not page.contains(*ax.get_window_extent(renderer).p0)
                or not page.contains(*ax.get_window_extent(renderer).p1)]
    assert outside == []
    image = Image.open(io.BytesIO(fig.png()))
    assert round(image.info["dpi"][0]) == DPI
    assert image.width <= MAX_WIDTH * DPI


@pytest.mark.parametrize("build, p", CASES)
def test_the_alt_text_says_what_each_panel_shows(build, p):
    """Each panel's alt text says, past what it plots, what it shows with the data's numbers:
    where the series end, which bar is largest, what a grid's values span."""
    for panel in build(p)["panels"]:
        alt = describe({"panels": [panel]}).replace("(log scale)", "")
        shows = {"line": ("At the last point", "It goes from"), "bar": ("(",),
                 "grid": ("Values from", "Every value held is")}[panel["kind"]]
        assert any(words in alt.split(panel["title"])[-1] for words in shows), alt
