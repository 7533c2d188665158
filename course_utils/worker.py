"""One process of ``course launch``: join JAX's distributed runtime, run the kernels, check every shard.

Run as ``python -m course_utils.worker --process-id I --processes N --devices-per-process D
--port P --timeout S``; ``course launch`` starts N of these. Each process fills only its own shards
of the global arrays, runs the course kernels over all N·D devices (collectives go through gloo on
127.0.0.1), compares every addressable shard with the NumPy reference and prints one JSON line.
A failure is one line on stderr and a non-zero exit status.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from course_utils.data import reference_gradient, toy_regression
from course_utils.devices import data_mesh, placements
from course_utils.kernels import (all_gather_shards, all_reduce_gradient, reduce_scatter_gradient,
                                  sharded_momentum_step)
from course_utils.launch import FAIL_RANK_ENV, HOST, fail_rank_from_env
from course_utils.timing import time_completed_calls

TOL = dict(atol=2e-6, rtol=2e-6)
LR, BETA = 0.1, 0.9
N_SAMPLES = 20

# exit statuses the parent can tell apart
EXIT_BAD_ARGUMENT, EXIT_NO_JOIN, EXIT_FAILED = 2, 3, 4


class Run(NamedTuple):
    """One kernel: the callable, the global arrays it was called with, and its results."""

    fn: Callable
    args: tuple
    outputs: tuple


def fail(message: str, status: int) -> None:
    """Print ``message`` as the last stderr line and exit at once with ``status``.

    ``os._exit`` skips interpreter shutdown, where JAX's distributed client would wait at the
    shutdown barrier for peers that may never come.
    """
    sys.stdout.flush()
    sys.stderr.write(f"{message}\n")
    sys.stderr.flush()
    os._exit(status)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _gloo_on_loopback() -> None:
    """Make the CPU backend's gloo transport bind to ``HOST`` instead of this machine's host name.

    ``jax_cpu_collectives_implementation='gloo'`` alone lets gloo bind to whatever the host name
    resolves to; JAX has no option for the address, so the CPU backend factory is re-registered
    (before any JAX operation) with gloo collectives made for ``HOST``.
    """
    from jax._src import distributed, xla_bridge
    from jax._src.lib import _jax
    from jax.extend.backend import register_backend_factory

    def make_client():
        collectives = _jax.make_gloo_tcp_collectives(distributed_client=distributed.global_state.client,
                                                     hostname=HOST)
        return xla_bridge.make_cpu_client(collectives=collectives)

    register_backend_factory("cpu", make_client, priority=0, fail_quietly=False)


def join(process_id: int, processes: int, devices_per_process: int, port: int, timeout: int) -> None:
    """Configure D CPU devices with gloo collectives and join the N-process runtime on ``HOST:port``."""
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", devices_per_process)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    # the preemption service catches SIGTERM; here SIGTERM comes from the launcher and means stop
    jax.config.update("jax_enable_preemption_service", False)
    address = f"{HOST}:{port}"
    # JAX aborts the process (no Python exception) a few seconds after initialization_timeout;
    # this timer ends it first, with one readable line
    late = (f"the {processes} processes did not all join on {address} within {timeout} s; "
            f"raise --timeout or check that every process started")
    watchdog = threading.Timer(timeout, fail, (late, EXIT_NO_JOIN))
    watchdog.daemon = True
    watchdog.start()
    try:
        jax.distributed.initialize(coordinator_address=address, num_processes=processes, process_id=process_id,
                                   coordinator_bind_address=address, initialization_timeout=timeout)
    except Exception as exc:  # JAX raises its own runtime error types here
        fail(f"could not join the {processes} processes on {address}: {_first_line(exc)}; "
             f"if port {port} is taken, pick another with --port or omit --port", EXIT_NO_JOIN)
    finally:
        watchdog.cancel()
    _gloo_on_loopback()


def host_problem(n_devices: int) -> tuple[np.ndarray, ...]:
    """``x, y, w`` of the toy regression sized to divide over ``n_devices``, and a momentum ``v``."""
    x, y, w = toy_regression(n_rows=4 * n_devices, n_features=2 * n_devices)
    return x, y, w, np.linspace(0.05, -0.05, w.size, dtype=np.float32)


def global_inputs(mesh: Mesh) -> dict[str, jax.Array]:
    """x, y, w, v as global arrays; this process fills only the shards on its own devices."""
    x, y, w, v = host_problem(mesh.size)
    rows, replicated, features = placements(mesh)
    host = {"x": (x, rows), "y": (y, features), "w": (w, replicated), "w_sliced": (w, features),
            "v": (v, features)}
    return {name: jax.make_array_from_callback(a.shape, sharding, lambda index, a=a: a[index])
            for name, (a, sharding) in host.items()}


def shard_error(result: jax.Array, expected: np.ndarray) -> tuple[float, bool, int]:
    """Largest |result − expected| over this process's shards, whether all are within TOL, shard count."""
    errors, passed = [], True
    shards = result.addressable_shards
    for shard in shards:
        got, want = np.asarray(shard.data), expected[shard.index]
        if got.shape != want.shape:
            errors.append(float("inf"))
            passed = False
            continue
        errors.append(float(np.max(np.abs(got - want))))
        passed = passed and np.allclose(got, want, **TOL)
    return max(errors), passed, len(shards)


