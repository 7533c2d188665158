"""``course launch``: the course kernels on N local processes with JAX's own multi-process runtime.

The parent side. It checks the arguments and the port, starts N ``python -m
course_utils.tools.launch.worker`` processes (coordinator and gloo on 127.0.0.1), waits for them
under one deadline, stops the others as soon as one fails, and merges the workers' JSON reports
into one summary. The parent never starts a JAX backend; JAX runs only in the workers.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from course_utils.constants import ATOL, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from course_utils.tools.cli import positive_int_arg
from course_utils.tools.errors import CourseError, usage
from course_utils.tools.processes import first_exit, spawn, stop
from course_utils.validate import positive_int

HOST = "127.0.0.1"
MAX_DEVICES = 64
RUN_SECONDS = 120  # allowed after the join deadline: compile, check and time four kernels


@dataclass
class Worker:
    """One started worker process and the files its output goes to."""

    process_id: int
    popen: subprocess.Popen
    stdout: Path
    stderr: Path


def check_counts(
    processes: int, devices_per_process: int, timeout: int, fail_rank: int | None = None
) -> None:
    """Raise ``ValueError`` unless N, D, the timeout and ``fail_rank`` fit
    (N·D ≤ ``MAX_DEVICES``).
    """
    for name, value in (
        ("processes", processes),
        ("devices_per_process", devices_per_process),
        ("timeout", timeout),
    ):
        positive_int(name, value)
    if processes * devices_per_process > MAX_DEVICES:
        raise ValueError(
            f"{processes} processes × {devices_per_process} devices = "
            f"{processes * devices_per_process} devices; use at most {MAX_DEVICES} in all"
        )
    if fail_rank is not None and (
        isinstance(fail_rank, bool)
        or not isinstance(fail_rank, int)
        or not 0 <= fail_rank < processes
    ):
        raise ValueError(
            f"--fail-rank {fail_rank!r} names no process; use one of 0..{processes - 1}"
        )


def free_port() -> int:
    """A port on ``HOST`` that nothing listens on right now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def check_port(port: int) -> None:
    """Raise ``CourseError`` if ``HOST:port`` cannot be bound (``ValueError`` if it is no port)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError(f"port must be an integer in 1..65535, got {port!r}")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((HOST, port))
        except OSError as exc:
            raise CourseError(
                f"port {port} on {HOST} is already taken ({exc.strerror}); "
                f"pick another with --port or omit --port to use a free one"
            ) from None


def start_workers(
    folder: Path,
    processes: int,
    devices_per_process: int,
    port: int,
    timeout: int,
    workers: list[Worker],
    fail_rank: int | None = None,
    program: Path | None = None,
) -> None:
    """Start the N worker processes into ``workers``; their stdout and stderr go to files in
    ``folder``.

    Each process joins ``workers`` before a Ctrl-C can interrupt the launcher (SIGINT is held back
    from the spawn until the append), so the caller's ``finally`` stops every process started.
    """
    for i in range(processes):
        command = [
            sys.executable,
            "-m",
            "course_utils.tools.launch.worker",
            "--process-id",
            str(i),
            "--processes",
            str(processes),
            "--devices-per-process",
            str(devices_per_process),
            "--port",
            str(port),
            "--timeout",
            str(timeout),
        ]
        if program is not None:
            command += ["--program", str(program)]
        if i == fail_rank:
            command.append("--fail-before-check")
        out, err = folder / f"worker{i}.out", folder / f"worker{i}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                workers.append(Worker(i, spawn(command, stdout, stderr), out, err))
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)


def stop_workers(workers: list[Worker]) -> None:
    """Terminate the workers still running (only these processes), then kill any that linger."""
    stop([w.popen for w in workers])


def _last_line(path: Path) -> str:
    """The last stderr line that is not part of a C++ stack trace
    (``@ 0x…``, ``*** Check failure…``).
    """
    lines = [line.strip() for line in path.read_text(errors="replace").splitlines()]
    lines = [line for line in lines if line and not line.startswith(("@ ", "*** "))]
    return lines[-1] if lines else "(nothing on stderr)"


def _status(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


def wait_for_workers(workers: list[Worker], seconds: float) -> None:
    """Wait until every worker exits 0; raise ``CourseError`` at the first failure or at the
    deadline.
    """
    by_popen = {id(w.popen): w for w in workers}
    try:
        for popen in first_exit([w.popen for w in workers], seconds):
            w = by_popen[id(popen)]
            if popen.returncode != 0:
                raise CourseError(
                    f"process {w.process_id} failed ({_status(popen.returncode)}): "
                    f"{_last_line(w.stderr)}; the other processes were stopped"
                )
    except TimeoutError:
        late = ", ".join(str(v.process_id) for v in workers if v.popen.poll() is None)
        raise CourseError(
            f"the launch did not finish within {seconds:.0f} s (still running: "
            f"process {late}); raise --timeout or run fewer processes"
        ) from None


def read_report(worker: Worker) -> dict:
    """The JSON line a finished worker printed last on stdout."""
    lines = [
        line
        for line in worker.stdout.read_text(errors="replace").splitlines()
        if line.startswith("{")
    ]
    if not lines:
        raise CourseError(
            f"process {worker.process_id} exited 0 without a report; "
            f"run it by hand: {' '.join(worker.popen.args)}"
        )
    return json.loads(lines[-1])


def merge_reports(reports: list[dict], devices_per_process: int, port: int, wall_s: float) -> dict:
    """One summary: the worst error and the check over all processes, process 0's times."""
    expected = len(reports) * devices_per_process
    for r in reports:
        if r["local_devices"] != devices_per_process or r["global_devices"] != expected:
            raise CourseError(
                f"process {r['process_id']} saw {r['local_devices']} local "
                f"and {r['global_devices']} global devices "
                f"instead of {devices_per_process} and {expected}; "
                f"unset JAX_* and XLA_FLAGS variables that set devices and launch again"
            )
    first = reports[0]
    kernels = {}
    for name, k in first["kernels"].items():
        per_process = [r["kernels"][name] for r in reports]
        kernels[name] = {
            "max_error": max(p["max_error"] for p in per_process),
            "passed": all(p["passed"] for p in per_process),
            "shards_checked": sum(p["shards_checked"] for p in per_process),
            **{key: value for key, value in k.items() if key.endswith("_us")},  # process 0's
        }
    return {
        "processes": len(reports),
        "devices_per_process": devices_per_process,
        "global_devices": first["global_devices"],
        "local_devices": [r["local_devices"] for r in reports],
        "coordinator": f"{HOST}:{port}",
        "n_rows": first["n_rows"],
        "n_features": first["n_features"],
        "kernels": kernels,
        "passed": all(k["passed"] for k in kernels.values()),
        "wall_s": wall_s,
    }


