"""Figure data as plain dicts, a validator, and one renderer for any valid figure data.

The data format (the seed's)::

    {'panels': [{'kind': 'bar', 'labels': [...], 'ylabel': '...',
                 'series': [{'label': '...', 'y': [...]}]},
                {'kind': 'line', 'x': [...], 'xlabel': '...', 'ylabel': '...',
                 'series': [{'label': '...', 'y': [...]}]}]}

A bar panel has one bar per label; a line panel one point per ``x``. Optional fields: ``title``,
``xlabel``, ``ylabel`` (strings) and, for line panels, ``xscale`` / ``yscale`` (``'linear'`` or
``'log'``).
"""

from __future__ import annotations

import numbers
from typing import Sequence

from course_utils.cost import ring_bytes

KINDS = ("bar", "line")
SCALES = ("linear", "log")


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
                "labels": ["all-reduce", "reduce-scatter", "after gather"],
                "ylabel": "values stored per device",
                "series": [{"label": "observed local shape", "y": [int(n) for n in local_sizes]}],
            },
            {
                "kind": "bar",
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
            if len(s["y"]) != len(ticks):
                raise ValueError(
                    f"{where}.series[{j}].y has {len(s['y'])} values "
                    f"but {axis_field} has {len(ticks)}"
                )
            bad = [v for v in s["y"] if not _is_number(v)]
            if bad:
                raise ValueError(f"{where}.series[{j}].y holds non-numeric values {bad[:3]!r}")
        for field in ("title", "xlabel", "ylabel"):
            if field in panel and not isinstance(panel[field], str):
                raise ValueError(f"{where}.{field} must be a string")
        for field in ("xscale", "yscale"):
            if panel.get(field, "linear") not in SCALES:
                raise ValueError(
                    f"{where}.{field} is {panel[field]!r}; use one of {', '.join(SCALES)}"
                )


def plot_figure(data: dict):
    """Render valid figure data as a matplotlib ``Figure``, one axes per panel, side by side.

    The figure is built without pyplot, so nothing global changes; in Jupyter it displays as the
    cell's value, and ``fig.savefig(path)`` writes it to disk.
    """
    validate_figure_data(data)
    from matplotlib.figure import Figure

    panels = data["panels"]
    fig = Figure(figsize=(4.2 * len(panels), 3.4), layout="constrained")
    for ax, panel in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        if panel["kind"] == "bar":
            n = len(panel["series"])
            width = 0.8 / n
            for k, s in enumerate(panel["series"]):
                positions = [i + (k - (n - 1) / 2) * width for i in range(len(panel["labels"]))]
                bars = ax.bar(positions, s["y"], width=width, label=s.get("label"))
                ax.bar_label(bars, fmt="%g", fontsize=8)
            ax.set_xticks(range(len(panel["labels"])), panel["labels"])
        else:
            for s in panel["series"]:
                ax.plot(panel["x"], s["y"], marker="o", label=s.get("label"))
            ax.set_xlabel(panel.get("xlabel", ""))
            ax.set_xscale(panel.get("xscale", "linear"))
            ax.set_yscale(panel.get("yscale", "linear"))
        ax.set_ylabel(panel.get("ylabel", ""))
        ax.set_title(panel.get("title", ""))
        if any(s.get("label") for s in panel["series"]):
            if panel["kind"] == "bar":  # below the axes, clear of the bar labels
                ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.1))
            else:
                ax.legend(fontsize=8)
    return fig
