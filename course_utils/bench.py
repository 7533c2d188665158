"""``course bench``: the measured cost of collectives on logical CPU devices, against the α-β model.

The parent side. It starts one ``python -m course_utils.bench_worker`` per device count and repeat
(a JAX process's device count is fixed), one at a time, shows their progress, then combines the
repeats, fits ``T = α + S/B``, computes nccl-tests bandwidths and the memory-traffic model, and
writes ``bench.json`` and ``bench.png``. The parent never starts a JAX backend.

S is the size in bytes of the one logical float32 vector a collective is about (nccl-tests): for
``psum``, ``psum_scatter`` and reduce-scatter + all-gather every device holds a whole S-byte partial
(a ``(p, S/4)`` array split by rows) and ends with S (``psum_scatter``: S/p); for ``all_gather`` every
device holds S/p and ends with S. Everything here is one process and one shared memory: the times
are dispatch, rendezvous and memory copies, never a network.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

VARIANTS = ("psum", "psum_scatter", "all_gather", "rs_ag_calls", "rs_ag_fused")
LABELS = {"psum": "psum", "psum_scatter": "psum_scatter", "all_gather": "all_gather",
          "rs_ag_calls": "RS+AG, 2 calls", "rs_ag_fused": "RS+AG, 1 jit",
          "dp": "data-parallel (psum)", "zero1_fused": "ZeRO-1, 1 jit", "zero1_calls": "ZeRO-1, 3 calls"}
# what each variant computes, for the nccl-tests bus-bandwidth factor
KIND = {"psum": "all_reduce", "psum_scatter": "reduce_scatter", "all_gather": "all_gather",
        "rs_ag_calls": "all_reduce", "rs_ag_fused": "all_reduce"}
ZERO1_STEPS = ("dp", "zero1_fused", "zero1_calls")
SLOW_CALL_US = 1000.0  # calls slower than this get fewer samples
PAGE_FAULT_BYTES = 32 * 2**20  # outputs this large per device page-fault on every call (FIELD_NOTES)
ZERO1_GOAL = {"devices": 4, "params": 2**20, "max_ratio": 1.1}
GROWTH_FACTOR = 1.25  # "grows past the floor": the first size at least this many times the floor
EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


class BenchError(RuntimeError):
    """A worker failed or ran out of time; the message says which and what to do."""


# ---------------------------------------------------------------- pure functions: the model


def algbw_gbps(nbytes: float, time_us: float) -> float:
    """nccl-tests algorithm bandwidth S/t, in GB/s.

    Examples:
        >>> algbw_gbps(4_000_000, 1000.0)
        4.0
    """
    return nbytes / time_us / 1e3


def busbw_gbps(algbw: float, kind: str, devices: int) -> float:
    """nccl-tests bus bandwidth: algbw·2(p−1)/p for all-reduce, algbw·(p−1)/p for the other two.

    Examples:
        >>> busbw_gbps(4.0, "all_reduce", 4), busbw_gbps(4.0, "reduce_scatter", 4), busbw_gbps(4.0, "all_gather", 2)
        (6.0, 3.0, 2.0)
    """
    factors = {"all_reduce": 2.0, "reduce_scatter": 1.0, "all_gather": 1.0}
    if kind not in factors:
        raise ValueError(f"kind must be one of {', '.join(factors)}, got {kind!r}")
    return algbw * factors[kind] * (devices - 1) / devices


def traffic_bytes(variant: str, nbytes: float, devices: int) -> float:
    """Bytes read plus written by an in-process collective over S = ``nbytes`` (FIELD_NOTES model).

    all-reduce ≈ (3p−1)S, reduce-scatter ≈ (p+1)S, all-gather ≈ 2pS; reduce-scatter followed by
    all-gather is the sum of those two, (3p+1)S.

    Examples:
        >>> traffic_bytes("psum", 100, 4)
        1100
        >>> [traffic_bytes(v, 1, 4) for v in VARIANTS]
        [11, 5, 8, 13, 13]
    """
    p = devices
    models = {"psum": 3 * p - 1, "psum_scatter": p + 1, "all_gather": 2 * p,
              "rs_ag_calls": 3 * p + 1, "rs_ag_fused": 3 * p + 1}
    if variant not in models:
        raise ValueError(f"variant must be one of {', '.join(models)}, got {variant!r}")
    return models[variant] * nbytes


def output_bytes_per_device(variant: str, nbytes: float, devices: int) -> float:
    """Bytes each device ends with: S, except S/p after ``psum_scatter``.

    Examples:
        >>> output_bytes_per_device("psum_scatter", 1024, 4), output_bytes_per_device("all_gather", 1024, 4)
        (256.0, 1024.0)
    """
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    return nbytes / devices if variant == "psum_scatter" else float(nbytes)


def in_page_fault_regime(variant: str, nbytes: float, devices: int) -> bool:
    """Whether each device's output is ≥ 32 MiB, where every call page-faults its fresh output.

    Examples:
        >>> in_page_fault_regime("psum", 2**25, 4), in_page_fault_regime("psum_scatter", 2**25, 4)
        (True, False)
    """
    return output_bytes_per_device(variant, nbytes, devices) >= PAGE_FAULT_BYTES


def fit_alpha_beta(nbytes: Sequence[float], times_us: Sequence[float]) -> dict:
    """Least-squares fit of ``T = α + S/B`` on relative residuals (each point weighs 1/T).

    Relative weights let the small sizes (which set α, the floor) count as much as the large ones
    (which set B); plain least squares would fit only the largest two or three sizes.

    Returns:
        ``alpha_us``, ``bandwidth_gbps`` (``None`` when the times do not grow with S),
        ``max_rel_error`` (the worst |fit − T|/T over the points) and ``n_points``.

    Examples:
        >>> sizes = [2.0**k for k in range(5, 25)]
        >>> fit = fit_alpha_beta(sizes, [100 + s / 5e3 for s in sizes])  # α = 100 µs, B = 5 GB/s
        >>> round(fit["alpha_us"], 6), round(fit["bandwidth_gbps"], 6), round(fit["max_rel_error"], 6)
        (100.0, 5.0, 0.0)
    """
    s, t = np.asarray(nbytes, dtype=float), np.asarray(times_us, dtype=float)
    if s.shape != t.shape or s.size < 2 or np.unique(s).size < 2:
        raise ValueError("fit_alpha_beta needs at least two distinct sizes and one time per size")
    design = np.stack([np.ones_like(s), s], axis=1) / t[:, None]
    (alpha, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    model = alpha + per_byte * s
    return {"alpha_us": float(alpha), "bandwidth_gbps": float(1e-3 / per_byte) if per_byte > 0 else None,
            "max_rel_error": float(np.max(np.abs(model - t) / t)), "n_points": int(s.size)}


def model_time_us(fit: dict, nbytes: float) -> float:
    """``α + S/B`` in µs for a fit from ``fit_alpha_beta``.

    Examples:
        >>> model_time_us({"alpha_us": 100.0, "bandwidth_gbps": 5.0}, 5e6)
        1100.0
    """
    slope = 0.0 if fit["bandwidth_gbps"] is None else nbytes / fit["bandwidth_gbps"] / 1e3
    return fit["alpha_us"] + slope


def combine_repeats(summaries: Sequence[dict]) -> dict:
    """One size's repeats: the median of the repeat medians, their spread, median IQR, overall min.

    ``spread`` is (max − min)/median of the repeat medians (0 for one repeat).

    Examples:
        >>> combine_repeats([{"median_us": 100.0, "iqr_us": 4.0, "min_us": 90.0},
        ...                  {"median_us": 120.0, "iqr_us": 6.0, "min_us": 95.0},
        ...                  {"median_us": 110.0, "iqr_us": 5.0, "min_us": 92.0}])
        {'median_us': 110.0, 'iqr_us': 5.0, 'min_us': 90.0, 'repeat_medians_us': [100.0, 120.0, 110.0], 'spread': 0.18181818181818182}
    """
    if not summaries:
        raise ValueError("no repeats to combine")
    medians = [s["median_us"] for s in summaries]
    median = statistics.median(medians)
    return {"median_us": median, "iqr_us": statistics.median(s["iqr_us"] for s in summaries),
            "min_us": min(s["min_us"] for s in summaries), "repeat_medians_us": medians,
            "spread": (max(medians) - min(medians)) / median}


def first_size_at(nbytes: Sequence[float], times_us: Sequence[float], factor: float) -> float | None:
    """The first size whose time is at least ``factor`` × the time at the smallest size, else ``None``.

    Examples:
        >>> first_size_at([8, 64, 512, 4096], [100, 110, 160, 400], 1.25)
        512
        >>> first_size_at([8, 64], [100, 110], 2) is None
        True
    """
    return next((s for s, t in zip(nbytes, times_us) if t >= factor * times_us[0]), None)


def best_memcpy(copies: Sequence[dict]) -> dict:
    """The best copy rate over all workers, for the largest copy size measured.

    ``copy_gbps`` counts bytes copied (N/t); ``traffic_gbps`` counts bytes read plus written (2N/t),
    the unit of ``traffic_bytes``.

    Examples:
        >>> best_memcpy([{"bytes": 2**24, "best_s": 0.004}, {"bytes": 2**26, "best_s": 0.02},
        ...              {"bytes": 2**26, "best_s": 0.016}])
        {'bytes': 67108864, 'best_s': 0.016, 'copy_gbps': 4.194304, 'traffic_gbps': 8.388608}
    """
    largest = max(c["bytes"] for c in copies)
    best = min(c["best_s"] for c in copies if c["bytes"] == largest)
    rate = largest / best / 1e9
    return {"bytes": largest, "best_s": best, "copy_gbps": rate, "traffic_gbps": 2 * rate}


# ---------------------------------------------------------------- combining the workers' reports


def _grouped(reports: Sequence[dict], section: str, key: str, inner: str) -> dict[tuple, list[dict]]:
    groups: dict[tuple, list[dict]] = {}
    for report in reports:
        for entry in report[section]:
            for name, summary in entry[inner].items():
                groups.setdefault((report["devices"], name, entry[key]), []).append(summary)
    return groups


def collective_rows(reports: Sequence[dict], memcpy_traffic_gbps: float) -> list[dict]:
    """One row per (devices, variant, size): repeats combined, bandwidths, traffic fraction, page faults."""
    rows = []
    for (p, variant, elements), summaries in sorted(_grouped(reports, "collectives", "elements", "variants").items(),
                                                    key=lambda item: (item[0][0], VARIANTS.index(item[0][1]), item[0][2])):
        nbytes = 4 * elements
        row = {"devices": p, "variant": variant, "elements": elements, "bytes": nbytes, **combine_repeats(summaries),
               "n_samples": min(s["n_samples"] for s in summaries),
               "compile_us": statistics.median(s["compile_us"] for s in summaries)}
        algbw = algbw_gbps(nbytes, row["median_us"])
        traffic = traffic_bytes(variant, nbytes, p) / row["median_us"] / 1e3
        row.update(algbw_gbps=algbw, busbw_gbps=busbw_gbps(algbw, KIND[variant], p), traffic_gbps=traffic,
                   memcpy_fraction=traffic / memcpy_traffic_gbps,
                   output_bytes_per_device=output_bytes_per_device(variant, nbytes, p),
                   page_fault=in_page_fault_regime(variant, nbytes, p))
        rows.append(row)
    return rows


def _series(rows: Sequence[dict], p: int, variant: str) -> list[dict]:
    return [r for r in rows if r["devices"] == p and r["variant"] == variant]


def _pairs(rows: Sequence[dict]) -> list[tuple[int, str]]:
    return sorted({(r["devices"], r["variant"]) for r in rows}, key=lambda k: (k[0], VARIANTS.index(k[1])))


def fit_rows(rows: Sequence[dict]) -> list[dict]:
    """Per (devices, variant): the α-β fit below the page-fault regime, the floor and where T leaves it.

    ``top`` is the largest size fitted: its time, bandwidths and traffic fraction are the table's.
    """
    fits = []
    for p, variant in _pairs(rows):
        series = _series(rows, p, variant)
        fitted = [r for r in series if not r["page_fault"]]
        sizes, times = [r["bytes"] for r in series], [r["median_us"] for r in series]
        fit = fit_alpha_beta([r["bytes"] for r in fitted], [r["median_us"] for r in fitted])
        faulting = [r["bytes"] for r in series if r["page_fault"]]
        fits.append({"devices": p, "variant": variant, **fit,
                     "fit_bytes": [fitted[0]["bytes"], fitted[-1]["bytes"]], "floor_us": times[0],
                     "grows_from_bytes": first_size_at(sizes, times, GROWTH_FACTOR),
                     "doubles_at_bytes": first_size_at(sizes, times, 2.0),
                     "page_fault_from_bytes": min(faulting, default=None),
                     "max_spread": max(r["spread"] for r in series),
                     "top": {k: fitted[-1][k] for k in ("bytes", "median_us", "algbw_gbps", "busbw_gbps",
                                                        "traffic_gbps", "memcpy_fraction")}})
    return fits


def rs_ag_against_psum(rows: Sequence[dict]) -> list[dict]:
    """Per device count: the time of RS+AG (2 calls, 1 jit) over ``psum``'s at each size, and its range."""
    found = []
    for p in sorted({r["devices"] for r in rows}):
        psum = _series(rows, p, "psum")
        entry = {"devices": p, "bytes": [r["bytes"] for r in psum]}
        for variant in ("rs_ag_calls", "rs_ag_fused"):
            ratios = [r["median_us"] / q["median_us"] for r, q in zip(_series(rows, p, variant), psum)]
            entry[variant] = {"ratios": ratios, "min": min(ratios), "max": max(ratios)}
        found.append(entry)
    return found


