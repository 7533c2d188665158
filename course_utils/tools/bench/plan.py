"""``course bench``, step 1: what to measure (the plan) and running one worker process per
device count.

A JAX process's device count is fixed, so each device count and repeat runs in a fresh
``python -m course_utils.tools.bench.worker``; the parent never starts a JAX backend.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import replace
from typing import Callable

from course_utils.results.bench import BenchPlan
from course_utils.tools.errors import CourseError
from course_utils.tools.processes import spawn, stop
from course_utils.validate import positive_int

FULL = BenchPlan(quick=False, devices=(2, 4, 8), sizes=tuple(2**k for k in range(3, 23)),
            zero1_sizes=tuple(2**k for k in range(10, 23, 2)), samples_fast=50, samples_slow=15,
            warmup=3, repeats=3, worker_timeout_s=1800)
QUICK = replace(FULL, quick=True, devices=(2, 4), sizes=(2**3, 2**10, 2**16, 2**20),
                zero1_sizes=(2**10, 2**20), samples_fast=10, samples_slow=5, repeats=1,
                worker_timeout_s=180)


def make_plan(quick: bool = False, repeats: int | None = None, max_log2: int = 22) -> BenchPlan:
    """The full sweep (2^3…2^max_log2 elements on 2, 4, 8 devices, 3 repeats) or the quick one.

    Examples:
        >>> plan = make_plan(quick=True)
        >>> plan.devices, plan.sizes, plan.repeats
        ((2, 4), (8, 1024, 65536, 1048576), 1)
        >>> make_plan(repeats=0)
        Traceback (most recent call last):
        ...
        ValueError: --repeats must be a positive integer, got 0; the protocol wants 3 or more
    """
    if repeats is not None:
        positive_int("--repeats", repeats, hint="the protocol wants 3 or more")
    if quick:
        if max_log2 != 22:
            raise ValueError(
                "--max-log2 sets the full sweep's largest size; drop --quick or --max-log2"
            )
        return replace(QUICK, repeats=repeats or QUICK.repeats)
    if isinstance(max_log2, bool) or not isinstance(max_log2, int) or not 10 <= max_log2 <= 24:
        raise ValueError(
            f"--max-log2 must be an integer from 10 to 24 (23 reaches the page-fault regime), "
            f"got {max_log2!r}"
        )
    sizes = tuple(2**k for k in range(3, max_log2 + 1))
    return replace(FULL, sizes=sizes, repeats=repeats or FULL.repeats)


def worker_command(plan: BenchPlan, devices: int) -> list[str]:
    """The command line of one worker."""
    return [
        sys.executable,
        "-m",
        "course_utils.tools.bench.worker",
        "--devices",
        str(devices),
        "--sizes",
        ",".join(map(str, plan.sizes)),
        "--zero1-sizes",
        ",".join(map(str, plan.zero1_sizes)),
        "--samples-fast",
        str(plan.samples_fast),
        "--samples-slow",
        str(plan.samples_slow),
        "--warmup",
        str(plan.warmup),
    ]


def steps_per_worker(plan: BenchPlan) -> int:
    """Progress events one worker sends: memcpy, each size, each ZeRO-1 size."""
    return 1 + len(plan.sizes) + len(plan.zero1_sizes)


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def run_worker(command: list[str], timeout_s: float, on_progress: Callable[[dict], None]) -> dict:
    """Run one worker, pass each progress event to ``on_progress``, return its result event.

    Raises:
        CourseError: the worker exited non-zero, sent no result, or ran past ``timeout_s``
            (it is killed).
    """
    with tempfile.TemporaryFile(mode="w+") as stderr:
        popen = spawn(command, subprocess.PIPE, stderr)
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
            raise CourseError(
                f"a worker ran past {timeout_s:.0f} s and was stopped: {' '.join(command[1:5])}; "
                "the machine may be busy: try again later or with --quick"
            ) from None
        finally:
            stop([popen])
        if returncode != 0 or result is None:
            stderr.seek(0)
            tail = stderr.read().strip()[-1500:]
            raise CourseError(
                f"worker {' '.join(command[1:5])} failed with exit status {returncode}:\n{tail}"
            )
    return result


def run_sweep(plan: BenchPlan, on_progress: Callable[[int, int, dict], None]) -> list[dict]:
    """All workers, repeat by repeat, each device count in turn; each report gains its
    ``repeat``.
    """
    reports = []
    for repeat in range(plan.repeats):
        for p in plan.devices:
            report = run_worker(
                worker_command(plan, p),
                plan.worker_timeout_s,
                lambda event, r=repeat, p=p: on_progress(r, p, event),
            )
            reports.append({**report, "repeat": repeat})
    return reports
