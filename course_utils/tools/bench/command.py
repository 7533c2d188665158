"""``course bench``: the measured cost of collectives on logical CPU devices, against the α-β model.

It starts one worker process per device count and repeat (``bench_plan``), one at a time, shows
their progress, combines the repeats (``bench_combine``: fits ``T = α + S/B``, nccl-tests
bandwidths, the memory-traffic model) and writes ``bench.json``, ``bench.png`` and
``bench-steps.png`` (``bench_report``). What each worker measures, and how, is
``course_utils.observe.sweep`` (its ``PROTOCOL``).
Everything is one process and one shared memory per device count: the times are dispatch,
rendezvous and memory copies, never a network.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from course_utils.constants import EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from course_utils.observe.sweep import LABELS
from course_utils.tools.bench.combine import build_results
from course_utils.tools.bench.plan import make_plan, run_sweep, steps_per_worker
from course_utils.tools.bench.report import (
    collectives_table,
    summary_lines,
    write_outputs,
    zero1_table,
)
from course_utils.tools.cli import progress_bar
from course_utils.tools.errors import CourseError, usage


def _progress_text(medians: dict) -> str:
    return " · ".join(f"{LABELS[name]} {t:.0f} µs" for name, t in medians.items())


def _workers(run):
    """``run()``'s result; after Ctrl-C, a ``CourseError`` that says the worker was stopped (a
    worker that failed raises its own)."""
    try:
        return run()
    except KeyboardInterrupt:
        raise CourseError("interrupted; the running worker was stopped and nothing was written",
                          EXIT_INTERRUPTED) from None


def _run_strategies(console, out_dir: Path) -> int:
    from course_utils.results.strategies import PLAN
    from course_utils.tools.bench.strategies import run_strategies

    start = time.perf_counter()
    with progress_bar(console, with_eta=True) as progress:
        task = progress.add_task("starting", total=len(PLAN), last="")

        def on_run(label: str) -> None:
            progress.update(task, advance=1, description=f"training {label}")

        results = _workers(lambda: run_strategies(out_dir, on_run))
    base = results.runs[0]
    for run in results.runs:
        console.print(
            f"{run.label:<24} {run.bytes_per_step / base.bytes_per_step:7.3f}× the bytes"
            f"  held-out loss {run.heldout_loss[-1][1]:.4f}  {run.memory.total / 1024:.0f} KiB"
            " per device",
            highlight=False,
        )
    console.print(
        f"{len(results.runs)} runs on {results.devices} devices in "
        f"{time.perf_counter() - start:.0f} s; wrote strategies.json and strategies.png in "
        f"{out_dir}",
        highlight=False,
    )
    return EXIT_OK


def _run_bench(args: argparse.Namespace) -> int:
    from rich.console import Console

    console = Console(width=max(Console().width, 150))
    if args.strategies:
        if args.quick or args.repeats is not None:
            raise CourseError("--strategies takes no --quick or --repeats; "
                              "run it alone: course bench --strategies", EXIT_USAGE)
        return _run_strategies(console, Path(args.out))
    try:
        plan = make_plan(args.quick, args.repeats, args.max_log2)
    except ValueError as exc:
        raise usage(exc) from None
    if not plan.quick and plan.repeats < 3:
        console.print(
            f"[yellow]note:[/] {plan.repeats} repeat(s): the protocol wants 3 or more for a spread"
        )
    load_before, start = os.getloadavg(), time.perf_counter()
    with progress_bar(console, with_eta=True) as progress:
        total = plan.repeats * len(plan.devices) * steps_per_worker(plan)
        task = progress.add_task("starting", total=total, last="")

        def on_progress(repeat: int, p: int, event: dict) -> None:
            progress.update(
                task,
                advance=1,
                last=_progress_text(event["medians"]),
                description=f"repeat {repeat + 1}/{plan.repeats} · {p} devices · {event['label']}",
            )

        reports = _workers(lambda: run_sweep(plan, on_progress))
    results = build_results(plan, reports, load_before, time.perf_counter() - start)
    out_dir = Path(args.out)
    write_outputs(results, out_dir)
    console.print(collectives_table(results))
    if results.zero1:
        console.print(zero1_table(results))
    for line in summary_lines(results, out_dir):
        console.print(line, highlight=False)
    return EXIT_OK


def add_bench_parser(sub) -> None:
    """Register ``course bench``."""
    bench = sub.add_parser(
        "bench",
        help="time psum, psum_scatter, all_gather and ZeRO-1 steps; fit T = α + S/B",
        description="Measure collectives on 2, 4 and 8 logical CPU devices "
        "(each count in its own process) against the α-β model, nccl-tests bandwidths and memcpy; "
        "write bench.json, bench.png and bench-steps.png.",
        epilog="The full run takes several minutes; use --quick to check that everything works.",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="4 sizes, 2 and 4 devices, few samples, 1 repeat (well under a minute)",
    )
    bench.add_argument(
        "--out",
        default="build/bench",
        help="folder for bench.json and the figures (default: build/bench)",
    )
    bench.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="whole sweeps, each in fresh processes (default: 3; --quick: 1)",
    )
    bench.add_argument(
        "--strategies",
        action="store_true",
        help="instead: train every strategy of part three (notebooks 14-16) and write "
        "strategies.json and strategies.png (about a minute)",
    )
    bench.add_argument(
        "--max-log2",
        type=int,
        default=22,
        help="largest size 2^K elements in the full sweep (default 22 = 16 MiB; 23+ page-faults)",
    )
    bench.set_defaults(handler=_run_bench)