def zero1_rows(reports: Sequence[dict]) -> list[dict]:
    """One row per (devices, params): each step's combined time, ratios to ``dp``, state bytes, agreement."""
    groups = _grouped(reports, "zero1", "params", "steps")
    facts: dict[tuple, list[dict]] = {}
    for report in reports:
        for entry in report["zero1"]:
            facts.setdefault((report["devices"], entry["params"]), []).append(entry)
    rows = []
    for (p, params), entries in sorted(facts.items()):
        steps = {name: combine_repeats(groups[(p, name, params)]) for name in ZERO1_STEPS}
        dp = steps["dp"]["median_us"]
        rows.append({"devices": p, "params": params, "steps": steps,
                     "ratio_to_dp": {name: s["median_us"] / dp for name, s in steps.items()},
                     "state_bytes_device0": entries[0]["state_bytes_device0"],
                     "agree": all(e["agree"] for e in entries)})
    return rows


def zero1_goal(rows: Sequence[dict], goal: dict = ZERO1_GOAL) -> dict | None:
    """The goal: fused ZeRO-1 within ``max_ratio`` × the data-parallel step, holding 1/p of the state.

    Returns ``None`` when that device count and size were not measured.

    Examples:
        >>> row = {"devices": 4, "params": 2**20, "ratio_to_dp": {"zero1_fused": 1.05},
        ...        "state_bytes_device0": {"dp": 4 * 2**20, "zero1_fused": 2**20}, "agree": True}
        >>> zero1_goal([row])["met"]
        True
    """
    row = next((r for r in rows if r["devices"] == goal["devices"] and r["params"] == goal["params"]), None)
    if row is None:
        return None
    ratio = row["ratio_to_dp"]["zero1_fused"]
    state = row["state_bytes_device0"]["zero1_fused"] / row["state_bytes_device0"]["dp"]
    met = ratio <= goal["max_ratio"] and state <= 1 / goal["devices"] and row["agree"]
    return {**goal, "ratio": ratio, "state_fraction": state, "agree": row["agree"], "met": bool(met)}


