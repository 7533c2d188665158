"""One renderer for any valid figure data (``figures``): matplotlib without pyplot.

The house style: at most two panels in a row and one legend beside them for the whole figure;
each series keeps its colour and marker in every panel (a palette that colour-blind readers and
greyscale print tell apart); series and bars carry human names (``NAMES``); axes carry plain
numbers (bytes in B … GiB, no offset or exponent), log axes a tick at every decade; value labels
that would overlap are left out; grids have a colour bar. PNG at ``DPI``, at most
``MAX_WIDTH`` inches wide.
"""

from __future__ import annotations

import functools
import io
import textwrap
from typing import Sequence

from course_utils.display import format_bytes
from course_utils.figures.data import validate_figure_data
from course_utils.figures.describe import describe
from course_utils.figures.labels import colour_slots, human, number_label

DPI = 200
MAX_WIDTH = 7.5  # inches, labels and legend included
PER_ROW = 2
# Okabe & Ito's colour-blind-safe palette (Wong, Nature Methods 8:441, 2011), with a marker and a
# line style each so that greyscale tells them apart too
# (its yellow left out: too faint on white)
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#000000")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
MAX_TICKS = 8
VALUE_FONT = 9  # points; a 7.5-inch figure shown ~700 px wide: 1 pt ≈ 1.3 px
FONT = {"tick": 10, "label": 11, "title": 11, "legend": 10}
TITLE_ROOM = 0.65  # inches above a panel for a title of two lines


class _Identities:
    """One colour and marker per series name across the whole figure: a strategy keeps its
    colour in every figure (``colour_slots``), other names take the free ones in order of
    appearance; a model series drawn in the colour of its measurement (``color`` given alike)
    shares it."""

    def __init__(self, names: list[str]):
        self.slots = colour_slots(names, len(PALETTE))

    def style(self, name: str) -> dict:
        if name not in self.slots:
            self.slots[name] = max(self.slots.values(), default=-1) + 1
        k = self.slots[name]  # past the palette: dotted, hollow markers
        return {"color": PALETTE[k % len(PALETTE)], "marker": MARKERS[k % len(MARKERS)],
                "again": k >= len(PALETTE)}


def _series_names(panel: dict) -> list[str | None]:
    """Each series' identity: its human label, or for a model series paired by ``color`` with
    a measured one, that one's."""
    by_color = {s["color"]: human(s.get("label") or "") for s in panel["series"]
                if "color" in s and s.get("style", "measured") == "measured"}
    names = []
    for s in panel["series"]:
        paired = s.get("style") == "model" and s.get("color") in by_color
        names.append(by_color[s["color"]] if paired else human(s.get("label") or "") or None)
    return names


def _grey(series: dict) -> str | None:
    """A literal non-cycle colour (``'0.4'``, ``'black'``) a series asks for, else ``None``."""
    color = series.get("color")
    return None if color is None or color.startswith("C") else color


def _log2_ticks(ax, x: Sequence[float], unit: str | None) -> None:
    """Ticks at the data's own x values (at most ``MAX_TICKS`` of them), labelled in bytes or
    plainly, with no minor ticks: log₂ sizes that do not overlap."""
    from matplotlib.ticker import NullLocator

    step = -(-len(x) // MAX_TICKS)
    ticks = sorted(set(x))[::-1][::step][::-1]  # always label the largest value
    labels = [format_bytes(t) if unit == "bytes" else number_label(t) for t in ticks]
    ax.set_xticks(ticks, labels, rotation=40 if unit == "bytes" else 0,
                  ha="right" if unit == "bytes" else "center", rotation_mode="anchor")
    ax.xaxis.set_minor_locator(NullLocator())


def _decades(axis) -> None:
    """A log₁₀ y axis: a labelled tick at every decade; at 2 and 5 too where fewer than three
    decades are in view (so that a value read off the axis has a label near it)."""
    import math

    from matplotlib.ticker import LogLocator, NullFormatter

    low, high = sorted(axis.axes.get_ylim())  # forces the autoscale the data asks for
    decades = math.floor(math.log10(high)) - math.ceil(math.log10(max(low, 1e-300))) + 1
    few = decades < 3  # two decade ticks or fewer in view: label 2 and 5 too
    axis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5) if few else (1,), numticks=30))
    axis.set_minor_locator(LogLocator(base=10, subs=range(2, 10), numticks=30))
    axis.set_major_formatter(_plain_formatter())
    axis.set_minor_formatter(NullFormatter())


