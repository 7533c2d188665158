"""Figure data for what the steps measure and model: a timing sweep (medians with their
interquartile band), model curves, held-out losses of the saved training runs. The notebooks
call these instead of writing panels inline, so that every figure is drawn by the tests too
(``tests/test_figure_pixels.py``)."""

from __future__ import annotations

from typing import Mapping, Sequence

# a timing's unit: (its name on the axis, microseconds per unit)
UNITS = {"µs": 1.0, "ms": 1e3}


def timing_figure_data(x: Sequence[float], timed: Mapping[str, Sequence[Mapping]], *,
                       title: str, xlabel: str, ylabel: str, unit: str = "µs",
                       xunit: str | None = "bytes", yscale: str = "log",
                       vline: float | None = None) -> dict:
    """One panel: each series' median against ``x`` with its interquartile band.

    Args:
        x: the swept values (sizes in bytes when ``xunit`` is ``"bytes"``).
        timed: series label → one record per x with ``median_us``, ``q1_us`` and ``q3_us``
            (what ``observe.sweep.time_interleaved`` gives).
        title: the panel's title.
        xlabel: the x axis's label, with its unit.
        ylabel: the y axis's label; the unit is added in brackets.
        unit: ``"µs"`` or ``"ms"``.
        xunit: ``"bytes"`` writes the x ticks as B, KiB, MiB; ``None`` plain numbers.
        yscale: ``"log"`` or ``"linear"``.
        vline: an x to mark (the fastest, say).

    Examples:
        >>> t = [{"median_us": 2000.0, "q1_us": 1000.0, "q3_us": 3000.0}]
        >>> panel = timing_figure_data([8], {"a": t}, title="t", xlabel="x", ylabel="time",
        ...                            unit="ms")["panels"][0]
        >>> panel["ylabel"], panel["series"][0]["y"], panel["series"][0]["low"]
        ('time (ms)', [2.0], [1.0])
    """
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {', '.join(UNITS)}, got {unit!r}")
    scale = UNITS[unit]
    for label, records in timed.items():
        if len(records) != len(x):
            raise ValueError(f"{label!r} has {len(records)} timings for {len(x)} x values")
    panel = {
        "kind": "line", "title": title, "x": list(x), "xscale": "log", "yscale": yscale,
        "xlabel": xlabel, "ylabel": f"{ylabel} ({unit})",
        "series": [{"label": label,
                    "y": [r["median_us"] / scale for r in records],
                    "low": [r["q1_us"] / scale for r in records],
                    "high": [r["q3_us"] / scale for r in records]}
                   for label, records in timed.items()],
    }
    if xunit:
        panel["xunit"] = xunit
    if vline is not None:
        panel["vline"] = vline
    return {"panels": [panel]}


def model_figure_data(x: Sequence[float], curves: Mapping[str, Sequence[float]], *, title: str,
                      xlabel: str, ylabel: str, xunit: str | None = None,
                      yscale: str = "linear", hline: float | None = None) -> dict:
    """One panel of model curves (dashed) against ``x`` on a log₂ axis.

    Examples:
        >>> data = model_figure_data([2, 4], {"ring": [1.0, 1.5]}, title="t", xlabel="p",
        ...                          ylabel="MiB", hline=2)
        >>> data["panels"][0]["series"], data["panels"][0]["hline"]
        ([{'label': 'ring', 'y': [1.0, 1.5], 'style': 'model'}], 2)
    """
    for label, y in curves.items():
        if len(y) != len(x):
            raise ValueError(f"{label!r} has {len(y)} values for {len(x)} x values")
    panel = {"kind": "line", "title": title, "x": list(x), "xscale": "log", "yscale": yscale,
             "xlabel": xlabel, "ylabel": ylabel,
             "series": [{"label": label, "y": list(y), "style": "model"}
                        for label, y in curves.items()]}
    if xunit:
        panel["xunit"] = xunit
    if hline is not None:
        panel["hline"] = hline
    return {"panels": [panel]}


def bars_figure_data(labels: Sequence[str], series: Mapping[str, Sequence[float]], *,
                     title: str, ylabel: str) -> dict:
    """One bar panel: a group of bars per label, one bar per series.

    Examples:
        >>> bars_figure_data(["zero1"], {"state": [94.5]}, title="t", ylabel="KiB")["panels"][0][
        ...     "series"]
        [{'label': 'state', 'y': [94.5]}]
    """
    for label, y in series.items():
        if len(y) != len(labels):
            raise ValueError(f"{label!r} has {len(y)} values for {len(labels)} labels")
    return {"panels": [{"kind": "bar", "title": title, "labels": list(labels), "ylabel": ylabel,
                        "series": [{"label": k, "y": list(y)} for k, y in series.items()]}]}


def lead_figure_data(leads: Mapping[str, tuple[Sequence[float], Sequence[Sequence[float]]]], *,
                     title: str, ylabel: str) -> dict:
    """One panel of leads against the share of the reducible loss gone (in per cent): for each
    label, the shares and, at each share, the seeds' leads (each seed paired with itself); the
    line is their median, the band their range, a log y axis with 1 (a tie) drawn. A target
    where some seed's lead is not finite (a run that never reaches it) is left out of the line.

    Examples:
        >>> data = lead_figure_data({"H = 8": ([0.5, 0.9], [[1.2, 1.4, 1.3], [0.8, 0.9, 1.0]])},
        ...                         title="t", ylabel="lead")
        >>> series = data["panels"][0]["series"][0]
        >>> series["x"], series["y"], series["low"], series["high"]
        ([50.0, 90.0], [1.3, 0.9], [1.2, 0.8], [1.4, 1.0])
    """
    import math

    import numpy as np

    series, ticks = [], set()
    for label, (shares, by_share) in leads.items():
        if len(shares) != len(by_share):
            raise ValueError(f"{label!r}: {len(shares)} shares for {len(by_share)} sets of leads")
        kept = [(100 * f, sorted(r)) for f, r in zip(shares, by_share)
                if r and all(x is not None and math.isfinite(x) and x > 0 for x in r)]
        ticks.update(x for x, _ in kept)
        series.append({"label": label, "x": [x for x, _ in kept],
                       "y": [float(np.median(r)) for _, r in kept],
                       "low": [r[0] for _, r in kept], "high": [r[-1] for _, r in kept]})
    return {"panels": [{"kind": "line", "title": title, "x": sorted(ticks), "xscale": "linear",
                        "yscale": "log", "hline": 1,
                        "xlabel": "share of the reducible loss gone (%)", "ylabel": ylabel,
                        "series": series}]}