# ---------------------------------------------------------------- running the workers


@dataclass(frozen=True)
class Plan:
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


def make_plan(quick: bool = False, repeats: int | None = None, max_log2: int = 22) -> Plan:
    """The full sweep (2^3…2^max_log2 elements on 2, 4, 8 devices, 3 repeats) or the quick one.

    Examples:
        >>> plan = make_plan(quick=True)
        >>> plan.devices, plan.sizes, plan.repeats
        ((2, 4), (8, 1024, 65536, 1048576), 1)
        >>> make_plan(repeats=0)
        Traceback (most recent call last):
        ...
        ValueError: --repeats must be a positive integer (the protocol wants 3 or more), got 0
    """
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise ValueError(f"--repeats must be a positive integer (the protocol wants 3 or more), got {repeats!r}")
    if quick:
        if max_log2 != 22:
            raise ValueError("--max-log2 sets the full sweep's largest size; drop --quick or --max-log2")
        return Plan(True, (2, 4), tuple(2**k for k in (3, 10, 16, 20)), (2**10, 2**20),
                    samples_fast=10, samples_slow=5, warmup=3, repeats=repeats or 1, worker_timeout_s=180)
    if isinstance(max_log2, bool) or not isinstance(max_log2, int) or not 10 <= max_log2 <= 24:
        raise ValueError(f"--max-log2 must be an integer from 10 to 24 (23 reaches the page-fault regime), "
                         f"got {max_log2!r}")
    return Plan(False, (2, 4, 8), tuple(2**k for k in range(3, max_log2 + 1)), tuple(2**k for k in range(10, 23, 2)),
                samples_fast=50, samples_slow=15, warmup=3, repeats=repeats or 3, worker_timeout_s=1800)