def run_kernels(mesh: Mesh, arrays: dict[str, jax.Array]) -> dict[str, Run]:
    """Call each kernel once on the global arrays (same order in every process) and keep its results."""
    x, y, w = arrays["x"], arrays["y"], arrays["w"]
    all_reduce, reduce_scatter, all_gather = (all_reduce_gradient(mesh), reduce_scatter_gradient(mesh),
                                              all_gather_shards(mesh))
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
    """The NumPy expectation of every kernel's results, whole (each shard compares with its slice)."""
    x, y, w, v = host_problem(mesh.size)
    g = reference_gradient(x, y, w)
    v_new = BETA * v + g
    return {"all_reduce_gradient": (g,), "reduce_scatter_gradient": (g,), "all_gather_shards": (g,),
            "sharded_momentum_step": (w - LR * v_new, v_new)}


def check_results(results: dict[str, Run], expected: dict[str, tuple]) -> dict[str, dict]:
    """Per kernel: ``max_error`` and ``passed`` over every addressable shard of every result."""
    kernels = {}
    for name, want in expected.items():
        checks = [shard_error(out, full) for out, full in zip(results[name].outputs, want)]
        kernels[name] = {"max_error": max(c[0] for c in checks), "passed": all(c[1] for c in checks),
                         "shards_checked": sum(c[2] for c in checks)}
    return kernels


def main(argv: list[str] | None = None) -> int:
    """Join, compute, check every addressable shard, time each kernel, print one JSON line."""
    parser = argparse.ArgumentParser(prog="python -m course_utils.worker", description=__doc__.splitlines()[0])
    for flag in ("--process-id", "--processes", "--devices-per-process", "--port", "--timeout"):
        parser.add_argument(flag, type=int, required=True)
    args = parser.parse_args(argv)
    me = args.process_id
    try:
        fail_rank = fail_rank_from_env(os.environ, args.processes)
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_ARGUMENT)
    join(me, args.processes, args.devices_per_process, args.port, args.timeout)

    mesh = data_mesh()
    arrays = global_inputs(mesh)
    results = run_kernels(mesh, arrays)
    if fail_rank == me:
        fail(f"failing on purpose before the check ({FAIL_RANK_ENV}={me})", EXIT_FAILED)
    kernels = check_results(results, expected_results(mesh))
    wrong = ", ".join(f"{name} {k['max_error']:.2e}" for name, k in kernels.items() if not k["passed"])
    if wrong:
        fail(f"wrong values on this process's shards: {wrong} (atol = rtol = {TOL['atol']:g})", EXIT_FAILED)
    for name, run in results.items():  # the same order in every process: collectives must match
        timing = time_completed_calls(run.fn, *run.args, n_samples=N_SAMPLES)
        kernels[name].update({key: timing[key] for key in ("median_us", "iqr_us", "min_us")})
    report = {"process_id": jax.process_index(), "processes": jax.process_count(),
              "global_devices": jax.device_count(), "local_devices": jax.local_device_count(),
              "n_rows": arrays["x"].shape[0], "n_features": arrays["x"].shape[1], "kernels": kernels}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