def launch(
    processes: int = 2,
    devices_per_process: int = 2,
    port: int | None = None,
    timeout: int = 60,
    *,
    fail_rank: int | None = None,
    program: str | Path | None = None,
) -> dict:
    """Run the course kernels on ``processes`` local processes of ``devices_per_process`` CPU
    devices each.

    Args:
        processes: N, the number of processes.
        devices_per_process: D, logical CPU devices in each process (N·D ≤ 64).
        port: the coordinator's port on 127.0.0.1; ``None`` picks a free one.
        timeout: seconds each process waits for the others to join; the whole launch is stopped
            after ``timeout + 120`` s.
        fail_rank: make this process fail on purpose before its check (to see, and test, how a
            launch stops when one process dies).
        program: a Python file defining ``join`` and ``global_inputs`` with the signatures of
            ``course_utils.devices.multiprocess``'s ``join_runtime`` and ``global_inputs``;
            every process uses them instead of the package's (notebook 09 writes one).

    Returns:
        The summary: ``processes``, ``devices_per_process``, ``global_devices``, ``local_devices``
        (one entry per process), ``coordinator``, ``n_rows``, ``n_features``, ``kernels`` (per
        kernel: ``max_error`` and ``passed`` over all processes, ``shards_checked``, process 0's
        ``median_us``, ``iqr_us``, ``min_us`` and its quartiles ``q1_us``, ``q3_us``), ``passed``
        and ``wall_s`` (the whole launch).

    Raises:
        ValueError: invalid N, D, timeout, port or ``fail_rank``, or no ``program`` file.
        CourseError: the port is taken, a process failed, or the deadline passed.
        KeyboardInterrupt: interrupted; the workers are stopped first.
    """
    start = time.perf_counter()
    check_counts(processes, devices_per_process, timeout, fail_rank)
    if program is not None:
        program = Path(program).resolve()
        if not program.is_file():
            raise ValueError(f"--program {program}: no such file")
    if port is None:
        port = free_port()
    check_port(port)
    with tempfile.TemporaryDirectory(prefix="course-launch-") as folder:
        workers: list[Worker] = []
        try:
            start_workers(
                Path(folder), processes, devices_per_process, port, timeout, workers, fail_rank,
                program,
            )
            wait_for_workers(workers, timeout + RUN_SECONDS)
        finally:
            stop_workers(workers)
        reports = [read_report(w) for w in workers]
    return merge_reports(reports, devices_per_process, port, time.perf_counter() - start)