def worker_command(plan: Plan, devices: int) -> list[str]:
    """The command line of one worker."""
    return [sys.executable, "-m", "course_utils.bench_worker", "--devices", str(devices),
            "--sizes", ",".join(map(str, plan.sizes)), "--zero1-sizes", ",".join(map(str, plan.zero1_sizes)),
            "--samples-fast", str(plan.samples_fast), "--samples-slow", str(plan.samples_slow),
            "--warmup", str(plan.warmup)]


def steps_per_worker(plan: Plan) -> int:
    """Progress events one worker sends: memcpy, each size, each ZeRO-1 size."""
    return 1 + len(plan.sizes) + len(plan.zero1_sizes)


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_worker(command: list[str], timeout_s: float, on_progress: Callable[[dict], None]) -> dict:
    """Run one worker, pass each progress event to ``on_progress``, return its result event.

    Raises:
        BenchError: the worker exited non-zero, sent no result, or ran past ``timeout_s`` (it is killed).
    """
    with tempfile.TemporaryFile(mode="w+") as stderr:
        popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True)
        lines: queue.Queue = queue.Queue()
        threading.Thread(target=_pump, args=(popen.stdout, lines), daemon=True).start()
        deadline, result = time.monotonic() + timeout_s, None
        try:
            while (line := lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
                if line.startswith("{"):
                    event = json.loads(line)
                    if event["event"] == "progress":
                        on_progress(event)
                    else:
                        result = event
            returncode = popen.wait(timeout=max(1.0, deadline - time.monotonic()))
        except (queue.Empty, subprocess.TimeoutExpired):
            raise BenchError(f"a worker ran past {timeout_s:.0f} s and was stopped: {' '.join(command[1:5])}; "
                             "the machine may be busy: try again later or with --quick") from None
        finally:
            if popen.poll() is None:
                popen.kill()
                popen.wait()
        if returncode != 0 or result is None:
            stderr.seek(0)
            tail = stderr.read().strip()[-1500:]
            raise BenchError(f"worker {' '.join(command[1:5])} failed with exit status {returncode}:\n{tail}")
    return result


def run_sweep(plan: Plan, on_progress: Callable[[int, int, dict], None]) -> list[dict]:
    """All workers, repeat by repeat, each device count in turn; each report gains its ``repeat``."""
    reports = []
    for repeat in range(plan.repeats):
        for p in plan.devices:
            report = run_worker(worker_command(plan, p), plan.worker_timeout_s,
                                lambda event, r=repeat, p=p: on_progress(r, p, event))
            reports.append({**report, "repeat": repeat})
    return reports


def machine_info(reports: Sequence[dict], load_before: tuple[float, ...]) -> dict:
    """CPU count, CPU model, versions, and the load average before and after the sweep."""
    model = next((line.split(":", 1)[1].strip() for line in _read_lines("/proc/cpuinfo")
                  if line.startswith("model name")), platform.processor())
    return {"cpu_count": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)), "cpu_model": model,
            "platform": platform.platform(), "python": platform.python_version(),
            "jax_version": reports[0]["jax_version"], "jaxlib_version": version("jaxlib"),
            "numpy_version": np.__version__, "load_average_before": list(load_before),
            "load_average_after": list(os.getloadavg())}


