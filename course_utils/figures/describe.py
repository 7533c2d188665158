"""A figure's alt text, from its data: what each panel plots, against what, for which series, and
what it shows (where each series ends up, which bar is largest, what a grid's values span); the
site gives it to screen readers and shows it where the image cannot load."""

from __future__ import annotations

import math


def _value(v: float) -> str:
    """Three significant figures (whole numbers below 10⁷ in full), read aloud as written:
    2,740 rather than 2.74e+03."""
    if float(v).is_integer() and abs(v) < 1e7:
        return f"{int(v):,}".replace("-", "−")
    if abs(v) >= 1000:
        return f"{round(v, 2 - math.floor(math.log10(abs(v)))):,.0f}".replace("-", "−")
    return f"{v:.3g}".replace("-", "−")


def _x_value(x: float, panel: dict) -> str:
    if panel.get("xunit") == "bytes" or "bytes" in panel["xlabel"]:
        from course_utils.display import format_bytes

        return format_bytes(x)
    return _value(x)


def _ranked(pairs: list[tuple[str, float]]) -> str:
    """``A (3), B (2) and C (1)``, largest first; at most the two ends when there are many."""
    pairs = sorted(pairs, key=lambda p: -p[1])
    shown = [f"{name} ({_value(v)})" for name, v in pairs]
    if len(shown) > 4:
        return f"largest {shown[0]}, smallest {shown[-1]}"
    return shown[0] if len(shown) == 1 else ", ".join(shown[:-1]) + " and " + shown[-1]


def _line_finding(panel: dict, names: list[str]) -> str:
    """Where each series ends: its last finite point, ranked (one series: its first and last)."""
    ends = []
    for s, name in zip(panel["series"], names):
        points = [(x, y) for x, y in zip(s.get("x", panel["x"]), s["y"]) if math.isfinite(y)]
        if points:
            ends.append((name, points[0], points[-1]))
    if not ends:
        return ""
    if len(ends) == 1:
        _, (x0, y0), (x1, y1) = ends[0]
        s = panel["series"][0]
        points = [(x, y) for x, y in zip(s.get("x", panel["x"]), s["y"]) if math.isfinite(y)]
        inner = [f"{word} {_value(y)} at {_x_value(x, panel)}" for word, (x, y) in
                 (("lowest", min(points, key=lambda q: q[1])),
                  ("highest", max(points, key=lambda q: q[1])))
                 if min(y0, y1) > y or y > max(y0, y1)]
        return (f"It goes from {_value(y0)} at {_x_value(x0, panel)} to {_value(y1)} at "
                f"{_x_value(x1, panel)}" + "".join(f", {t}" for t in inner) + ".")
    last_x = {x for _, _, (x, _) in ends}
    where = f" at {_x_value(last_x.pop(), panel)}" if len(last_x) == 1 else ""
    return f"At the last point{where}: {_ranked([(n, y) for n, _, (_, y) in ends])}."


def describe(data: dict) -> str:
    """Per panel, one sentence on its kind, title, axes and series (human names), one on what it
    shows, and the panel's own ``finding`` when its builder gives one.

    Examples:
        >>> describe({"panels": [{"kind": "line", "title": "time", "x": [1, 2],
        ...     "xlabel": "bytes", "ylabel": "ms", "yscale": "log",
        ...     "series": [{"label": "all_reduce", "y": [1, 2]}, {"y": [2, 3]}]}]})
        'Line chart "time": ms (log scale) against bytes; series: all-reduce and series 2. At the \
last point at 2 B: series 2 (3) and all-reduce (2).'
        >>> describe({"panels": [{"kind": "grid", "title": "after", "cells": [[1.0], [None]],
        ...     "xlabel": "position", "ylabel": "device"}]})
        'Grid "after": one row per device (2) and one column per position (1), colour = value. \
Every value held is 1; 1 of 2 cells not held.'
    """
    from course_utils.figures.labels import human

    sentences = []
    for panel in data["panels"]:
        title = panel["title"]
        if panel["kind"] == "grid":
            cells = panel["cells"]
            sentences.append(f'Grid "{title}": one row per {panel["ylabel"]} ({len(cells)}) and '
                             f'one column per {panel["xlabel"]} ({len(cells[0])}), colour = '
                             "value.")
            held = [v for row in cells for v in row if v is not None]
            empty = sum(len(row) for row in cells) - len(held)
            if held:
                span = (f"Every value held is {_value(held[0])}" if min(held) == max(held)
                        else f"Values from {_value(min(held))} to {_value(max(held))}")
                sentences.append(span + (f"; {empty} of {len(held) + empty} cells not held."
                                         if empty else "."))
        else:
            names = [human(s["label"]) if s.get("label") else f"series {k + 1}"
                     for k, s in enumerate(panel["series"])]
            series = names[0] if len(names) == 1 else "; ".join(names[:-1]) + " and " + names[-1]
            scale = " (log scale)" if panel.get("yscale") == "log" else ""
            if panel["kind"] == "bar":
                bars = [human(label) for label in panel["labels"]]
                sentences.append(f'Bar chart "{title}": {panel["ylabel"]}{scale} for '
                                 f'{", ".join(bars)}; {series}.')
                for s, name in zip(panel["series"], names):
                    pairs = [(b, y) for b, y in zip(bars, s["y"]) if math.isfinite(y)]
                    prefix = f"{name}: " if len(names) > 1 else ""
                    sentences.append(f"{prefix}{_ranked(pairs)}.")
            else:
                kind = "series" if len(names) > 1 else "one series"
                sentences.append(f'Line chart "{title}": {panel["ylabel"]}{scale} against '
                                 f'{panel["xlabel"]}; {kind}: {series}.')
                sentences.append(_line_finding(panel, names))
        if panel.get("finding"):
            sentences.append(panel["finding"])
    return " ".join(s for s in sentences if s)
