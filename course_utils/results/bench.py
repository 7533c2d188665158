"""Reading a ``course bench`` run: the saved full run that notebook 10 reads, and its figure."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Sequence

from course_utils.models.fit import fit_from_json
from course_utils.observe.sweep import LABELS, ZERO1_STEPS

BASIC = ("psum", "psum_scatter", "all_gather")  # drawn with their fits; RS+AG get a ratio panel


def rows_of(rows: Sequence[dict], p: int, variant: str) -> list[dict]:
    """The rows of one device count and one variant, in size order (as ``course bench`` stores)."""
    return [r for r in rows if r["devices"] == p and r["variant"] == variant]


def saved_results() -> dict:
    """The full ``course bench`` run shipped with the package
    (``course_utils/saved/bench_full.json``).

    Notebook 10 reads it; ``tests/test_bench_results.py`` keeps it in sync with the code.
    Regenerate: ``nice -n 5 course bench --out build/bench &&
    cp build/bench/bench.json course_utils/saved/bench_full.json``.
    """
    return json.loads(files("course_utils").joinpath("saved", "bench_full.json").read_text())


def _band(rows: list[dict]) -> dict:
    """Low and high of a series: the smallest and largest of the repeats' medians."""
    return {
        "low": [min(r["repeat_medians_us"]) for r in rows],
        "high": [max(r["repeat_medians_us"]) for r in rows],
    }


def figure_data(results: dict) -> dict:
    """Log-log panels for ``plot_figure``, one per device count: the three collectives measured
    (median of the repeats' medians, the band spanning them) and their fitted α + S/B lines."""
    rows, fits, repeats = results["collectives"], results["fits"], results["plan"]["repeats"]
    counts = sorted({r["devices"] for r in rows})
    x = [r["bytes"] for r in rows_of(rows, counts[0], "psum")]
    panels = []
    for p in counts:
        color = {v: f"C{k}" for k, v in enumerate(BASIC)}  # a fit is drawn like its data
        series = [
            {
                "label": LABELS[v],
                "y": [r["median_us"] for r in rows_of(rows, p, v)],
                **_band(rows_of(rows, p, v)),
                "color": color[v],
            }
            for v in BASIC
        ]
        series += [
            {
                "label": f"{LABELS[f['variant']]}: α + S/B",
                "y": [fit_from_json(f).time_s(s) * 1e6 for s in x],  # µs, as the data
                "style": "model",
                "color": color[f["variant"]],
            }
            for f in fits
            if f["devices"] == p and f["variant"] in BASIC
        ]
        panels.append(
            {
                "kind": "line",
                "x": x,
                "series": series,
                "xscale": "log",
                "yscale": "log",
                "xunit": "bytes",
                "title": f"{p} devices: median, band over {repeats} repeats",
                "xlabel": "S (bytes of the logical vector)",
                "ylabel": "time per call (µs)",
            }
        )
    return {"panels": panels}


def steps_figure_data(results: dict) -> dict:
    """Two panels for ``plot_figure``: reduce-scatter + all-gather over ``psum`` (a ratio, with
    the line y = 1) per device count, and the ZeRO-1 steps against the data-parallel step."""
    rows = results["collectives"]
    x = [r["bytes"] for r in rows_of(rows, min(r["devices"] for r in rows), "psum")]
    ratios = [
        {"label": f"{LABELS[v]}, p={e['devices']}", "y": e[v]["ratios"]}
        for e in results["rs_ag_vs_psum"]
        for v in ("rs_ag_calls", "rs_ag_fused")
    ]
    panels = [
        {
            "kind": "line",
            "x": x,
            "series": ratios,
            "xscale": "log",
            "xunit": "bytes",
            "hline": 1,
            "title": "RS + AG against psum (above 1: slower)",
            "xlabel": "S (bytes of the logical vector)",
            "ylabel": "time / psum's time",
        }
    ]
    zero1 = results["zero1"]
    if zero1:
        goal = results.get("zero1_goal")
        p = goal["devices"] if goal else zero1[0]["devices"]
        mine = [r for r in zero1 if r["devices"] == p]
        panels.append(
            {
                "kind": "line",
                "x": [r["params"] for r in mine],
                "xscale": "log",
                "yscale": "log",
                "series": [
                    {
                        "label": LABELS[s],
                        "y": [r["steps"][s]["median_us"] for r in mine],
                        **_band([r["steps"][s] for r in mine]),
                    }
                    for s in ZERO1_STEPS
                ],
                "title": f"optimizer step, {p} devices",
                "xlabel": "parameters (float32)",
                "ylabel": "time per step (µs)",
            }
        )
    return {"panels": panels}
