"""One process of ``course launch``: join JAX's distributed runtime, run the kernels,
check every shard.

Run as ``python -m course_utils.tools.launch.worker --process-id I --processes N
--devices-per-process D --port P --timeout S [--program FILE]``; ``course launch`` starts N of
these. Each process joins and fills only its own shards of the global arrays (with
``join_runtime`` and ``global_inputs``, or with the functions ``join`` and ``global_inputs`` of
``FILE``, the per-process program notebook 09 writes), runs the course kernels over all N·D devices
(collectives go through gloo on 127.0.0.1), compares every addressable shard with the NumPy
reference (with ``run_kernels`` and ``check_results`` below, or with ``FILE``'s ``run_kernels``
and ``check_shards`` where it defines them) and prints one JSON line. A failure is one line on
stderr and a non-zero exit status.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
from types import ModuleType
from typing import Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from course_utils.collectives.kernels import (
    all_gather_shards,
    all_reduce_gradient,
    reduce_scatter_gradient,
    sharded_momentum_step,
)
from course_utils.constants import ATOL, BETA, EXIT_NO_JOIN, EXIT_USAGE, EXIT_WRONG_VALUES, LR
from course_utils.devices.multiprocess import global_inputs, host_problem, join_runtime, shard_error
from course_utils.devices.setup import data_mesh
from course_utils.display import error_line
from course_utils.observe.timing import time_completed_calls
from course_utils.problems.regression import reference_gradient
from course_utils.tools.launch.command import HOST
from course_utils.tools.launch.jax_private import bind_gloo_to

N_SAMPLES = 20


class Run(NamedTuple):
    """One kernel: the callable, the global arrays it was called with, and its results."""

    fn: Callable
    args: tuple
    outputs: tuple


# what each kernel's report keeps of its timing (``time_completed_calls``), in µs
TIMING_KEYS = ("median_us", "iqr_us", "min_us", "q1_us", "q3_us")


def fail(message: str, status: int) -> None:
    """Print ``message`` as the last stderr line and exit at once with ``status``.

    ``os._exit`` skips interpreter shutdown, where JAX's distributed client would wait at the
    shutdown barrier for peers that may never come.
    """
    sys.stdout.flush()
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()
    os._exit(status)


def load_program(path: str) -> ModuleType:
    """The per-process program in ``path``: a module with ``join(coordinator, process_id,
    processes, devices_per_process, *, timeout_s)`` and ``global_inputs(mesh)`` (and, optionally,
    ``run_kernels(mesh, arrays)`` returning ``{name: (fn, args, result)}`` and
    ``check_shards(mesh, results)`` returning ``{name: {max_error, passed, shards_checked}}``),
    or exit with one readable line.
    """
    spec = importlib.util.spec_from_file_location("per_process", path)
    try:
        program = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(program)
    except Exception as exc:  # whatever the program raises on import
        fail(f"could not load the program {path}: {error_line(exc)}", EXIT_USAGE)
    missing = [name for name in ("join", "global_inputs") if not callable(getattr(program, name,
                                                                                  None))]
    if missing:
        fail(f"the program {path} defines no function {' or '.join(missing)}", EXIT_USAGE)
    pair = [callable(getattr(program, name, None)) for name in ("run_kernels", "check_shards")]
    if pair[0] != pair[1]:
        fail(f"the program {path} must define both run_kernels and check_shards, or neither",
             EXIT_USAGE)
    return program


def join(
    process_id: int,
    processes: int,
    devices_per_process: int,
    port: int,
    timeout: int,
    joiner: Callable = join_runtime,
) -> None:
    """Join the N-process runtime on ``HOST:port`` with ``joiner`` (``join_runtime``'s
    arguments), or exit with one readable line."""
    # the preemption service catches SIGTERM; here SIGTERM comes from the launcher and means stop
    jax.config.update("jax_enable_preemption_service", False)
    address = f"{HOST}:{port}"
    # JAX aborts the process (no Python exception) a few seconds after initialization_timeout;
    # this timer ends it first, with one readable line
    late = (
        f"the {processes} processes did not all join on {address} within {timeout} s; "
        f"raise --timeout or check that every process started"
    )
    watchdog = threading.Timer(timeout, fail, (late, EXIT_NO_JOIN))
    watchdog.daemon = True
    watchdog.start()
    try:
        joiner(address, process_id, processes, devices_per_process, timeout_s=timeout)
    except Exception as exc:  # JAX raises its own runtime error types here
        fail(
            f"could not join the {processes} processes on {address}: {error_line(exc)}; "
            f"if port {port} is taken, pick another with --port or omit --port",
            EXIT_NO_JOIN,
        )
    finally:
        watchdog.cancel()
    try:
        bind_gloo_to(HOST)
    except RuntimeError as exc:
        fail(str(exc), EXIT_NO_JOIN)


def run_kernels(mesh: Mesh, arrays: dict[str, jax.Array]) -> dict[str, Run]:
    """Call each kernel once on the global arrays (same order in every process) and keep its
    results.
    """
    x, y, w = arrays["x"], arrays["y"], arrays["w"]
    all_reduce, reduce_scatter, all_gather = (
        all_reduce_gradient(mesh),
        reduce_scatter_gradient(mesh),
        all_gather_shards(mesh),
    )
    g_scattered = reduce_scatter(x, y, w)

    def momentum(w_, v_, g_):
        return sharded_momentum_step(w_, v_, g_, lr=LR, beta=BETA)

    calls = {
        "all_reduce_gradient": (all_reduce, (x, y, w)),
        "reduce_scatter_gradient": (reduce_scatter, (x, y, w)),
        "all_gather_shards": (all_gather, (g_scattered,)),
        "sharded_momentum_step": (momentum, (arrays["w_sliced"], arrays["v"], g_scattered)),
    }
    results = {}
    for name, (fn, args) in calls.items():
        out = jax.block_until_ready(fn(*args))
        results[name] = Run(fn, args, out if isinstance(out, tuple) else (out,))
    return results


def expected_results(mesh: Mesh) -> dict[str, tuple[np.ndarray, ...]]:
    """The NumPy expectation of every kernel's results, whole (each shard compares with its
    slice).
    """
    x, y, w, v = host_problem(mesh.size)
    g = reference_gradient(x, y, w)
    v_new = BETA * v + g
    return {
        "all_reduce_gradient": (g,),
        "reduce_scatter_gradient": (g,),
        "all_gather_shards": (g,),
        "sharded_momentum_step": (w - LR * v_new, v_new),
    }


def check_results(results: dict[str, Run], expected: dict[str, tuple]) -> dict[str, dict]:
    """Per kernel: ``max_error`` and ``passed`` over every addressable shard of every result."""
    kernels = {}
    for name, want in expected.items():
        checks = [shard_error(out, full) for out, full in zip(results[name].outputs, want)]
        kernels[name] = {
            "max_error": max(c[0] for c in checks),
            "passed": all(c[1] for c in checks),
            "shards_checked": sum(c[2] for c in checks),
        }
    return kernels


def main(argv: list[str] | None = None) -> int:
    """Join, compute, check every addressable shard, time each kernel, print one JSON line."""
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.tools.launch.worker", description=__doc__.split("\n\n")[0]
    )
    for flag in ("--process-id", "--processes", "--devices-per-process", "--port", "--timeout"):
        parser.add_argument(flag, type=int, required=True)
    parser.add_argument(
        "--program", help="a file defining join and global_inputs, used instead of the package's"
    )
    parser.add_argument(
        "--fail-before-check",
        action="store_true",
        help="exit with a failure before checking (to test the launcher's failure path)",
    )
    args = parser.parse_args(argv)
    me = args.process_id
    if not 0 <= me < args.processes:
        fail(f"--process-id {me} names no process of {args.processes}", EXIT_USAGE)
    program = load_program(args.program) if args.program else None
    joiner = program.join if program else join_runtime
    join(me, args.processes, args.devices_per_process, args.port, args.timeout, joiner)

    mesh = data_mesh()
    arrays = (program.global_inputs if program else global_inputs)(mesh)
    own = program is not None and hasattr(program, "run_kernels")
    results = (program.run_kernels if own else run_kernels)(mesh, arrays)
    if args.fail_before_check:
        fail(
            f"process {me} failing on purpose before the check (--fail-rank {me})",
            EXIT_WRONG_VALUES,
        )
    kernels = (program.check_shards(mesh, results) if own
               else check_results(results, expected_results(mesh)))
    wrong = ", ".join(
        f"{name} {k['max_error']:.2e}" for name, k in kernels.items() if not k["passed"]
    )
    if wrong:
        fail(
            f"wrong values on this process's shards: {wrong} (atol = rtol = {ATOL:g})",
            EXIT_WRONG_VALUES,
        )
    for name, (fn, args, _) in results.items():  # the same order everywhere: collectives match
        timing = time_completed_calls(fn, *args, n_samples=N_SAMPLES)
        kernels[name].update({key: timing[key] for key in TIMING_KEYS})
    report = {
        "process_id": jax.process_index(),
        "processes": jax.process_count(),
        "global_devices": jax.device_count(),
        "local_devices": jax.local_device_count(),
        "n_rows": arrays["x"].shape[0],
        "n_features": arrays["x"].shape[1],
        "kernels": kernels,
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