def saved_results() -> dict:
    """The full ``course bench`` run shipped with the package (``course_utils/saved/bench_full.json``).

    Notebook 10 reads it; ``tests/test_bench_results.py`` keeps it in sync with this module. Regenerate:
    ``nice -n 5 course bench --out build/bench && cp build/bench/bench.json course_utils/saved/bench_full.json``.
    """
    from importlib.resources import files

    return json.loads(files("course_utils").joinpath("saved", "bench_full.json").read_text())


def _read_lines(path: str) -> list[str]:
    try:
        return Path(path).read_text().splitlines()
    except OSError:
        return []


SIZE_DEFINITION = ("S = 4·elements bytes, the size of the one logical float32 vector (nccl-tests): psum, "
                   "psum_scatter and RS+AG take a (p, elements) array split by rows (each device a whole S-byte "
                   "partial, p·S in all) and end with S per device (psum_scatter: S/p); all_gather takes "
                   "(p, elements/p) (S/p per device) and ends with S per device.")


def build_results(plan: Plan, reports: Sequence[dict], load_before: tuple[float, ...], seconds: float) -> dict:
    """Everything ``bench.json`` holds."""
    memcpy = best_memcpy([c for r in reports for c in r["memcpy"]])
    rows = collective_rows(reports, memcpy["traffic_gbps"])
    zero1 = zero1_rows(reports)
    return {"command": "course bench" + (" --quick" if plan.quick else ""), "machine": machine_info(reports, load_before),
            "plan": asdict(plan), "size_definition": SIZE_DEFINITION,
            "protocol": ("per worker process: memcpy first; at each size every variant's first call (trace + "
                         "compile + run; programs an earlier variant compiled come from the cache) timed apart "
                         "as compile_us, warm-up rounds, then samples interleaved round-robin "
                         "(order rotating), gc off, every call blocked; fewer samples for calls over "
                         f"{SLOW_CALL_US:g} µs; repeats are whole sweeps in fresh processes"),
            "memcpy": memcpy, "collectives": rows, "fits": fit_rows(rows), "rs_ag_vs_psum": rs_ag_against_psum(rows),
            "zero1": zero1, "zero1_goal": zero1_goal(zero1),
            "compiled_collectives": {str(r["devices"]): r["compiled_collectives"] for r in reports if r["repeat"] == 0},
            "worker_seconds": [{"devices": r["devices"], "repeat": r["repeat"], "seconds": r["seconds"]} for r in reports],
            "seconds": seconds}