def _plain(axis) -> None:
    """A linear axis in ``number_label``'s plain numbers: no offset, no ×10ⁿ."""
    axis.set_major_formatter(_plain_formatter())


def _draw_bar(ax, panel: dict, ids: _Identities) -> None:
    names = _series_names(panel)
    n = len(panel["series"])
    width = 0.8 / n
    for k, (s, name) in enumerate(zip(panel["series"], names)):
        positions = [i + (k - (n - 1) / 2) * width for i in range(len(panel["labels"]))]
        look = ids.style(name or f"series {k}")
        bars = ax.bar(positions, s["y"], width=width, label=name, color=_grey(s) or look["color"],
                      edgecolor="white", linewidth=0.5, hatch=("", "//", "..", "xx")[k % 4])
        for text in ax.bar_label(bars, labels=[number_label(v) for v in s["y"]],
                                 fontsize=VALUE_FONT, padding=1):
            text.set_gid("value")
    labels = [textwrap.fill(human(label), 10, break_long_words=False)
              for label in panel["labels"]]
    # the characters one label has room for side by side (0.6 em each), else turned by 60°
    room = ax.get_position().width * ax.figure.get_figwidth() * 72 / len(labels)
    longest = max(len(line) for label in labels for line in label.split("\n"))
    crowded = longest * 0.6 * FONT["tick"] > 0.9 * room
    ax.set_xticks(range(len(labels)), labels, rotation=60 if crowded else 0,
                  ha="right" if crowded else "center", rotation_mode="anchor")
    ax.margins(y=0.12)  # room above the tallest bar for its value


def _draw_line(ax, panel: dict, ids: _Identities) -> None:
    for k, (s, name) in enumerate(zip(panel["series"], _series_names(panel))):
        x = s.get("x", panel["x"])
        look = ids.style(name or f"series {k}")
        color = _grey(s) or look["color"]
        if s.get("style") == "model":
            ax.plot(x, s["y"], linestyle="--", linewidth=1.2, color=color, label=name)
            continue
        again = {"linestyle": ":", "markerfacecolor": "white"} if look["again"] else {}
        ax.plot(x, s["y"], marker=look["marker"], markersize=4, linewidth=1.4, color=color,
                label=name, **again)
        for j, (xi, yi, text) in enumerate(zip(x, s["y"], s.get("point_labels", ()))):
            note = ax.annotate(text, (xi, yi), textcoords="offset points",  # above, below, …
                               xytext=(4, 4 if j % 2 == 0 else -10), fontsize=VALUE_FONT,
                               color=color)
            note.set_gid("value")
        if "low" in s and "high" in s:
            ax.fill_between(x, s["low"], s["high"], color=color, alpha=0.2, linewidth=0)
    if "hline" in panel:
        ax.axhline(panel["hline"], color="0.4", linewidth=0.8, linestyle=":")
    if "vline" in panel:
        ax.axvline(panel["vline"], color="0.4", linewidth=0.8, linestyle=":")
    ax.set_xlabel(panel["xlabel"])
    if panel.get("yscale") == "log":
        ax.set_yscale("log")
        _decades(ax.yaxis)
    else:
        _plain(ax.yaxis)
    if panel.get("xscale") == "log":
        ax.set_xscale("log", base=2)
        _log2_ticks(ax, panel["x"], panel.get("xunit"))
    elif panel.get("xunit") == "bytes":
        _log2_ticks(ax, panel["x"], "bytes")
    else:
        _plain(ax.xaxis)


def _draw_grid(ax, panel: dict, fig) -> None:
    import numpy as np

    cells = panel["cells"]
    values = np.ma.masked_invalid(np.array([[np.nan if v is None else v for v in r] for r in cells],
                                           dtype=float))
    lo, hi = panel.get("value_range") or (float(values.min()), float(values.max()))
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    image = ax.imshow(values, cmap="viridis", aspect="auto", vmin=lo, vmax=hi, zorder=1)
    from matplotlib.patches import Rectangle

    ax.add_patch(Rectangle((-0.5, -0.5), len(cells[0]), len(cells), facecolor="white", hatch="//",
                           edgecolor="0.75", linewidth=0, zorder=0.5))  # positions not held
    bar = fig.colorbar(image, ax=ax, fraction=0.05, pad=0.03)
    bar.ax.yaxis.set_major_formatter(_plain_formatter())
    bar.ax.tick_params(labelsize=FONT["tick"] - 1)
    if all(float(v).is_integer() for row in cells for v in row if v is not None):
        from matplotlib.ticker import MaxNLocator

        bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))  # counts: whole ticks
    texts = [[None if v is None else number_label(v) for v in row] for row in cells]
    box = ax.get_position()  # in figure fractions; the cell's room in points decides
    across = box.width * fig.get_figwidth() * 72 / len(cells[0])
    tall = box.height * fig.get_figheight() * 72 / len(cells)
    longest = max((len(t) for row in texts for t in row if t), default=0)
    if longest and 0.62 * VALUE_FONT * longest + 2 <= across and VALUE_FONT + 2 <= tall:
        for i, row in enumerate(cells):
            for j, v in enumerate(row):
                if v is not None:
                    dark = (v - lo) / (hi - lo) < 0.5
                    ax.text(j, i, texts[i][j], ha="center", va="center", fontsize=VALUE_FONT,
                            color="white" if dark else "black")
    ax.set_yticks(range(len(cells)), [str(i) for i in range(len(cells))])
    step = -(-len(cells[0]) // 16)
    ax.set_xticks(range(0, len(cells[0]), step))
    ax.set_xlabel(panel["xlabel"])


def _plain_formatter():
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: number_label(v))