def format_summary(summary: dict) -> str:
    """The summary as a few lines of text (what ``course launch`` prints)."""
    n, d, total = summary["processes"], summary["devices_per_process"], summary["global_devices"]
    lines = [
        f"course launch: {n} processes × {d} CPU devices = {total} global devices; "
        f"coordinator {summary['coordinator']}, gloo on {HOST}",
        f"  x ({summary['n_rows']}, {summary['n_features']}) split by rows "
        f"over all {total} devices; each process filled only its own shards",
        f"  {'kernel':<25}{'max error':>10}{'check':>7}{'median µs':>11}{'IQR µs':>9}",
    ]
    for name, k in summary["kernels"].items():
        check = "ok" if k["passed"] else "FAILED"
        lines.append(
            f"  {name:<25}{k['max_error']:>10.1e}{check:>7}"
            f"{k['median_us']:>11.1f}{k['iqr_us']:>9.1f}"
        )
    shards = sum(k["shards_checked"] for k in summary["kernels"].values())
    verdict = "all checks passed" if summary["passed"] else "SOME CHECKS FAILED"
    lines.append(
        f"  {verdict}: {shards} shards compared with NumPy (atol = rtol = {ATOL:g}); "
        f"times are process 0's medians; wall time {summary['wall_s']:.1f} s"
    )
    return "\n".join(lines)


def _run_launch(args: argparse.Namespace) -> int:
    try:
        summary = launch(
            args.processes,
            args.devices_per_process,
            args.port,
            args.timeout,
            fail_rank=args.fail_rank,
            program=args.program,
        )
    except ValueError as exc:
        raise usage(exc) from None
    except KeyboardInterrupt:
        raise CourseError("interrupted; the worker processes were stopped",
                          EXIT_INTERRUPTED) from None
    print(json.dumps(summary) if args.json else format_summary(summary))
    return EXIT_OK if summary["passed"] else EXIT_FAILED


def add_launch_parser(sub) -> None:
    """Register ``course launch``."""
    launch_ = sub.add_parser("launch", help="run the kernels on N local processes (gloo)")
    count = {"type": positive_int_arg}
    launch_.add_argument("--processes", **count, required=True, help="N, processes to start")
    launch_.add_argument("--devices-per-process", **count, required=True,
                         help=f"D, logical CPU devices per process (N·D ≤ {MAX_DEVICES})")
    launch_.add_argument("--port", **count, help=f"coordinator port on {HOST} (default: free)")
    launch_.add_argument("--timeout", **count, default=60,
                         help="seconds to wait for all processes to join (default: 60); the launch "
                              f"stops after timeout + {RUN_SECONDS} s")
    launch_.add_argument("--fail-rank", type=int, metavar="R",
                         help="make process R fail before its check, to see how a launch stops")
    launch_.add_argument("--program", metavar="FILE",
                         help="a Python file defining join and global_inputs (as in "
                              "course_utils.devices.multiprocess) for every process to use")
    launch_.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    launch_.set_defaults(handler=_run_launch)
