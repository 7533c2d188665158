"""Figures of part four's saved training run (``training.json``): step time against batch size
at each link rate (step 18), measured (markers) against the step model (dashed, the same
colour). Step 20's leads across its band are ``figures.builders.lead_figure_data``."""

from __future__ import annotations

from typing import Mapping

from course_utils.models.links import rate_label
from course_utils.results.training import TrainingResults, median_compute_s, modelled_step_s
from course_utils.training.strategies import DATA_PARALLEL


def _rates(results: TrainingResults) -> list[str]:
    return list(dict.fromkeys(r.link_rate for r in results.rows))


def _row(results: TrainingResults, strategy: str, rate: str, batch_size: int):
    return next((r for r in results.rows
                 if (r.strategy, r.link_rate, r.batch_size) == (strategy, rate, batch_size)),
                None)


def step_figure_data(results: TrainingResults, *, alpha_s: Mapping[str, float] | None = None,
                     strategy: str = DATA_PARALLEL) -> dict:
    """One panel: ``strategy``'s step time against the batch size (rows per device) at each link
    rate, measured and modelled (the median compute over the rates + α per message step + link
    bytes / rate, α by rate from ``alpha_s``, default 0), with that compute alone in grey."""
    m, alpha_s = results.cluster, alpha_s or {}
    sizes = sorted({r.batch_size for r in results.rows if r.strategy == strategy})
    if not sizes:
        raise ValueError(f"no rows of {strategy!r} in these results")
    compute = {b: median_compute_s(results, strategy, b) for b in sizes}
    series = []
    for k, rate in enumerate(_rates(results)):
        rows = [_row(results, strategy, rate, b) for b in sizes]
        color, label = f"C{k}", rate_label(rate)
        series.append({"label": label, "y": [r.step_s * 1e3 for r in rows], "color": color})
        series.append({"label": f"{label}, model", "style": "model", "color": color,
                       "y": [modelled_step_s(r, m.hosts, m.devices_per_host,
                                             alpha_s=alpha_s.get(rate, 0.0),
                                             compute_s=compute[r.batch_size]) * 1e3
                             for r in rows]})
    series.append({"label": "compute alone", "color": "0.4",
                   "y": [compute[b] * 1e3 for b in sizes]})
    return {"panels": [{
        "kind": "line", "title": f"{strategy.replace('_', ' ')} step, {m.hosts} hosts × "
                                 f"{m.devices_per_host} (dashed: model)",
        "x": sizes, "xscale": "log", "yscale": "log", "xlabel": "rows per device per step",
        "ylabel": "step time (ms)", "series": series}]}

