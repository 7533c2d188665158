"""A figure's alt text, from its data: what each panel plots, against what, and for which series;
the site gives it to screen readers and shows it where the image cannot load."""

from __future__ import annotations


def describe(data: dict) -> str:
    """One sentence per panel: its kind, title, axes and series (human names).

    Examples:
        >>> describe({"panels": [{"kind": "line", "title": "time", "x": [1, 2],
        ...     "xlabel": "bytes", "ylabel": "ms", "yscale": "log",
        ...     "series": [{"label": "all_reduce", "y": [1, 2]}, {"y": [2, 3]}]}]})
        'Line chart "time": ms (log scale) against bytes, for all-reduce and one more series.'
        >>> describe({"panels": [{"kind": "grid", "title": "after", "cells": [[1.0], [None]],
        ...     "xlabel": "position", "ylabel": "device"}]})
        'Grid "after": one row per device (2) and one column per position (1), colour = value.'
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
            continue
        named = [human(s["label"]) for s in panel["series"] if s.get("label")]
        unnamed = len(panel["series"]) - len(named)
        if unnamed:
            named.append("one more series" if unnamed == 1 else f"{unnamed} more series")
        series = named[0] if len(named) == 1 else "; ".join(named[:-1]) + " and " + named[-1]
        scale = " (log scale)" if panel.get("yscale") == "log" else ""
        if panel["kind"] == "bar":
            bars = ", ".join(human(label) for label in panel["labels"])
            sentences.append(f'Bar chart "{title}": {panel["ylabel"]}{scale} for {bars}; '
                             f"{series}.")
        else:
            sentences.append(f'Line chart "{title}": {panel["ylabel"]}{scale} against '
                             f'{panel["xlabel"]}, for {series}.')
    return " ".join(sentences)
