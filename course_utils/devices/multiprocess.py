"""One process of a multi-process run: join JAX's runtime, build global arrays, check own shards.

A real cluster runs one process per host; each process fills and reads only the shards on its own
(addressable) devices. ``course launch`` (notebook 09) runs these functions in every process.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh

from course_utils.constants import ATOL, RTOL
from course_utils.devices.setup import placements
from course_utils.problems.regression import toy_regression


def join_runtime(
    coordinator: str,
    process_id: int,
    processes: int,
    devices_per_process: int,
    *,
    timeout_s: int = 60,
) -> None:
    """Configure this process's CPU devices with gloo collectives and join the N-process runtime.

    Call it first, before any other JAX operation, in every process with the same ``coordinator``
    and ``processes`` and a different ``process_id``.

    Args:
        coordinator: ``host:port`` of process 0, reachable by every process.
        process_id: this process's rank, 0 … processes − 1.
        processes: N, the number of processes.
        devices_per_process: D, logical CPU devices in this process.
        timeout_s: how long to wait for all N processes to join.
    """
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", devices_per_process)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator,
        num_processes=processes,
        process_id=process_id,
        coordinator_bind_address=coordinator,
        initialization_timeout=timeout_s,
    )


def host_problem(n_devices: int) -> tuple[np.ndarray, ...]:
    """``x, y, w`` of the toy regression sized to divide over ``n_devices``,
    and a momentum ``v``.
    """
    x, y, w = toy_regression(n_rows=4 * n_devices, n_features=2 * n_devices)
    return x, y, w, np.linspace(0.05, -0.05, w.size, dtype=np.float32)


def global_inputs(mesh: Mesh) -> dict[str, jax.Array]:
    """x, y, w, v as global arrays; this process fills only the shards on its own devices."""
    x, y, w, v = host_problem(mesh.size)
    rows, replicated, sliced = placements(mesh)
    host = {
        "x": (x, rows),
        "y": (y, sliced),
        "w": (w, replicated),
        "w_sliced": (w, sliced),
        "v": (v, sliced),
    }
    return {
        name: jax.make_array_from_callback(a.shape, sharding, lambda index, a=a: a[index])
        for name, (a, sharding) in host.items()
    }


def shard_error(result: jax.Array, expected: np.ndarray) -> tuple[float, bool, int]:
    """Largest |result − expected| over this process's shards, whether all are close, shard count.

    Each addressable shard is compared with the slice of ``expected`` it should hold
    (``ATOL``, ``RTOL`` from ``course_utils.constants``); a shard of the wrong shape counts as
    an infinite error.
    """
    errors, passed = [], True
    shards = result.addressable_shards
    for shard in shards:
        got, want = np.asarray(shard.data), expected[shard.index]
        if got.shape != want.shape:
            errors.append(float("inf"))
            passed = False
            continue
        errors.append(float(np.max(np.abs(got - want))))
        passed = passed and np.allclose(got, want, atol=ATOL, rtol=RTOL)
    return max(errors), passed, len(shards)