# ---------------------------------------------------------------- the figure and the tables


BASIC = ("psum", "psum_scatter", "all_gather")  # drawn with their fits; RS+AG get a ratio panel


def figure_data(results: dict) -> dict:
    """Log-log panels for ``plot_figure``: per device count the three collectives and their fitted
    lines; RS+AG over ``psum``; the ZeRO-1 steps."""
    rows, fits, repeats = results["collectives"], results["fits"], results["plan"]["repeats"]
    counts = sorted({r["devices"] for r in rows})
    x = [r["bytes"] for r in _series(rows, counts[0], "psum")]
    panels = []
    for p in counts:
        series = [{"label": LABELS[v], "y": [r["median_us"] for r in _series(rows, p, v)]} for v in BASIC]
        series += [{"label": f"{LABELS[f['variant']]}: α + S/B", "y": [model_time_us(f, s) for s in x]}
                   for f in fits if f["devices"] == p and f["variant"] in BASIC]
        panels.append({"kind": "line", "x": x, "series": series, "xscale": "log", "yscale": "log",
                       "title": f"{p} devices (median of {repeats} repeat medians)",
                       "xlabel": "S, bytes", "ylabel": "time per call, µs"})
    ratios = [{"label": f"{LABELS[v]}, p={e['devices']}", "y": e[v]["ratios"]}
              for e in results["rs_ag_vs_psum"] for v in ("rs_ag_calls", "rs_ag_fused")]
    panels.append({"kind": "line", "x": x, "series": ratios, "xscale": "log", "title": "RS+AG against psum",
                   "xlabel": "S, bytes", "ylabel": "time / psum time"})
    zero1 = results["zero1"]
    if zero1:
        p = ZERO1_GOAL["devices"] if any(r["devices"] == ZERO1_GOAL["devices"] for r in zero1) else zero1[0]["devices"]
        mine = [r for r in zero1 if r["devices"] == p]
        panels.append({"kind": "line", "x": [r["params"] for r in mine], "xscale": "log", "yscale": "log",
                       "series": [{"label": LABELS[s], "y": [r["steps"][s]["median_us"] for r in mine]}
                                  for s in ZERO1_STEPS],
                       "title": f"optimizer step, {p} devices", "xlabel": "parameters (float32)",
                       "ylabel": "time per step, µs"})
    return {"panels": panels}


