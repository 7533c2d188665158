"""Figure data as plain dicts, a validator, and one renderer for any valid figure data.

The data format (the seed's, plus a title per panel)::

    {'panels': [{'kind': 'bar', 'title': '...', 'labels': [...], 'ylabel': '...',
                 'series': [{'label': '...', 'y': [...]}]},
                {'kind': 'line', 'title': '...', 'x': [...], 'xlabel': '...', 'ylabel': '...',
                 'series': [{'label': '...', 'y': [...]}]}]}

A bar panel has one bar per label; a line panel one point per ``x``; a grid panel (``cells``: one
row per device, one column per position of a vector, ``None`` where the device holds nothing)
shows who holds which values, built with ``holdings``. Every panel has a ``title``
and a ``ylabel``; a line panel an ``xlabel`` too (units belong in the labels). Optional fields:

- panel ``xscale`` / ``yscale``: ``'linear'`` or ``'log'`` (a log x axis is drawn in powers of 2,
  the sizes and device counts of this course);
- panel ``xunit``: ``'bytes'`` writes x ticks as B, KiB, MiB;
- panel ``hline``: a y value drawn as a thin reference line (1 on ratio plots);
- panel ``vline``: an x value drawn as a thin line (to mark a best size);
- series ``style``: ``'measured'`` (markers, the default) or ``'model'`` (dashed, no markers);
- series ``low`` / ``high``: a band around the line (the interquartile range of a measurement);
- series ``color``: a matplotlib colour (``'C0'``…), to pair a model with its measurement;
- series ``x`` (line panels): the series' own x values, when series are measured at different
  x (a loss against the bytes each scheme has sent); the panel's ``x`` then sets the ticks.

The house style: at most three panels in a row, legends below the axes (never over the data).
"""

from __future__ import annotations

import functools
import io
import numbers
from typing import Sequence

from course_utils.cost import ring_bytes
from course_utils.display import format_bytes

KINDS = ("bar", "line", "grid")
SCALES = ("linear", "log")
STYLES = ("measured", "model")
PER_ROW = 3
# inches of room around the panels (left, right, below for legends, above) that labels and
# legends may reach into; ``png`` crops what stays white
ROOM = {"left": 0.8, "right": 0.4, "bottom": 2.0, "top": 0.3}
MAX_TICKS = 8


def placement_figure_data(local_sizes: Sequence[int], gradient_nbytes: int, ranks: int) -> dict:
    """The seed's two panels: values stored per device, and modeled ring bytes per rank.

    Args:
        local_sizes: values one device stores after all-reduce, after reduce-scatter, after gather.
        gradient_nbytes: size of the whole gradient in bytes.
        ranks: number of devices p.

    Examples:
        >>> data = placement_figure_data([8, 2, 8], 32, 4)
        >>> data['panels'][1]['series'][0]['y']
        [48.0, 24.0, 48.0]
    """
    if len(local_sizes) != 3:
        raise ValueError(
            "local_sizes needs 3 values (all-reduce, reduce-scatter, after gather), "
            f"got {len(local_sizes)}"
        )
    ring = ring_bytes(gradient_nbytes, ranks)
    return {
        "panels": [
            {
                "kind": "bar",
                "title": "What one device stores (read from the arrays)",
                "labels": ["all-reduce", "reduce-scatter", "after gather"],
                "ylabel": "values stored per device",
                "series": [{"label": "observed local shape", "y": [int(n) for n in local_sizes]}],
            },
            {
                "kind": "bar",
                "title": f"What one rank sends (ring model, p = {ranks})",
                "labels": ["all-reduce", "reduce-scatter", "scatter + gather"],
                "ylabel": "modeled bytes per rank",
                "series": [
                    {
                        "label": "idealized ring payload",
                        "y": [
                            ring["all_reduce"],
                            ring["reduce_scatter"],
                            ring["reduce_scatter"] + ring["all_gather"],
                        ],
                    }
                ],
            },
        ]
    }


