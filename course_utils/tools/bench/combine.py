"""``course bench``, step 2: combine the workers' reports into rows, fits, ratios and goals.

Pure functions of the reports (no JAX, no processes); ``build_results`` makes what
``bench.json`` holds.
"""

from __future__ import annotations

import os
import statistics
from typing import Sequence

from course_utils.models.cost import algbw_gbps, busbw_gbps
from course_utils.models.fit import fit_alpha_beta, fit_to_json
from course_utils.models.traffic import (
    in_page_fault_regime,
    output_bytes_per_device,
    traffic_bytes,
)
from course_utils.observe.sweep import KIND, PROTOCOL, SIZE_DEFINITION, VARIANTS, ZERO1_STEPS
from course_utils.results.bench import (
    BenchFit,
    BenchPlan,
    BenchRun,
    CollectiveRow,
    FitTop,
    Memcpy,
    Ratios,
    RsAgRatios,
    Timing,
    WorkerSeconds,
    Zero1Goal,
    Zero1Row,
    rows_of,
)
from course_utils.results.meta import this_run

ZERO1_GOAL = {"devices": 4, "params": 2**20, "max_ratio": 1.1}
GROWTH_FACTOR = 1.25  # "grows past the floor": the first size at least this many times the floor


def combine_repeats(summaries: Sequence[dict]) -> Timing:
    """One size's repeats: the median of the repeat medians, their spread, median IQR, overall min.

    ``spread`` is (max − min)/median of the repeat medians (0 for one repeat).

    Examples:
        >>> summaries = [{"median_us": 100.0, "iqr_us": 4.0, "min_us": 90.0},
        ...              {"median_us": 120.0, "iqr_us": 6.0, "min_us": 95.0},
        ...              {"median_us": 110.0, "iqr_us": 5.0, "min_us": 92.0}]
        >>> combine_repeats(summaries)  # doctest: +NORMALIZE_WHITESPACE
        Timing(median_us=110.0, iqr_us=5.0, min_us=90.0,
               repeat_medians_us=(100.0, 120.0, 110.0), spread=0.18181818181818182)
    """
    if not summaries:
        raise ValueError("no repeats to combine")
    medians = [s["median_us"] for s in summaries]
    median = statistics.median(medians)
    return Timing(
        median_us=median,
        iqr_us=statistics.median(s["iqr_us"] for s in summaries),
        min_us=min(s["min_us"] for s in summaries),
        repeat_medians_us=tuple(medians),
        spread=(max(medians) - min(medians)) / median,
    )


def first_size_at(
    nbytes: Sequence[float], times_us: Sequence[float], factor: float
) -> float | None:
    """The first size whose time is at least ``factor`` × the time at the smallest size,
    else ``None``.

    Examples:
        >>> first_size_at([8, 64, 512, 4096], [100, 110, 160, 400], 1.25)
        512
        >>> first_size_at([8, 64], [100, 110], 2) is None
        True
    """
    return next((s for s, t in zip(nbytes, times_us) if t >= factor * times_us[0]), None)


def best_memcpy(copies: Sequence[dict]) -> Memcpy:
    """The best copy rate over all workers, for the largest copy size measured.

    ``copy_gbps`` counts bytes copied (N/t); ``traffic_gbps`` counts bytes read plus written (2N/t),
    the unit of ``traffic_bytes``.

    Examples:
        >>> best_memcpy([{"bytes": 2**24, "best_s": 0.004}, {"bytes": 2**26, "best_s": 0.02},
        ...              {"bytes": 2**26, "best_s": 0.016}])
        Memcpy(bytes=67108864, best_s=0.016, copy_gbps=4.194304, traffic_gbps=8.388608)
    """
    largest = max(c["bytes"] for c in copies)
    best = min(c["best_s"] for c in copies if c["bytes"] == largest)
    rate = largest / best / 1e9
    return Memcpy(bytes=largest, best_s=best, copy_gbps=rate, traffic_gbps=2 * rate)


def _grouped(
    reports: Sequence[dict], section: str, key: str, inner: str
) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for report in reports:
        for entry in report[section]:
            for name, summary in entry[inner].items():
                groups.setdefault((report["devices"], name, entry[key]), []).append(summary)
    return groups


def collective_rows(reports: Sequence[dict], memcpy_traffic_gbps: float) -> list[CollectiveRow]:
    """One row per (devices, variant, size): repeats combined, bandwidths, traffic fraction,
    page faults.
    """
    rows = []
    for (p, variant, elements), summaries in sorted(
        _grouped(reports, "collectives", "elements", "variants").items(),
        key=lambda item: (item[0][0], VARIANTS.index(item[0][1]), item[0][2]),
    ):
        nbytes, timing = 4 * elements, combine_repeats(summaries)
        algbw = algbw_gbps(nbytes, timing.median_us)
        traffic = traffic_bytes(variant, nbytes, p) / timing.median_us / 1e3
        row = CollectiveRow(
            devices=p,
            variant=variant,
            elements=elements,
            bytes=nbytes,
            **vars(timing),
            n_samples=min(s["n_samples"] for s in summaries),
            compile_us=statistics.median(s["compile_us"] for s in summaries),
            algbw_gbps=algbw,
            busbw_gbps=busbw_gbps(algbw, KIND[variant], p),
            traffic_gbps=traffic,
            memcpy_fraction=traffic / memcpy_traffic_gbps,
            output_bytes_per_device=output_bytes_per_device(variant, nbytes, p),
            page_fault=in_page_fault_regime(variant, nbytes, p),
        )
        rows.append(row)
    return rows


