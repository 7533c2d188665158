"""The ``course`` command."""
from __future__ import annotations

import argparse
import importlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from course_utils.runner import NotebookResult, find_notebooks, run_one

    console = Console()
    if args.in_place and args.devices is not None:
        console.print("[red]error:[/] --in-place stores the 4-device run only; drop --devices")
        return 2
    if args.jobs < 1:
        console.print("[red]error:[/] --jobs must be at least 1")
        return 2
    if args.devices is not None and args.devices < 1:
        console.print(f"[red]error:[/] --devices must be a positive integer, got {args.devices}")
        return 2
    try:
        paths = [Path(p) for p in args.notebooks] or find_notebooks(Path(args.folder))
    except FileNotFoundError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 2
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        console.print(f"[red]error:[/] no such notebook: {', '.join(missing)}")
        return 2
    parameters = {"N_DEVICES": args.devices} if args.devices is not None else None
    out_dir = Path(args.out)
    results = {}
    start = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        task = progress.add_task("running notebooks", total=len(paths))
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            # largest (longest-running, figure-heavy) notebooks first, so the last job to finish is a short one
            futures = {pool.submit(run_one, p, out_dir, parameters=parameters, in_place=args.in_place,
                                   timeout=args.timeout): p
                       for p in sorted(paths, key=lambda p: p.stat().st_size, reverse=True)}
            for future in as_completed(futures):
                try:
                    result = future.result()
                except Exception as exc:  # an unreadable notebook or a kernel that would not start
                    result = NotebookResult(futures[future], 0.0, f"{type(exc).__name__}: {exc}".splitlines()[0])
                results[result.path] = result
                progress.update(task, advance=1, description=f"done {result.path.name}")
    wall = time.perf_counter() - start

    table = Table(title=f"course run: {len(paths)} notebooks, {args.jobs} at a time")
    for column in ("notebook", "status", "seconds", "figures", "error"):
        table.add_column(column)
    for p in paths:
        r = results[p]
        status = "[green]ok[/]" if r.ok else "[red]FAILED[/]"
        table.add_row(p.name, status, f"{r.seconds:.1f}", str(len(r.figures)), r.error)
    console.print(table)
    failed = sum(not r.ok for r in results.values())
    where = "saved in place" if args.in_place else f"executed copies in {out_dir}/"
    console.print(f"{len(paths) - failed} passed, {failed} failed in {wall:.1f} s; {where}, figures in {out_dir}/figures/")
    return 1 if failed else 0


def add_run_parser(sub) -> None:
    """Register ``course run``."""
    run = sub.add_parser("run", help="execute the notebook series headless, each in a fresh kernel")
    run.add_argument("notebooks", nargs="*", help="notebooks to run (default: every NN_*.ipynb in --folder)")
    run.add_argument("--folder", default="notebooks", help="where the series lives (default: notebooks)")
    run.add_argument("--out", default="build/run", help="executed copies and PNG figures go here")
    run.add_argument("--jobs", type=int, default=2, help="notebooks run at once (default: 2)")
    run.add_argument("--devices", type=int, default=None, help="override N_DEVICES (e.g. 2 or 8)")
    run.add_argument("--timeout", type=int, default=600, help="seconds per cell (default: 600)")
    run.add_argument("--in-place", action="store_true",
                     help="save the executed notebooks over the committed ones (to refresh their outputs)")
    run.set_defaults(handler=_run)


# Each entry registers one subcommand on the subparsers object; modules import lazily inside handlers.
COMMANDS = [
    "course_utils.cli:add_run_parser",
    "course_utils.launch:add_launch_parser",
    "course_utils.bench:add_bench_parser",
    "course_utils.student:add_student_parser",
    "course_utils.submission:add_check_parser",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course", description="The distributed-03 course unit.")
    sub = parser.add_subparsers(dest="command", required=True)
    for entry in COMMANDS:
        module, name = entry.split(":")
        getattr(importlib.import_module(module), name)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