def _is_number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def holdings(
    blocks: Sequence[Sequence[float]], length: int, offsets: Sequence[int] | None = None
) -> list[list[float | None]]:
    """Rows of a grid panel: device i holds ``blocks[i]`` from position ``offsets[i]`` (default 0)
    of a vector of ``length`` positions, and nothing elsewhere.

    Examples:
        >>> holdings([[1.0], [2.0]], 2, offsets=[0, 1])
        [[1.0, None], [None, 2.0]]
    """
    offsets = [0] * len(blocks) if offsets is None else list(offsets)
    if len(offsets) != len(blocks):
        raise ValueError(f"{len(blocks)} blocks but {len(offsets)} offsets; give one per device")
    rows = []
    for block, start in zip(blocks, offsets):
        values = [float(v) for v in block]
        if start < 0 or start + len(values) > length:
            raise ValueError(
                f"a block of {len(values)} values at offset {start} does not fit in {length}"
            )
        rows.append([None] * start + values + [None] * (length - start - len(values)))
    return rows


def array_holdings(array) -> list[list[float | None]]:
    """Rows of a grid panel read from a placed 1-D ``jax.Array``: each addressable device's shard
    at the positions its index says (device-id order).

    A replicated vector gives full rows; one split by features gives one slice per row.
    """
    if len(getattr(array, "shape", ())) != 1 or not hasattr(array, "addressable_shards"):
        raise ValueError("array_holdings needs a placed 1-D jax.Array (use jax.device_put first)")
    shards = sorted(array.addressable_shards, key=lambda s: s.device.id)
    offsets = [s.index[0].indices(array.shape[0])[0] for s in shards]
    return holdings([list(map(float, s.data)) for s in shards], array.shape[0], offsets)


def grid_panel(
    title: str,
    cells: list[list[float | None]],
    *,
    xlabel: str = "position",
    value_range: tuple[float, float] | None = None,
) -> dict:
    """A grid panel: one row per device (device 0 on top), one column per position.

    ``value_range`` fixes the colour scale (to compare colours across panels); by default each
    panel scales to its own values.
    """
    panel = {"kind": "grid", "title": title, "cells": cells, "xlabel": xlabel, "ylabel": "device"}
    if value_range is not None:
        panel["value_range"] = [float(v) for v in value_range]
    return panel


def _check_labels(panel: dict, where: str) -> None:
    """Labels are strings; every panel has a title and a y label, and all but bar panels an x
    label."""
    needed = ("title", "ylabel") + (("xlabel",) if panel["kind"] != "bar" else ())
    for field in ("title", "xlabel", "ylabel"):
        if field in panel and not isinstance(panel[field], str):
            raise ValueError(f"{where}.{field} must be a string")
        if field in needed and not panel.get(field):
            raise ValueError(f"{where} needs a {field} (with units, where there are some)")


def _validate_grid(panel: dict, where: str) -> None:
    cells = panel.get("cells")
    if not isinstance(cells, list) or not cells or not all(isinstance(r, list) for r in cells):
        raise ValueError(f"{where}.cells must be a non-empty list of rows, one per device")
    if len({len(r) for r in cells}) != 1 or not cells[0]:
        raise ValueError(f"{where}.cells rows must all have the same, non-zero length")
    if not all(v is None or _is_number(v) for r in cells for v in r):
        raise ValueError(f"{where}.cells must hold numbers, or None where a device holds nothing")
    _check_labels(panel, where)
    bounds = panel.get("value_range")
    if bounds is not None and not (
        isinstance(bounds, list) and len(bounds) == 2 and all(_is_number(b) for b in bounds)
        and bounds[0] < bounds[1]
    ):
        raise ValueError(f"{where}.value_range must be [low, high] with low < high")