def _declutter(fig) -> None:
    """Hide x tick labels that would touch the one to their right (the largest value is always
    kept), then remove value labels that touch a tick label, a title or a value label kept
    before them, or that leave their axes (the first kept wins; nothing else moves)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()

    def box(text):
        return text.get_window_extent(renderer).padded(1.5)

    for ax in fig.axes:
        kept = []
        ticks = [] if ax.containers else ax.get_xticklabels()  # a bar panel names every bar
        for label in reversed([t for t in ticks if t.get_text()]):
            if any(box(label).overlaps(other) for other in kept):
                label.set_visible(False)
            else:
                kept.append(box(label))
        fixed = kept + [box(t) for t in [*ax.get_yticklabels(), ax.title]
                        if t.get_visible() and t.get_text()]
        frame = ax.get_window_extent(renderer).expanded(1.0, 1.12)  # room above the axes
        for text in [t for t in ax.texts if t.get_gid() == "value"]:
            extent = box(text)
            inside = frame.contains(extent.x0, extent.y0) and frame.contains(extent.x1, extent.y1)
            if not inside or any(extent.overlaps(other) for other in fixed):
                text.remove()
            else:
                fixed.append(extent)


@functools.cache
def _figure_class():
    """``Figure`` with a PNG representation, so that Jupyter shows it as a cell's value without
    pyplot or ``%matplotlib inline`` (importing pyplot costs each kernel about half a second)."""
    from matplotlib import figure

    class Figure(figure.Figure):  # the same name, so a cell's text output reads as usual
        def png(self) -> bytes:
            """The figure as PNG bytes at ``DPI`` (recorded in the file), cropped to what is
            drawn plus a margin of 0.1 inch.

            ``savefig(bbox_inches="tight")`` would lay the figure out once more to find the
            box; here it is drawn once and the border of background is cut from the pixels
            (or, should anything reach the canvas's edge, ``savefig`` crops)."""
            import numpy as np
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from PIL import Image

            canvas = FigureCanvasAgg(self)
            canvas.draw()
            pixels = np.asarray(canvas.buffer_rgba())
            ink = (pixels != pixels[0, 0]).any(axis=-1)  # anything unlike the background
            buffer = io.BytesIO()
            if ink[[0, -1]].any() or ink[:, [0, -1]].any():  # something reached the edge
                self.savefig(buffer, format="png", bbox_inches="tight", dpi=DPI)
            else:
                rows, columns = np.flatnonzero(ink.any(axis=1)), np.flatnonzero(ink.any(axis=0))
                pad = round(0.1 * DPI)
                top, left = max(rows[0] - pad, 0), max(columns[0] - pad, 0)
                cropped = pixels[top:rows[-1] + pad + 1, left:columns[-1] + pad + 1]
                Image.fromarray(cropped).save(buffer, format="png", dpi=(DPI, DPI))
            return buffer.getvalue()

        def _repr_png_(self):
            """The PNG, shown at its size in inches (96 CSS pixels each), with its alt text."""
            data = self.png()
            width = int.from_bytes(data[16:20], "big")  # the IHDR chunk's width
            return data, {"width": round(width * 96 / DPI), "alt": getattr(self, "alt", "")}

    return Figure


def _legend_width(labels: list[str]) -> float:
    """Inches for the legend column: the longest wrapped line at 10 pt, plus the handle."""
    longest = max((len(line) for label in labels for line in label.split("\n")), default=0)
    return 0.55 + 0.078 * longest if labels else 0.0


def plot_figure(data: dict):
    """Render valid figure data as a matplotlib ``Figure``: one axes per panel, at most two in a
    row, one legend beside them.

    The figure is built without pyplot, so nothing global changes; in Jupyter it displays as the
    cell's value (a PNG, cropped to what is drawn), and ``fig.png()`` gives those bytes to write
    to a file. The spacing between panels is fixed rather than computed by a layout engine,
    which would draw the figure once more.
    """
    validate_figure_data(data)
    panels = data["panels"]
    columns = min(len(panels), PER_ROW)
    rows = -(-len(panels) // columns)
    names = list(dict.fromkeys(n for panel in panels if panel["kind"] != "grid"
                               for n in _series_names(panel) if n))
    wrapped = [textwrap.fill(n, 20, break_long_words=False) for n in names]
    legend = _legend_width(wrapped)
    # a wide legend beside two panels would squeeze them: it goes below them, in columns
    under = columns > 1 and (legend > 1.8 or len(names) > 6)
    legend_rows = -(-len(names) // 2) if under else 0
    legend_height = 0.24 * legend_rows + 0.1 * bool(under)
    legend = 0.0 if under else legend
    left, gap, below = 0.75, 0.95, 0.9  # inches: y labels, between panels, x labels
    grids = any(panel["kind"] == "grid" for panel in panels)
    width = (MAX_WIDTH - 0.1 - left - (legend or 0.45 * grids) - gap * (columns - 1)) / columns
    height = min(0.72 * width, 3.2)
    tall = rows * (height + below + TITLE_ROOM) + 0.1 + legend_height
    fig = _figure_class()(figsize=(MAX_WIDTH, tall), dpi=DPI)
    across, up = fig.get_size_inches()
    room = legend or (0.45 if grids else 0.1)  # the legend, or a colour bar's labels
    fig.subplots_adjust(left=left / across, right=(across - 0.1 - room) / across,
                        bottom=(below + legend_height) / up, top=1 - (TITLE_ROOM - 0.05) / up,
                        wspace=gap / width + (0.15 if grids else 0),
                        hspace=(below + TITLE_ROOM) / height)
    axes = fig.subplots(rows, columns, squeeze=False).ravel()
    for ax in axes[len(panels):]:
        ax.remove()
    ids = _Identities(names)  # the legend's names fix the colours
    for ax, panel in zip(axes, panels):
        ax.tick_params(labelsize=FONT["tick"])
        if panel["kind"] == "grid":
            _draw_grid(ax, panel, fig)
        else:
            {"bar": _draw_bar, "line": _draw_line}[panel["kind"]](ax, panel, ids)
        ax.set_ylabel(panel["ylabel"], fontsize=FONT["label"])
        ax.xaxis.label.set_fontsize(FONT["label"])
        ax.set_title(textwrap.fill(panel["title"], int(width * 12), break_on_hyphens=False),
                     fontsize=FONT["title"], y=1.0)
    if names:
        handles = _legend_handles(fig, names)
        if any(s.get("style") == "model" and n in names and not _grey(s)
               for panel in panels if panel["kind"] != "grid"
               for s, n in zip(panel["series"], _series_names(panel))
               if s.get("label") and human(s["label"]) != n):
            from matplotlib.lines import Line2D

            handles.append(Line2D([], [], color="0.3", linestyle="--"))
            wrapped.append("dashed: the model of\nthe same colour")
        if under:
            fig.legend(handles, [w.replace("\n", " ") for w in wrapped], ncols=2,
                       fontsize=FONT["legend"], loc="lower center", frameon=False,
                       bbox_to_anchor=(0.5, 0.05 / up))
        else:
            box = fig.legend(handles, wrapped, fontsize=FONT["legend"], loc="center right",
                             frameon=False, bbox_to_anchor=(1 - 0.1 / across, 0.5))
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            drawn = box.get_window_extent(FigureCanvasAgg(fig).get_renderer())
            fig.subplots_adjust(right=(drawn.x0 / fig.dpi - 0.15) / across)  # its real width
    _declutter(fig)
    fig.alt = describe(data)  # the site's alt text (figures.describe)
    return fig


def _legend_handles(fig, names: list[str]) -> list:
    """One handle per series name, the first artist drawn under it (a line keeps its marker or
    its dash, a bar its colour and hatch)."""
    found = {}
    for ax in fig.axes:
        for artist in [*ax.lines, *ax.containers]:
            label = artist.get_label()
            if label in names and label not in found:
                found[label] = artist
    return [found[n] for n in names]
