"""Reading a ``course bench`` run: its records, the saved full run that notebook 10 reads, and
its figures.

A run (``BenchRun``) is what ``bench.json`` holds, as typed records; ``load_bench_run`` reads
the file and ``to_json`` (``results.records``) gives back its JSON. The fits (``BenchRun.fits``,
``BenchFit`` records) are ``fit_alpha_beta``'s, one per device count and variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from course_utils.models.fit import Fit, fit_from_json
from course_utils.observe.sweep import LABELS, ZERO1_STEPS
from course_utils.results.meta import RunMeta
from course_utils.results.records import load, load_saved

BASIC = ("psum", "psum_scatter", "all_gather")  # drawn with their fits; RS+AG get a ratio panel


@dataclass(frozen=True)
class BenchPlan:
    """What one ``course bench`` run measures, and how."""

    quick: bool
    devices: tuple[int, ...]
    sizes: tuple[int, ...]  # float32 elements, S = 4·elements bytes
    zero1_sizes: tuple[int, ...]  # parameters
    samples_fast: int
    samples_slow: int
    warmup: int
    repeats: int
    worker_timeout_s: float


@dataclass(frozen=True)
class Memcpy:
    """The best NumPy copy: ``copy_gbps`` counts bytes copied, ``traffic_gbps`` read + written."""

    bytes: int
    best_s: float
    copy_gbps: float
    traffic_gbps: float


@dataclass(frozen=True)
class Timing:
    """One call's repeats combined: the median of the repeats' medians, their spread
    ((max − min) / median), the median IQR and the overall minimum."""

    median_us: float
    iqr_us: float
    min_us: float
    repeat_medians_us: tuple[float, ...]
    spread: float


@dataclass(frozen=True)
class CollectiveRow:
    """One (devices, variant, size): its timing, bandwidths, traffic fraction and page faults."""

    devices: int
    variant: str
    elements: int
    bytes: int
    median_us: float
    iqr_us: float
    min_us: float
    repeat_medians_us: tuple[float, ...]
    spread: float
    n_samples: int
    compile_us: float
    algbw_gbps: float
    busbw_gbps: float
    traffic_gbps: float
    memcpy_fraction: float
    output_bytes_per_device: float
    page_fault: bool


@dataclass(frozen=True)
class Ratios:
    """A time over ``psum``'s at each size, and their range."""

    ratios: tuple[float, ...]
    min: float
    max: float


@dataclass(frozen=True)
class FitTop:
    """The largest size a fit used: its time, bandwidths and traffic fraction."""

    bytes: int
    median_us: float
    algbw_gbps: float
    busbw_gbps: float
    traffic_gbps: float
    memcpy_fraction: float


@dataclass(frozen=True)
class BenchFit:
    """One (devices, variant): the α-β fit (µs and GB/s, as saved) below the page-fault regime,
    the floor, where the time leaves it, and the largest size fitted (``top``)."""

    devices: int
    variant: str
    alpha_us: float
    bandwidth_gbps: float | None
    max_rel_error: float
    n_points: int
    fit_bytes: tuple[int, ...]  # smallest and largest size fitted
    floor_us: float
    grows_from_bytes: int | None
    doubles_at_bytes: int | None
    page_fault_from_bytes: int | None
    max_spread: float
    top: FitTop

    @property
    def fit(self) -> Fit:
        """The fit in SI units (``Fit.time_s`` predicts a call's time)."""
        return fit_from_json(
            {k: getattr(self, k) for k in ("alpha_us", "bandwidth_gbps", "max_rel_error",
                                           "n_points")}
        )


@dataclass(frozen=True)
class RsAgRatios:
    """Per device count: reduce-scatter + all-gather (two calls; one jit) over ``psum``."""

    devices: int
    bytes: tuple[int, ...]
    rs_ag_calls: Ratios
    rs_ag_fused: Ratios


@dataclass(frozen=True)
class Zero1Row:
    """One (devices, parameters): each optimizer step's timing, its ratio to the data-parallel
    step, the optimizer-state bytes on device 0 and whether the steps agree."""

    devices: int
    params: int
    steps: dict[str, Timing]
    ratio_to_dp: dict[str, float]
    state_bytes_device0: dict[str, int]
    agree: bool


@dataclass(frozen=True)
class Zero1Goal:
    """Fused ZeRO-1 within ``max_ratio`` × the data-parallel step, holding 1/p of the state."""

    devices: int
    params: int
    max_ratio: float
    ratio: float
    state_fraction: float
    agree: bool
    met: bool


@dataclass(frozen=True)
class WorkerSeconds:
    """How long one worker process (device count, repeat) ran."""

    devices: int
    repeat: int
    seconds: float


