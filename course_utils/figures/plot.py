"""One renderer for any valid figure data (``figures``): matplotlib without pyplot.

The house style: at most three panels in a row, legends below the axes (never over the data),
log axes labelled in plain numbers, bytes in B, KiB and MiB.
"""

from __future__ import annotations

import functools
import io
import textwrap
from typing import Sequence

from course_utils.display import format_bytes
from course_utils.figures.data import validate_figure_data

PER_ROW = 3
# inches of room around the panels (left, right, below for legends, above) that labels and
# legends may reach into; ``png`` crops what stays background
ROOM = {"left": 0.8, "right": 0.4, "bottom": 2.0, "top": 0.3}
MAX_TICKS = 8


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
    labels = panel["labels"]
    if not crowded and sum(len(label) for label in labels) > 32:  # wrap at spaces instead
        labels = [textwrap.fill(label, 10, break_long_words=False) for label in labels]
    ax.set_xticks(range(len(labels)), labels, rotation=35 if crowded else 0,
                  ha="right" if crowded else "center")


def _draw_line(ax, panel: dict) -> None:
    for s in panel["series"]:
        x = s.get("x", panel["x"])
        color = {"color": s["color"]} if "color" in s else {}
        if s.get("style") == "model":
            ax.plot(x, s["y"], linestyle="--", label=s.get("label"), **color)
        else:
            (line,) = ax.plot(x, s["y"], marker="o", markersize=4, label=s.get("label"), **color)
            for k, (xi, yi, text) in enumerate(zip(x, s["y"], s.get("point_labels", ()))):
                ax.annotate(text, (xi, yi), textcoords="offset points",  # above, below, above…
                            xytext=(4, 4 if k % 2 == 0 else -10), fontsize=7,
                            color=line.get_color())
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
            and legends, and the border of background is cut from the pixels. Should anything
            reach the canvas's edge (a legend wider than the room), it falls back to
            ``savefig(bbox_inches="tight")``, which cuts nothing."""
            import numpy as np
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from PIL import Image

            canvas = FigureCanvasAgg(self)
            canvas.draw()
            pixels = np.asarray(canvas.buffer_rgba())
            ink = (pixels != pixels[0, 0]).any(axis=-1)  # anything unlike the background
            buffer = io.BytesIO()
            if ink[[0, -1]].any() or ink[:, [0, -1]].any():  # something reached the edge
                self.savefig(buffer, format="png", bbox_inches="tight")
            else:
                rows, columns = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
                pad = round(0.1 * self.dpi)
                top, left = max(rows[0] - pad, 0), max(columns[0] - pad, 0)
                cropped = pixels[top:rows[-1] + pad + 1, left:columns[-1] + pad + 1]
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
        ax.set_title(panel["title"], fontsize=10, y=1.0)  # y given: no search for room above
        labelled = sum(bool(s.get("label")) for s in panel.get("series", []))
        if labelled:  # below the axes and their tick labels, clear of the data
            below = -0.36 if panel.get("xunit") == "bytes" else -0.24
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, below),
                      ncols=2 if labelled > 3 else 1, frameon=False)
    return fig