def format_bytes(n: float | None) -> str:
    """A byte count for tables: ``—`` for none, else B, KiB or MiB.

    Examples:
        >>> format_bytes(None), format_bytes(512), format_bytes(2**20), format_bytes(3 * 2**10)
        ('—', '512 B', '1 MiB', '3 KiB')
    """
    if n is None:
        return "—"
    for unit, size in (("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def format_gbps(value: float | None) -> str:
    """A bandwidth in GB/s for tables; ``∞`` when the fit found no per-byte cost.

    Examples:
        >>> format_gbps(3.14159), format_gbps(None)
        ('3.14', '∞')
    """
    return "∞" if value is None else f"{value:.2f}"


def collectives_table(results: dict):
    """The compact summary: floor, fit, bandwidths and traffic fraction per device count and variant."""
    from rich.table import Table

    repeats = results["plan"]["repeats"]
    table = Table(title="collectives against T = α + S/B (medians of repeat medians; 'top' = largest size fitted)")
    for column in ("p", "variant", "floor µs", "≥1.25×", "≥2×", "α µs", "B GB/s", "fit err", "top S",
                   "top ms", "algbw", "busbw", "mem %", "spread", "page faults"):
        table.add_column(column, justify="left" if column in ("variant", "page faults") else "right")
    for f in results["fits"]:
        top = f["top"]
        spread = f"{100 * f['max_spread']:.0f} %" if repeats > 1 else "—"
        faults = f"from {format_bytes(f['page_fault_from_bytes'])}" if f["page_fault_from_bytes"] else "none"
        table.add_row(str(f["devices"]), LABELS[f["variant"]], f"{f['floor_us']:.0f}", format_bytes(f["grows_from_bytes"]),
                      format_bytes(f["doubles_at_bytes"]), f"{f['alpha_us']:.0f}", format_gbps(f["bandwidth_gbps"]),
                      f"{100 * f['max_rel_error']:.0f} %", format_bytes(top["bytes"]), f"{top['median_us'] / 1e3:.2f}",
                      f"{top['algbw_gbps']:.2f}", f"{top['busbw_gbps']:.2f}", f"{100 * top['memcpy_fraction']:.0f}",
                      spread, faults)
    return table


def zero1_table(results: dict):
    """ZeRO-1 against the data-parallel step: times, ratios, optimizer-state bytes on device 0."""
    from rich.table import Table

    table = Table(title="optimizer step: data-parallel vs ZeRO-1 (v = momentum, bytes on device 0)")
    for column in ("p", "params", "dp µs", "ZeRO-1 1 jit", "ZeRO-1 3 calls", "v bytes dp → ZeRO-1", "agree"):
        table.add_column(column, justify="right")
    for r in results["zero1"]:
        steps, ratio, state = r["steps"], r["ratio_to_dp"], r["state_bytes_device0"]
        table.add_row(str(r["devices"]), f"2^{int(np.log2(r['params']))}", f"{steps['dp']['median_us']:.0f}",
                      f"{steps['zero1_fused']['median_us']:.0f} ({ratio['zero1_fused']:.2f}×)",
                      f"{steps['zero1_calls']['median_us']:.0f} ({ratio['zero1_calls']:.2f}×)",
                      f"{format_bytes(state['dp'])} → {format_bytes(state['zero1_fused'])}", "yes" if r["agree"] else "NO")
    return table


def summary_lines(results: dict, out_dir: Path) -> list[str]:
    """The lines printed under the tables: RS+AG vs psum, the ZeRO-1 goal, memcpy, machine, files."""
    memcpy, machine, plan = results["memcpy"], results["machine"], results["plan"]
    lines = [f"S: {results['size_definition']}"]
    for entry in results["rs_ag_vs_psum"]:
        calls, fused = entry["rs_ag_calls"], entry["rs_ag_fused"]
        lines.append(f"RS+AG / psum on {entry['devices']} devices: 2 calls {calls['min']:.2f}–{calls['max']:.2f}×, "
                     f"1 jit {fused['min']:.2f}–{fused['max']:.2f}× over the sizes")
    goal = results["zero1_goal"]
    if goal is not None:
        verdict = "MET" if goal["met"] else "NOT MET"
        lines.append(f"ZeRO-1 goal ({goal['devices']} devices, 2^{int(np.log2(goal['params']))} params: fused step "
                     f"≤ {goal['max_ratio']}× data-parallel with 1/{goal['devices']} of the state): {verdict} — "
                     f"{goal['ratio']:.2f}× the time, {goal['state_fraction']:.3g} of the optimizer state"
                     + ("" if goal["agree"] else ", but the steps DISAGREE numerically"))
    lines.append(f"memcpy (NumPy copy of {format_bytes(memcpy['bytes'])}, best of all tries): {memcpy['copy_gbps']:.1f} GB/s "
                 f"copied = {memcpy['traffic_gbps']:.1f} GB/s read+written; 'mem %' = modeled traffic "
                 "((3p−1)S, (p+1)S, 2pS) per second over the latter")
    load = machine["load_average_before"][0], machine["load_average_after"][0]
    lines.append(f"machine: {machine['cpu_count']} CPUs ({machine['cpu_model']}), jax {machine['jax_version']}, "
                 f"load {load[0]:.2f} → {load[1]:.2f}; {plan['repeats']} repeat(s) in {results['seconds']:.0f} s")
    lines.append(f"wrote {out_dir / 'bench.json'} and {out_dir / 'bench.png'}")
    return lines


def write_outputs(results: dict, out_dir: Path) -> None:
    """``bench.json`` and ``bench.png`` (through ``plot_figure``) in ``out_dir``."""
    from course_utils.figures import plot_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "bench.json").write_text(json.dumps(results, indent=1))
    plot_figure(figure_data(results)).savefig(out_dir / "bench.png", dpi=110)


# ---------------------------------------------------------------- the command


def _progress_text(medians: dict) -> str:
    return " · ".join(f"{LABELS[name]} {t:.0f} µs" for name, t in medians.items())


def _run_bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    console = Console(width=max(Console().width, 150))
    try:
        plan = make_plan(args.quick, args.repeats, args.max_log2)
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        return EXIT_USAGE
    if not plan.quick and plan.repeats < 3:
        console.print(f"[yellow]note:[/] {plan.repeats} repeat(s): the protocol wants 3 or more for a spread")
    load_before, start = os.getloadavg(), time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("[dim]{task.fields[last]}"),
                  console=console, transient=True) as progress:
        total = plan.repeats * len(plan.devices) * steps_per_worker(plan)
        task = progress.add_task("starting", total=total, last="")

        def on_progress(repeat: int, p: int, event: dict) -> None:
            progress.update(task, advance=1, last=_progress_text(event["medians"]),
                            description=f"repeat {repeat + 1}/{plan.repeats} · {p} devices · {event['label']}")

        try:
            reports = run_sweep(plan, on_progress)
        except BenchError as exc:
            console.print(f"[red]error:[/] {exc}")
            return EXIT_FAILED
        except KeyboardInterrupt:
            console.print("[red]interrupted:[/] the running worker was stopped; nothing was written")
            return EXIT_INTERRUPTED
    results = build_results(plan, reports, load_before, time.perf_counter() - start)
    out_dir = Path(args.out)
    write_outputs(results, out_dir)
    console.print(collectives_table(results))
    if results["zero1"]:
        console.print(zero1_table(results))
    for line in summary_lines(results, out_dir):
        console.print(line, highlight=False)
    return 0


def add_bench_parser(sub) -> None:
    """Register ``course bench``."""
    bench = sub.add_parser(
        "bench", help="time psum, psum_scatter, all_gather and ZeRO-1 steps; fit T = α + S/B",
        description="Measure collectives on 2, 4 and 8 logical CPU devices (each count in its own process) "
                    "against the α-β model, nccl-tests bandwidths and memcpy; write bench.json and bench.png.",
        epilog="The full run takes several minutes; use --quick to check that everything works.")
    bench.add_argument("--quick", action="store_true",
                       help="4 sizes, 2 and 4 devices, few samples, 1 repeat (well under a minute)")
    bench.add_argument("--out", default="build/bench", help="folder for bench.json and bench.png (default: build/bench)")
    bench.add_argument("--repeats", type=int, default=None,
                       help="whole sweeps, each in fresh processes (default: 3; --quick: 1)")
    bench.add_argument("--max-log2", type=int, default=22,
                       help="largest size 2^K elements in the full sweep (default 22 = 16 MiB; 23+ page-faults)")
    bench.set_defaults(handler=_run_bench)