def validate_figure_data(data) -> None:
    """Raise ``ValueError`` naming the first bad field; return ``None`` for valid figure data.

    Examples:
        >>> validate_figure_data({'panels': []})
        Traceback (most recent call last):
        ...
        ValueError: figure data: 'panels' must be a non-empty list of panels
    """
    if not isinstance(data, dict) or not isinstance(data.get("panels"), list) or not data["panels"]:
        raise ValueError("figure data: 'panels' must be a non-empty list of panels")
    for i, panel in enumerate(data["panels"]):
        where = f"figure data: panels[{i}]"
        if not isinstance(panel, dict):
            raise ValueError(f"{where} must be a dict, got {type(panel).__name__}")
        kind = panel.get("kind")
        if kind not in KINDS:
            raise ValueError(f"{where}.kind is {kind!r}; use one of {', '.join(KINDS)}")
        if kind == "grid":
            _validate_grid(panel, where)
            continue
        axis_field = "labels" if kind == "bar" else "x"
        ticks = panel.get(axis_field)
        if not isinstance(ticks, list) or not ticks:
            raise ValueError(f"{where}.{axis_field} must be a non-empty list")
        if kind == "line" and not all(_is_number(t) for t in ticks):
            raise ValueError(f"{where}.x must hold numbers only")
        series = panel.get("series")
        if not isinstance(series, list) or not series:
            raise ValueError(f"{where}.series must be a non-empty list")
        for j, s in enumerate(series):
            if not isinstance(s, dict) or not isinstance(s.get("y"), list):
                raise ValueError(f"{where}.series[{j}].y must be a list of numbers")
            own_x = kind == "line" and "x" in s
            if own_x and (not isinstance(s["x"], list) or not all(map(_is_number, s["x"]))):
                raise ValueError(f"{where}.series[{j}].x must be a list of numbers")
            expected, name = (len(s["x"]), "its x") if own_x else (len(ticks), axis_field)
            if len(s["y"]) != expected:
                raise ValueError(
                    f"{where}.series[{j}].y has {len(s['y'])} values but {name} has {expected}"
                )
            bad = [v for v in s["y"] if not _is_number(v)]
            if bad:
                raise ValueError(f"{where}.series[{j}].y holds non-numeric values {bad[:3]!r}")
        _check_labels(panel, where)
        for j, s in enumerate(series):
            if s.get("style", "measured") not in STYLES:
                raise ValueError(
                    f"{where}.series[{j}].style is {s['style']!r}; use one of {', '.join(STYLES)}"
                )
            for band in ("low", "high"):
                if band in s and (
                    not isinstance(s[band], list)
                    or len(s[band]) != len(s["y"])
                    or not all(_is_number(v) for v in s[band])
                ):
                    raise ValueError(
                        f"{where}.series[{j}].{band} must be {len(s['y'])} numbers, like y"
                    )
        if panel.get("xunit") not in (None, "bytes"):
            raise ValueError(f"{where}.xunit is {panel['xunit']!r}; use 'bytes' or leave it out")
        if any("color" in s and not isinstance(s["color"], str) for s in series):
            raise ValueError(f"{where}: a series color must be a string such as 'C0'")
        for field in ("hline", "vline"):
            if field in panel and not _is_number(panel[field]):
                raise ValueError(f"{where}.{field} must be a number")
        for field in ("xscale", "yscale"):
            if panel.get(field, "linear") not in SCALES:
                raise ValueError(
                    f"{where}.{field} is {panel[field]!r}; use one of {', '.join(SCALES)}"
                )


