"""Figure data as plain dicts and their validator; ``plotting.plot_figure`` draws any valid data.

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
- series ``color``: ``'C0'``…, to pair a model with its measurement (the model is drawn
  dashed in its measurement's colour), or a grey such as ``'0.4'`` for a line of its own;
- series ``point_labels`` (line panels): a short name beside each point (above, below, in turn);
- series ``x`` (line panels): the series' own x values, when series are measured at different
  x (a loss against the bytes each scheme has sent); the panel's ``x`` then sets the ticks.

The house style (``plot``): at most two panels in a row, one legend beside them, a series' colour
and marker the same in every panel.
"""

from __future__ import annotations

import numbers
from typing import Sequence

import numpy as np

from course_utils.models.cost_model import ring_bytes

KINDS = ("bar", "line", "grid")
SCALES = ("linear", "log")
STYLES = ("measured", "model")


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
                "title": "Stored: values one device holds afterwards",
                "labels": ["all-reduce", "reduce-scatter", "after gather"],
                "ylabel": "values stored per device",
                "series": [{"label": "observed local shape", "y": [int(n) for n in local_sizes]}],
            },
            {
                "kind": "bar",
                "title": f"Sent: bytes one rank sends (ring model, p = {ranks})",
                "labels": ["all-reduce", "reduce-scatter", "scatter + gather"],
                "ylabel": "modeled bytes per rank",
                "series": [
                    {
                        "label": "idealized ring payload",
                        "y": [
                            ring.all_reduce,
                            ring.reduce_scatter,
                            ring.reduce_scatter + ring.all_gather,
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

def ring_reduce_scatter_steps(blocks) -> list[dict]:
    """A ring reduce-scatter of ``blocks`` (p devices × p chunks) simulated in NumPy, step by step.

    At step s (1 … p−1) device i sends its partial sum of chunk (i − s) mod p to device
    (i + 1) mod p, which adds it to its own; after p − 1 steps device i holds the whole sum of
    chunk i (what ``psum_scatter(..., tiled=True)`` leaves). Each record gives the step, the
    sends ``(sender, chunk, receiver)`` and what every device holds after it.

    Examples:
        >>> [s["holds"][0] for s in ring_reduce_scatter_steps([[1.0, 1.0], [1.0, 1.0]])]
        [[1.0, 1.0], [2.0, 1.0]]
    """
    held = np.array(blocks, dtype=float)
    p = held.shape[0]
    if held.shape != (p, p):
        raise ValueError(f"blocks must be p × p (one chunk per device), got {held.shape}")
    steps = [{"step": 0, "sends": [], "holds": held.tolist()}]
    for s in range(1, p):
        sends = [(i, (i - s) % p, (i + 1) % p) for i in range(p)]
        sent = [held[i, c] for i, c, _ in sends]  # every device sends at once
        for (_, c, j), value in zip(sends, sent):
            held[j, c] += value
        steps.append({"step": s, "sends": sends, "holds": held.tolist()})
    return steps


def ring_reduce_scatter_figure_data(p: int) -> dict:
    """One grid panel per ring step of a reduce-scatter on p devices: each device starts with 1
    in every chunk, so a cell's number counts the devices whose chunk its partial sum holds."""
    steps = ring_reduce_scatter_steps(np.ones((p, p)))
    panels = []
    for record in steps:
        s = record["step"]
        title = ("before: every device holds all p chunks" if s == 0 else
                 f"step {s} of {p - 1}: i sends chunk (i−{s}) mod {p} to i+1")
        panels.append(grid_panel(title, record["holds"], xlabel="chunk",
                                 value_range=(1, p)))
    return {"panels": panels}


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
            names = s.get("point_labels")
            if names is not None and (not isinstance(names, list) or len(names) != len(s["y"])
                                      or not all(isinstance(t, str) for t in names)):
                raise ValueError(f"{where}.series[{j}].point_labels must be {len(s['y'])} "
                                 "strings, one per point")
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
