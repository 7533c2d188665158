"""``course run``: execute the notebook series headless, each notebook in a fresh kernel."""

from __future__ import annotations

import argparse
import base64
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_utils.constants import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from course_utils.display import error_line
from course_utils.tools.cli import positive_int_arg, progress_bar
from course_utils.tools.errors import CourseError, usage

PARAMETERS_TAG = "parameters"
# Kernels started side by side can race for the same ZeroMQ port (jupyter_client picks free ports,
# closes them, then the kernel binds them); the loser dies before it answers kernel_info, with no
# cell run. Such a start is tried again; any other failure is reported at once.
KERNEL_DIED_AT_START = "Kernel died before replying to kernel_info"
START_ATTEMPTS = 3


@dataclass
class NotebookResult:
    """What one headless run of a notebook produced."""

    path: Path
    seconds: float
    error: str = ""
    figures: list[Path] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.error


def find_notebooks(folder: Path) -> list[Path]:
    """The step-numbered notebooks (``NN_name.ipynb``) in ``folder``, in step order."""
    found = sorted(p for p in Path(folder).glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise FileNotFoundError(
            f"no step-numbered notebooks (NN_name.ipynb) in {folder}; run this from the course's "
            "root folder or pass --folder with the notebooks' folder"
        )
    return found


def set_parameters(nb, parameters: dict) -> None:
    """Rewrite the cell tagged ``parameters`` to assign ``parameters``
    (e.g. ``{'N_DEVICES': 8}``).
    """
    cells = [c for c in nb.cells if PARAMETERS_TAG in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"expected one cell tagged {PARAMETERS_TAG!r}, found {len(cells)}")
    lines = cells[0].source.splitlines()
    for name, value in parameters.items():
        if not any(line.split("=")[0].strip() == name for line in lines):
            raise ValueError(f"the parameters cell does not set {name}")
        lines = [
            f"{name} = {value!r}" if line.split("=")[0].strip() == name else line for line in lines
        ]
    cells[0].source = "\n".join(lines)


def run_in_fresh_kernel(nb, cwd: Path, timeout: int, **options) -> None:
    """Execute ``nb`` in place, top to bottom, in a fresh ``python3`` kernel started in ``cwd``.

    ``options`` go to ``nbclient.NotebookClient`` (e.g. ``allow_errors``); its exceptions propagate.
    No per-cell timing metadata is recorded, and the kernel's own log lines are dropped (cell errors
    still arrive as outputs or exceptions).
    """
    from nbclient import NotebookClient

    for attempt in range(1, START_ATTEMPTS + 1):
        client = NotebookClient(
            nb,
            timeout=timeout,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": str(cwd)}},
            **options,
        )
        try:
            client.execute(stderr=subprocess.DEVNULL)
            return
        except RuntimeError as exc:
            if KERNEL_DIED_AT_START not in str(exc) or attempt == START_ATTEMPTS:
                raise


def merge_streams(nb) -> None:
    """Join each run of consecutive ``stream`` outputs of one name (stdout, stderr) into one.

    The kernel splits a cell's prints into several outputs whenever it flushes between them, which
    depends on timing; merged, a notebook saved twice from equal runs is saved equal. nbval joins
    them the same way before it compares, so strict nbval sees no difference.
    """
    for cell in nb.cells:
        merged = []
        for output in cell.get("outputs", []):
            previous = merged[-1] if merged else None
            if (
                previous is not None
                and output.get("output_type") == "stream"
                and previous.get("output_type") == "stream"
                and previous.get("name") == output.get("name")
            ):
                previous["text"] = previous["text"] + output["text"]
            else:
                merged.append(output)
        if "outputs" in cell:
            cell["outputs"] = merged


def execute(path: Path, *, parameters: dict | None = None, timeout: int = 600):
    """Run ``path`` top to bottom in a fresh ``python3`` kernel; return
    ``(notebook, error text)``.
    """
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    nb = nbformat.read(path, as_version=4)
    if parameters:
        set_parameters(nb, parameters)
    error = ""
    try:
        run_in_fresh_kernel(nb, Path(path).parent, timeout)
    except CellExecutionError as exc:
        error = _first_line_of_error(exc)
    except (CellTimeoutError, DeadKernelError) as exc:
        error = error_line(exc)
    merge_streams(nb)
    return nb, error


def _first_line_of_error(exc) -> str:
    ename = getattr(exc, "ename", "") or "Error"
    evalue = (getattr(exc, "evalue", "") or "").splitlines()
    return f"{ename}: {evalue[0] if evalue else ''}"


def save_figures(nb, stem: str, folder: Path) -> list[Path]:
    """Write every ``image/png`` output of ``nb`` as ``folder/stem_K.png``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                target = folder / f"{stem}_{len(written) + 1}.png"
                target.write_bytes(base64.b64decode(png))
                written.append(target)
    return written


def run_one(
    path: Path,
    out_dir: Path,
    *,
    parameters: dict | None = None,
    in_place: bool = False,
    timeout: int = 600,
) -> NotebookResult:
    """Execute one notebook; save the executed copy (to ``out_dir`` or,
    if asked, over the original).
    """
    start = time.perf_counter()
    nb, error = execute(path, parameters=parameters, timeout=timeout)
    seconds = time.perf_counter() - start
    out_dir.mkdir(parents=True, exist_ok=True)
    target = path if (in_place and not error) else out_dir / path.name
    nbformat.write(nb, target)
    figures = save_figures(nb, path.stem, out_dir / "figures")
    return NotebookResult(path, seconds, error, figures)


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if args.in_place and args.devices is not None:
        raise CourseError("--in-place stores the 4-device run only; drop --devices", EXIT_USAGE)
    try:
        paths = [Path(p) for p in args.notebooks] or find_notebooks(Path(args.folder))
    except FileNotFoundError as exc:
        raise usage(exc) from None
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        raise CourseError(f"no such notebook: {', '.join(missing)}", EXIT_USAGE)
    parameters = {"N_DEVICES": args.devices} if args.devices is not None else None
    out_dir = Path(args.out)
    results = {}
    start = time.perf_counter()
    with progress_bar(console) as progress:
        task = progress.add_task("running notebooks", total=len(paths))
        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            # largest (longest-running, figure-heavy) notebooks first, so the last job to finish
            # is a short one
            futures = {
                pool.submit(
                    run_one,
                    p,
                    out_dir,
                    parameters=parameters,
                    in_place=args.in_place,
                    timeout=args.timeout,
                ): p
                for p in sorted(paths, key=lambda p: p.stat().st_size, reverse=True)
            }
            for future in as_completed(futures):
                try:
                    result = future.result()
                except Exception as exc:  # an unreadable notebook or a kernel that would not start
                    result = NotebookResult(futures[future], 0.0, error_line(exc))
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
    console.print(
        f"{len(paths) - failed} passed, {failed} failed in {wall:.1f} s; "
        f"{where}, figures in {out_dir}/figures/"
    )
    return EXIT_FAILED if failed else EXIT_OK


def add_run_parser(sub) -> None:
    """Register ``course run``."""
    run = sub.add_parser("run", help="execute the notebook series headless, each in a fresh kernel")
    run.add_argument("notebooks", nargs="*",
                     help="notebooks to run (default: every NN_*.ipynb in --folder)")
    run.add_argument("--folder", default="notebooks", help="the series (default: notebooks)")
    run.add_argument("--out", default="build/run", help="executed copies and PNG figures go here")
    run.add_argument("--jobs", type=positive_int_arg, default=2, help="at once (default: 2)")
    run.add_argument("--devices", type=positive_int_arg, help="override N_DEVICES (e.g. 2 or 8)")
    run.add_argument("--timeout", type=positive_int_arg, default=600,
                     help="seconds per cell (default: 600)")
    run.add_argument("--in-place", action="store_true", help="save the executed notebooks over the "
                     "committed ones (to refresh their outputs)")
    run.set_defaults(handler=_run)