def _log2_ticks(ax, x: Sequence[float], unit: str | None) -> None:
    """Ticks at the data's own x values (at most ``MAX_TICKS`` of them), labelled in bytes or
    plainly, with no minor ticks: log₂ sizes that do not overlap."""
    step = -(-len(x) // MAX_TICKS)
    ticks = list(x)[::-1][::step][::-1]  # always label the largest value
    labels = [format_bytes(t) if unit == "bytes" else _compact(t) for t in ticks]
    from matplotlib.ticker import NullLocator

    ax.set_xticks(ticks, labels, rotation=30 if unit == "bytes" else 0)
    ax.xaxis.set_minor_locator(NullLocator())


def _compact(value: float) -> str:
    """A short tick label: 0.0151, 512, 65.5k, 4.19M."""
    if value < 1:
        return f"{value:.3g}"
    if value < 1e4:
        return f"{value:g}"
    if value < 1e6:
        return f"{value / 1e3:.3g}k"
    return f"{value / 1e6:.3g}M"


def _draw_bar(ax, panel: dict) -> None:
    n = len(panel["series"])
    width = 0.8 / n
    for k, s in enumerate(panel["series"]):
        positions = [i + (k - (n - 1) / 2) * width for i in range(len(panel["labels"]))]
        bars = ax.bar(positions, s["y"], width=width, label=s.get("label"))
        ax.bar_label(bars, fmt="%g", fontsize=8)
    crowded = len(panel["labels"]) > 4  # long labels side by side would overlap
    ax.set_xticks(range(len(panel["labels"])), panel["labels"], rotation=35 if crowded else 0,
                  ha="right" if crowded else "center")


def _draw_line(ax, panel: dict) -> None:
    for s in panel["series"]:
        x = s.get("x", panel["x"])
        color = {"color": s["color"]} if "color" in s else {}
        if s.get("style") == "model":
            ax.plot(x, s["y"], linestyle="--", label=s.get("label"), **color)
        else:
            (line,) = ax.plot(x, s["y"], marker="o", markersize=4, label=s.get("label"), **color)
            if "low" in s and "high" in s:
                ax.fill_between(x, s["low"], s["high"], color=line.get_color(), alpha=0.2,
                                linewidth=0)
    if "hline" in panel:
        ax.axhline(panel["hline"], color="0.4", linewidth=0.8, linestyle=":")
    if "vline" in panel:
        ax.axvline(panel["vline"], color="0.4", linewidth=0.8, linestyle=":")
    ax.set_xlabel(panel["xlabel"])
    ax.set_yscale(panel.get("yscale", "linear"))
    if panel.get("yscale") == "log":
        _plain_log_labels(ax.yaxis)
    if panel.get("xscale") == "log":
        ax.set_xscale("log", base=2)
        _log2_ticks(ax, panel["x"], panel.get("xunit"))
    elif panel.get("xunit") == "bytes":
        _log2_ticks(ax, panel["x"], "bytes")


def _plain_log_labels(axis) -> None:
    """Label a log axis in the short plain numbers of ``_compact`` (100, 2k, 10k, 1M) instead of
    matplotlib's default 10^k in mathtext, whose parser costs a noticeable part of a second to
    build in each kernel. Which ticks get a label stays matplotlib's choice (minor ticks only
    when the axis spans few decades)."""
    from matplotlib.ticker import LogFormatter

    class Plain(LogFormatter):
        def __call__(self, x, pos=None):
            return _compact(x) if super().__call__(x, pos) else ""

    axis.set_major_formatter(Plain(10))
    axis.set_minor_formatter(Plain(10, labelOnlyBase=False))


def _draw_grid(ax, panel: dict) -> None:
    import numpy as np

    cells = panel["cells"]
    values = np.ma.masked_invalid(np.array([[np.nan if v is None else v for v in r] for r in cells],
                                           dtype=float))
    lo, hi = panel.get("value_range") or (float(values.min()), float(values.max()))
    ax.imshow(values, cmap="viridis", aspect="auto", vmin=lo, vmax=hi)
    ax.set_facecolor("0.92")  # positions a device does not hold
    if len(cells[0]) <= 16:
        for i, row in enumerate(cells):
            for j, v in enumerate(row):
                if v is not None:
                    dark = hi > lo and (v - lo) / (hi - lo) < 0.5
                    ax.text(j, i, f"{v:.2g}", ha="center", va="center", fontsize=7,
                            color="white" if dark else "black")
    ax.set_yticks(range(len(cells)), [str(i) for i in range(len(cells))])
    step = -(-len(cells[0]) // 16)
    ax.set_xticks(range(0, len(cells[0]), step))
    ax.set_xlabel(panel["xlabel"])


@functools.cache
def _figure_class():
    """``Figure`` with a PNG representation, so that Jupyter shows it as a cell's value without
    pyplot or ``%matplotlib inline`` (importing pyplot costs each kernel about half a second)."""
    from matplotlib import figure

    class Figure(figure.Figure):  # the same name, so a cell's text output reads as usual
        def png(self) -> bytes:
            """The figure as PNG bytes, cropped to what is drawn plus a margin of 0.1 inch.

            ``savefig(bbox_inches="tight")`` crops the same way, but it lays the figure out
            once more to find the box, which doubles the cost of drawing; here the figure is
            drawn once on its canvas, which has room (``ROOM``) around the panels for labels
            and legends, and the white border is cut from the pixels."""
            import numpy as np
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from PIL import Image

            canvas = FigureCanvasAgg(self)
            canvas.draw()
            pixels = np.asarray(canvas.buffer_rgba())
            ink = (pixels[..., :3] < 255).any(axis=-1)
            rows, columns = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
            pad = round(0.1 * self.dpi)
            top, left = max(rows[0] - pad, 0), max(columns[0] - pad, 0)
            cropped = pixels[top:rows[-1] + pad + 1, left:columns[-1] + pad + 1]
            buffer = io.BytesIO()
            Image.fromarray(cropped).save(buffer, format="png")
            return buffer.getvalue()

        def _repr_png_(self) -> bytes:
            return self.png()

    return Figure


def plot_figure(data: dict):
    """Render valid figure data as a matplotlib ``Figure``: one axes per panel, at most three in
    a row.

    The figure is built without pyplot, so nothing global changes; in Jupyter it displays as the
    cell's value (a PNG, cropped to what is drawn), and ``fig.png()`` gives those bytes to write
    to a file.
    The spacing between panels is fixed rather than computed by a layout engine, which would draw
    the figure once more.
    """
    validate_figure_data(data)
    panels = data["panels"]
    columns = 2 if len(panels) == 4 else min(len(panels), PER_ROW)
    rows = -(-len(panels) // columns)
    above_last_row = panels[: (rows - 1) * columns]
    legends = any(s.get("label") for panel in above_last_row for s in panel.get("series", []))
    width, height = 4.4 * columns, 3.9 * rows  # inches for the panels
    fig = _figure_class()(figsize=(width + ROOM["left"] + ROOM["right"],
                                   height + ROOM["bottom"] + ROOM["top"]))
    across, up = fig.get_size_inches()
    fig.subplots_adjust(left=(0.1 * width + ROOM["left"]) / across,
                        right=(0.97 * width + ROOM["left"]) / across,
                        bottom=(0.11 * height + ROOM["bottom"]) / up,
                        top=(0.88 * height + ROOM["bottom"]) / up,
                        wspace=0.32, hspace=0.9 if legends else 0.45)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax in axes[len(panels):]:
        ax.remove()
    for ax, panel in zip(axes, panels):
        {"bar": _draw_bar, "line": _draw_line, "grid": _draw_grid}[panel["kind"]](ax, panel)
        ax.set_ylabel(panel["ylabel"])
        ax.set_title(panel["title"], fontsize=10)
        labelled = sum(bool(s.get("label")) for s in panel.get("series", []))
        if labelled:  # below the axes and their tick labels, clear of the data
            below = -0.36 if panel.get("xunit") == "bytes" else -0.24
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, below),
                      ncols=2 if labelled > 3 else 1, frameon=False)
    return fig
