"""``course bench``, step 3: the tables, the summary lines and the files (``bench.json``,
``bench.png``, ``bench-steps.png``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from course_utils.display import format_bytes, format_gbps
from course_utils.observe.sweep import LABELS
from course_utils.results.bench import BenchRun, figure_data, steps_figure_data
from course_utils.results.records import save


def collectives_table(results: BenchRun):
    """The compact summary: floor, fit, bandwidths and traffic fraction per device count
    and variant.
    """
    from rich.table import Table

    repeats = results.plan.repeats
    table = Table(
        title="collectives against T = α + S/B "
        "(medians of repeat medians; 'top' = largest size fitted)"
    )
    for column in (
        "p",
        "variant",
        "floor µs",
        "≥1.25×",
        "≥2×",
        "α µs",
        "B GB/s",
        "fit err",
        "top S",
        "top ms",
        "algbw",
        "busbw",
        "mem %",
        "spread",
        "page faults",
    ):
        table.add_column(
            column, justify="left" if column in ("variant", "page faults") else "right"
        )
    for f in results.fits:
        top = f.top
        spread = f"{100 * f.max_spread:.0f} %" if repeats > 1 else "—"
        faults = (
            f"from {format_bytes(f.page_fault_from_bytes)}"
            if f.page_fault_from_bytes
            else "none"
        )
        table.add_row(
            str(f.devices),
            LABELS[f.variant],
            f"{f.floor_us:.0f}",
            format_bytes(f.grows_from_bytes),
            format_bytes(f.doubles_at_bytes),
            f"{f.alpha_us:.0f}",
            format_gbps(f.bandwidth_gbps),
            f"{100 * f.max_rel_error:.0f} %",
            format_bytes(top.bytes),
            f"{top.median_us / 1e3:.2f}",
            f"{top.algbw_gbps:.2f}",
            f"{top.busbw_gbps:.2f}",
            f"{100 * top.memcpy_fraction:.0f}",
            spread,
            faults,
        )
    return table


def zero1_table(results: BenchRun):
    """ZeRO-1 against the data-parallel step: times, ratios, optimizer-state bytes on device 0."""
    from rich.table import Table

    table = Table(title="optimizer step: data-parallel vs ZeRO-1 (v = momentum, bytes on device 0)")
    for column in (
        "p",
        "params",
        "dp µs",
        "ZeRO-1 1 jit",
        "ZeRO-1 3 calls",
        "v bytes dp → ZeRO-1",
        "agree",
    ):
        table.add_column(column, justify="right")
    for r in results.zero1:
        steps, ratio, state = r.steps, r.ratio_to_dp, r.state_bytes_device0
        table.add_row(
            str(r.devices),
            f"2^{int(np.log2(r.params))}",
            f"{steps['dp'].median_us:.0f}",
            f"{steps['zero1_fused'].median_us:.0f} ({ratio['zero1_fused']:.2f}×)",
            f"{steps['zero1_calls'].median_us:.0f} ({ratio['zero1_calls']:.2f}×)",
            f"{format_bytes(state['dp'])} → {format_bytes(state['zero1_fused'])}",
            "yes" if r.agree else "NO",
        )
    return table


def summary_lines(results: BenchRun, out_dir: Path) -> list[str]:
    """The lines printed under the tables: RS+AG vs psum, the ZeRO-1 goal, memcpy,
    machine, files.
    """
    memcpy, machine, plan = results.memcpy, results.meta.machine, results.plan
    lines = [f"S: {results.size_definition}"]
    for entry in results.rs_ag_vs_psum:
        calls, fused = entry.rs_ag_calls, entry.rs_ag_fused
        lines.append(
            f"RS+AG / psum on {entry.devices} devices: "
            f"2 calls {calls.min:.2f}–{calls.max:.2f}×, "
            f"1 jit {fused.min:.2f}–{fused.max:.2f}× over the sizes"
        )
    goal = results.zero1_goal
    if goal is not None:
        verdict = "MET" if goal.met else "NOT MET"
        lines.append(
            f"ZeRO-1 goal ({goal.devices} devices, 2^{int(np.log2(goal.params))} params: "
            f"fused step ≤ {goal.max_ratio}× data-parallel "
            f"with 1/{goal.devices} of the state): {verdict} — "
            f"{goal.ratio:.2f}× the time, {goal.state_fraction:.3g} of the optimizer state"
            + ("" if goal.agree else ", but the steps DISAGREE numerically")
        )
    lines.append(
        f"memcpy (NumPy copy of {format_bytes(memcpy.bytes)}, best of all tries): "
        f"{memcpy.copy_gbps:.1f} GB/s copied = {memcpy.traffic_gbps:.1f} GB/s read+written; "
        "'mem %' = modeled traffic ((3p−1)S, (p+1)S, 2pS) per second over the latter"
    )
    load = results.load_average_before[0], results.load_average_after[0]
    lines.append(
        f"machine: {machine.cores} CPUs ({machine.cpu_model}), "
        f"jax {machine.jax}, load {load[0]:.2f} → {load[1]:.2f}; "
        f"{plan.repeats} repeat(s) in {results.meta.seconds:.0f} s"
    )
    lines.append(f"wrote bench.json, bench.png and bench-steps.png in {out_dir}")
    return lines


def write_outputs(results: BenchRun, out_dir: Path) -> None:
    """``bench.json``, ``bench.png`` and ``bench-steps.png`` (through ``plot_figure``) in
    ``out_dir``."""
    from course_utils.figures.plot import plot_figure

    out_dir.mkdir(parents=True, exist_ok=True)
    save(results, out_dir / "bench.json")
    (out_dir / "bench.png").write_bytes(plot_figure(figure_data(results)).png())
    (out_dir / "bench-steps.png").write_bytes(plot_figure(steps_figure_data(results)).png())