@dataclass(frozen=True)
class BenchRun:
    """A ``course bench`` run: what ``bench.json`` holds; the machine's load average (1, 5 and
    15 minutes) before and after the sweep."""

    meta: RunMeta
    load_average_before: tuple[float, ...]
    load_average_after: tuple[float, ...]
    plan: BenchPlan
    size_definition: str
    protocol: str
    memcpy: Memcpy
    collectives: tuple[CollectiveRow, ...]
    fits: tuple[BenchFit, ...]
    rs_ag_vs_psum: tuple[RsAgRatios, ...]
    zero1: tuple[Zero1Row, ...]
    zero1_goal: Zero1Goal | None
    compiled_collectives: dict[str, dict]  # per device count (as text): collectives_in's
    worker_seconds: tuple[WorkerSeconds, ...]


def rows_of(rows: Sequence[CollectiveRow], p: int, variant: str) -> list[CollectiveRow]:
    """The rows of one device count and one variant, in size order (as ``course bench`` stores)."""
    return [r for r in rows if r.devices == p and r.variant == variant]


def load_bench_run(path: str | Path) -> BenchRun:
    """The ``course bench`` run saved in ``path`` (a ``bench.json``).

    Raises:
        ValueError: the file is missing or not a ``course bench`` run (the message names the
            file and the field).
    """
    return load(BenchRun, path)


def saved_results() -> BenchRun:
    """The full ``course bench`` run shipped with the package
    (``course_utils/saved/bench_full.json``).

    Notebook 10 reads it; ``tests/test_bench_results.py`` keeps it in sync with the code.
    Regenerate: ``nice -n 5 course bench --out build/bench &&
    cp build/bench/bench.json course_utils/saved/bench_full.json``.
    """
    return load_saved(BenchRun, "bench_full.json", "course bench")


def _band(rows: Sequence[CollectiveRow | Timing]) -> dict:
    """Low and high of a series: the smallest and largest of the repeats' medians."""
    return {
        "low": [min(r.repeat_medians_us) for r in rows],
        "high": [max(r.repeat_medians_us) for r in rows],
    }


def figure_data(results: BenchRun) -> dict:
    """Log-log panels for ``plot_figure``, one per device count: the three collectives measured
    (median of the repeats' medians, the band spanning them) and their fitted α + S/B lines."""
    rows, fits, repeats = results.collectives, results.fits, results.plan.repeats
    counts = sorted({r.devices for r in rows})
    x = [r.bytes for r in rows_of(rows, counts[0], "psum")]
    panels = []
    for p in counts:
        color = {v: f"C{k}" for k, v in enumerate(BASIC)}  # a fit is drawn like its data
        series = [
            {
                "label": LABELS[v],
                "y": [r.median_us for r in rows_of(rows, p, v)],
                **_band(rows_of(rows, p, v)),
                "color": color[v],
            }
            for v in BASIC
        ]
        series += [
            {
                "label": f"{LABELS[f.variant]}: α + S/B",
                "y": [f.fit.time_s(s) * 1e6 for s in x],  # µs, as the data
                "style": "model",
                "color": color[f.variant],
            }
            for f in fits
            if f.devices == p and f.variant in BASIC
        ]
        panels.append(
            {
                "kind": "line",
                "x": x,
                "series": series,
                "xscale": "log",
                "yscale": "log",
                "xunit": "bytes",
                "title": f"{p} devices, own y scale\ndashed: the α + S/B fit",
                "xlabel": "S (bytes)",
                "ylabel": f"time per call (µs), {repeats} repeats",
            }
        )
    return {"panels": panels}


def steps_figure_data(results: BenchRun) -> dict:
    """Two panels for ``plot_figure``: reduce-scatter + all-gather over ``psum`` (a ratio, with
    the line y = 1) per device count, and the ZeRO-1 steps against the data-parallel step."""
    rows = results.collectives
    x = [r.bytes for r in rows_of(rows, min(r.devices for r in rows), "psum")]
    ratios = [
        {"label": f"{LABELS[v]}, p={e.devices}", "y": list(getattr(e, v).ratios)}
        for e in results.rs_ag_vs_psum
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
    zero1 = results.zero1
    if zero1:
        goal = results.zero1_goal
        p = goal.devices if goal else zero1[0].devices
        mine = [r for r in zero1 if r.devices == p]
        panels.append(
            {
                "kind": "line",
                "x": [r.params for r in mine],
                "xscale": "log",
                "yscale": "log",
                "series": [
                    {
                        "label": LABELS[s],
                        "y": [r.steps[s].median_us for r in mine],
                        **_band([r.steps[s] for r in mine]),
                    }
                    for s in ZERO1_STEPS
                ],
                "title": f"optimizer step, {p} devices",
                "xlabel": "parameters (float32)",
                "ylabel": "time per step (µs)",
            }
        )
    return {"panels": panels}
