"""Figures of step 22 (Streaming DiLoCo across slow links): the schedule of the fragments' syncs
over the inner steps, and held-out loss against wall-clock time at each link rate (a curve's
steps times the step time measured at that rate), near the band of targets and the floor."""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def schedule_figure_data(sends: Sequence[tuple[int, int]], *, fragments: int, tau: int,
                         steps: int) -> dict:
    """One grid panel: a row per fragment, a column per inner step; ``0`` where the fragment's
    outer gradient is sent (after that step), ``1 … tau`` on the inner steps its sync overlaps
    (it is merged after step ``t + tau``), nothing elsewhere.

    Args:
        sends: ``(step, fragment)`` for each sync, from the package's schedule.
        fragments: F, the number of rows.
        tau: the inner steps each sync overlaps.
        steps: the inner steps drawn (columns ``0 … steps − 1``).

    Examples:
        >>> schedule_figure_data([(1, 0), (3, 1)], fragments=2, tau=1, steps=5)["panels"][0][
        ...     "cells"]
        [[None, 0.0, 1.0, None, None], [None, None, None, 0.0, 1.0]]
    """
    cells: list[list[float | None]] = [[None] * steps for _ in range(fragments)]
    for step, fragment in sends:
        if not 0 <= fragment < fragments:
            raise ValueError(f"fragment {fragment} is outside 0 … {fragments - 1}")
        for k in range(tau + 1):
            if 0 <= step + k < steps:
                if cells[fragment][step + k] is not None:
                    raise ValueError(f"fragment {fragment}'s syncs overlap at step {step + k}: "
                                     "tau must be below the steps between its syncs")
                cells[fragment][step + k] = float(k)
    overlapped = ("1: the inner step its sync overlaps, merged after it" if tau == 1 else
                  f"1 … {tau}: the inner steps its sync overlaps, merged after the last")
    return {"panels": [{
        "kind": "grid", "cells": cells, "value_range": [0.0, float(max(tau, 1))],
        "title": f"0: the fragment's outer gradient is sent after this step; {overlapped}",
        "xlabel": "inner step", "ylabel": "fragment"}]}


def wall_clock_figure_data(curves: Mapping[str, Sequence[Sequence[tuple[float, float]]]],
                           step_s: Mapping[str, Mapping[str, float]], *, floor: float,
                           targets: Mapping[str, float], ceiling: float | None = None,
                           titles: Mapping[str, str] | None = None) -> dict:
    """One line panel per link rate: each strategy's held-out loss against wall-clock seconds
    (its evaluations' inner steps × its step time measured at that rate), the mean over seeds
    with their range as a band, on a log axis; the floor no model passes as a black dashed line
    and each target as a grey one (lighter for each next target). ``ceiling`` zooms in near the
    targets: an evaluation where some seed is above it is left out.

    Args:
        curves: strategy → one curve per seed, each ``(inner step, held-out loss)`` pairs at
            the same steps for every seed.
        step_s: link rate → strategy → seconds per inner step there; a strategy without a
            time at a rate is left out of that panel.
        floor: the loss no model passes (the task's Bayes loss), drawn as a line labelled
            "floor".
        targets: a label → a target loss, each drawn as a grey dashed line.
        ceiling: the highest loss drawn (default: every evaluation).
        titles: link rate → the panel's title (default: the rate as given).

    Examples:
        >>> curves = {"dp": [[(0, 1.0), (10, 0.5), (20, 0.3)], [(0, 1.2), (10, 0.7), (20, 0.3)]]}
        >>> panel = wall_clock_figure_data(curves, {"10mbit": {"dp": 2.0}}, floor=0.2,
        ...                                targets={"95 %": 0.4}, ceiling=0.8)["panels"][0]
        >>> panel["series"][0]["x"], panel["series"][0]["y"], panel["yscale"]
        ([20.0, 40.0], [0.6, 0.3], 'log')
        >>> [(s["label"], s["y"]) for s in panel["series"][1:]]
        [('floor', [0.2, 0.2]), ('95 %', [0.4, 0.4])]
    """
    panels = []
    for rate, times in step_s.items():
        series = []
        for strategy, seeds in curves.items():
            if strategy not in times:
                continue
            steps = [s for s, _ in seeds[0]]
            if any([s for s, _ in curve] != steps for curve in seeds):
                raise ValueError(f"{strategy}'s seeds are evaluated at different steps")
            losses = np.array([[loss for _, loss in curve] for curve in seeds])
            keep = [i for i, s in enumerate(steps) if s > 0  # a log axis has no 0 s
                    and (ceiling is None or losses[:, i].max() <= ceiling)]
            if not keep:
                raise ValueError(f"every evaluation of {strategy} is above the ceiling "
                                 f"{ceiling:g}: raise it")
            series.append({
                "label": strategy, "x": [float(steps[i] * times[strategy]) for i in keep],
                "y": [float(losses[:, i].mean()) for i in keep],
                "low": [float(losses[:, i].min()) for i in keep],
                "high": [float(losses[:, i].max()) for i in keep]})
        if not series:
            raise ValueError(f"no strategy has both a curve and a step time at {rate}")
        ends = [x for s in series for x in (s["x"][0], s["x"][-1])]
        low, high = np.floor(np.log10(min(ends))), np.ceil(np.log10(max(ends)))
        span = [min(ends), max(ends)]
        series.append({"label": "floor", "x": span, "y": [float(floor)] * 2, "style": "model",
                       "color": "black"})
        series += [{"label": label, "x": span, "y": [float(t)] * 2, "style": "model",
                    "color": f"{0.35 + 0.3 * k / max(len(targets) - 1, 1):.2f}"}
                   for k, (label, t) in enumerate(targets.items())]
        panels.append({
            "kind": "line", "title": (titles or {}).get(rate, rate),
            "x": [10.0**d for d in range(int(low), int(high) + 1)],  # the ticks: decades
            "xscale": "log", "yscale": "log", "xlabel": "wall-clock time (s)",
            "ylabel": "held-out loss", "series": series})
    return {"panels": panels}
