"""The figure of part five's saved sweep (``diloco.json``, ``results.diloco``): held-out loss of
the synced parameters against the rows seen and against the bytes one device has sent across
the replicas, for data parallelism, local SGD and DiLoCo (AdamW inside) at each H, on i.i.d. and
on skewed streams; each curve the mean over the seeds, their range as a band."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from course_utils.figures.labels import short_label
from course_utils.results.diloco import (
    COMPARED,
    DP,
    EVERY_H,
    DilocoResults,
    sweep_cost,
    sweep_curves,
)


def seed_band(results: DilocoResults, strategy: str, local_steps: int, skewed: bool
              ) -> tuple[list[int], list[float], list[float], list[float]]:
    """The inner steps at which ``strategy``'s seeds were evaluated, and the mean, lowest and
    highest held-out loss over the seeds there (every seed is evaluated at the same steps).

    Raises:
        ValueError: the seeds were evaluated at different steps.
    """
    curves = list(sweep_curves(results, strategy, local_steps, skewed).values())
    steps = [s for s, _ in curves[0].heldout_loss]
    if any([s for s, _ in c.heldout_loss] != steps for c in curves):
        raise ValueError(f"the seeds of {strategy} H={local_steps} were evaluated at different "
                         "steps; re-run the sweep")
    losses = np.array([[loss for _, loss in c.heldout_loss] for c in curves])
    return steps, losses.mean(0).tolist(), losses.min(0).tolist(), losses.max(0).tolist()


def _series(results: DilocoResults, strategy: str, h: int, skewed: bool, *, by_bytes: bool
            ) -> dict:
    steps, mean, low, high = seed_band(results, strategy, h, skewed)
    per_step = (sweep_cost(results, strategy, h).bytes_across_replicas if by_bytes
                else results.plan.rows_per_step)
    label = short_label(strategy) + ("" if strategy == DP else f" H={h}")
    return {"label": label, "x": [s * per_step for s in steps], "y": mean, "low": low,
            "high": high}


def _byte_ticks(series: Sequence[dict]) -> list[int]:
    """Powers of 4 spanning the series' positive bytes (ticks of a log₂ axis)."""
    sent = [x for s in series for x in s["x"] if x > 0]
    return [2**e for e in range(int(min(sent)).bit_length() - 1, int(max(sent)).bit_length(), 2)]


def diloco_figure_data(results: DilocoResults, local_steps: Sequence[int] | None = None,
                       strategies: Sequence[str] = COMPARED, floor: float | None = None) -> dict:
    """Four panels, i.i.d. streams above and skewed below: the held-out loss of the synced
    parameters against the rows seen over all replicas (left) and against the bytes one device
    has sent across the replicas (right), for data parallelism and each strategy of H inner
    steps of ``strategies`` (default: local SGD and DiLoCo; ``EVERY_H`` adds the ablations) at
    each H of ``local_steps`` (default: the sweep's); seed means, their range a band;
    ``floor``: the task's floor (``curves.Band``), drawn as a line.

    Raises:
        ValueError: a run is missing, or one device sent nothing across the replicas (a
            sweep of one replica has no bytes panel to draw).
    """
    hs = results.plan.local_steps if local_steps is None else tuple(local_steps)
    unknown = [s for s in strategies if s not in EVERY_H]
    if unknown:
        raise ValueError(f"no curves of {', '.join(unknown)} in the figure; choose among "
                         f"{', '.join(EVERY_H)}")
    runs = [(DP, 1)] + [(s, h) for s in strategies for h in hs]
    if any(sweep_cost(results, s, h).bytes_across_replicas <= 0 for s, h in runs):
        raise ValueError("a run of this sweep sent nothing across the replicas: its curves "
                         "have no bytes to be drawn against (a sweep of one replica?)")
    panels = []
    for skewed, shards in ((False, "i.i.d. stream"), (True, "skewed stream")):
        by_rows = [_series(results, s, h, skewed, by_bytes=False) for s, h in runs]
        by_bytes = [_series(results, s, h, skewed, by_bytes=True) for s, h in runs]
        panels.append({"kind": "line", "title": f"{shards}: against the rows seen",
                       "x": by_rows[0]["x"], "series": by_rows,
                       "xlabel": "rows seen, all replicas", "ylabel": "held-out loss, synced",
                       "yscale": "log"})
        panels.append({"kind": "line", "title": f"{shards}: against the bytes sent",
                       "xscale": "log", "xunit": "bytes", "x": _byte_ticks(by_bytes),
                       "series": by_bytes, "yscale": "log",
                       "xlabel": "bytes one device sent across replicas",
                       "ylabel": "held-out loss, synced"})
    if floor is not None:
        for panel in panels:
            panel["hline"] = floor
    return {"panels": panels}