def _pairs(rows: Sequence[CollectiveRow]) -> list[tuple[int, str]]:
    pairs = {(r.devices, r.variant) for r in rows}
    return sorted(pairs, key=lambda k: (k[0], VARIANTS.index(k[1])))


def fit_rows(rows: Sequence[CollectiveRow]) -> list[BenchFit]:
    """Per (devices, variant): the α-β fit below the page-fault regime, the floor and where
    T leaves it.

    ``top`` is the largest size fitted: its time, bandwidths and traffic fraction are the table's.
    """
    fits = []
    for p, variant in _pairs(rows):
        series = rows_of(rows, p, variant)
        fitted = [r for r in series if not r.page_fault]
        sizes, times = [r.bytes for r in series], [r.median_us for r in series]
        fit = fit_alpha_beta([r.bytes for r in fitted],
                             [r.median_us * 1e-6 for r in fitted])
        faulting = [r.bytes for r in series if r.page_fault]
        top = fitted[-1]
        fits.append(
            BenchFit(
                devices=p,
                variant=variant,
                **fit_to_json(fit),
                fit_bytes=(fitted[0].bytes, top.bytes),
                floor_us=times[0],
                grows_from_bytes=first_size_at(sizes, times, GROWTH_FACTOR),
                doubles_at_bytes=first_size_at(sizes, times, 2.0),
                page_fault_from_bytes=min(faulting, default=None),
                max_spread=max(r.spread for r in series),
                top=FitTop(
                    top.bytes, top.median_us, top.algbw_gbps, top.busbw_gbps,
                    top.traffic_gbps, top.memcpy_fraction,
                ),
            )
        )
    return fits


def rs_ag_against_psum(rows: Sequence[CollectiveRow]) -> list[RsAgRatios]:
    """Per device count: the time of RS+AG (2 calls, 1 jit) over ``psum``'s at each size,
    and its range.
    """
    found = []
    for p in sorted({r.devices for r in rows}):
        psum = rows_of(rows, p, "psum")
        against = {}
        for variant in ("rs_ag_calls", "rs_ag_fused"):
            pairs = zip(rows_of(rows, p, variant), psum)
            ratios = tuple(r.median_us / q.median_us for r, q in pairs)
            against[variant] = Ratios(ratios, min(ratios), max(ratios))
        found.append(RsAgRatios(p, tuple(r.bytes for r in psum), **against))
    return found


def zero1_rows(reports: Sequence[dict]) -> list[Zero1Row]:
    """One row per (devices, params): each step's combined time, ratios to ``dp``, state bytes,
    agreement.
    """
    groups = _grouped(reports, "zero1", "params", "steps")
    facts: dict[tuple, list[dict]] = {}
    for report in reports:
        for entry in report["zero1"]:
            facts.setdefault((report["devices"], entry["params"]), []).append(entry)
    rows = []
    for (p, params), entries in sorted(facts.items()):
        steps = {name: combine_repeats(groups[(p, name, params)]) for name in ZERO1_STEPS}
        dp = steps["dp"].median_us
        rows.append(
            Zero1Row(
                devices=p,
                params=params,
                steps=steps,
                ratio_to_dp={name: s.median_us / dp for name, s in steps.items()},
                state_bytes_device0=entries[0]["state_bytes_device0"],
                agree=all(e["agree"] for e in entries),
            )
        )
    return rows


def zero1_goal(rows: Sequence[Zero1Row], goal: dict = ZERO1_GOAL) -> Zero1Goal | None:
    """The goal: fused ZeRO-1 within ``max_ratio`` × the data-parallel step, holding 1/p of
    the state.

    Returns ``None`` when that device count and size were not measured.

    Examples:
        >>> row = Zero1Row(devices=4, params=2**20, steps={}, ratio_to_dp={"zero1_fused": 1.05},
        ...                state_bytes_device0={"dp": 4 * 2**20, "zero1_fused": 2**20}, agree=True)
        >>> zero1_goal([row]).met
        True
    """
    row = next(
        (r for r in rows if r.devices == goal["devices"] and r.params == goal["params"]), None
    )
    if row is None:
        return None
    ratio = row.ratio_to_dp["zero1_fused"]
    state = row.state_bytes_device0["zero1_fused"] / row.state_bytes_device0["dp"]
    met = ratio <= goal["max_ratio"] and state <= 1 / goal["devices"] and row.agree
    return Zero1Goal(**goal, ratio=ratio, state_fraction=state, agree=row.agree, met=bool(met))


def build_results(
    plan: BenchPlan, reports: Sequence[dict], load_before: tuple[float, ...], seconds: float
) -> BenchRun:
    """Everything ``bench.json`` holds, from the workers' reports (JSON lines)."""
    memcpy = best_memcpy([c for r in reports for c in r["memcpy"]])
    rows = collective_rows(reports, memcpy.traffic_gbps)
    zero1 = zero1_rows(reports)
    return BenchRun(
        meta=this_run("course bench" + (" --quick" if plan.quick else ""), seconds),
        load_average_before=tuple(load_before),
        load_average_after=tuple(os.getloadavg()),
        plan=plan,
        size_definition=SIZE_DEFINITION,
        protocol=PROTOCOL,
        memcpy=memcpy,
        collectives=tuple(rows),
        fits=tuple(fit_rows(rows)),
        rs_ag_vs_psum=tuple(rs_ag_against_psum(rows)),
        zero1=tuple(zero1),
        zero1_goal=zero1_goal(zero1),
        compiled_collectives={
            str(r["devices"]): r["compiled_collectives"] for r in reports if r["repeat"] == 0
        },
        worker_seconds=tuple(
            WorkerSeconds(r["devices"], r["repeat"], r["seconds"]) for r in reports
        ),
    )
