"""The benchmark's measurements, runnable in any process whose devices are set: a notebook's live
sweep and each ``course bench`` worker call the same functions.

Sizes: S = 4·elements bytes is the size of the one logical float32 vector a collective is about
(the nccl-tests convention). For ``psum``, ``psum_scatter`` and both RS+AG variants every device
holds a whole S-byte partial (input ``(p, elements)`` split by rows, p·S in all); for ``all_gather``
every device holds S/p and ends with all S (input ``(p, elements/p)``).

How it is measured is ``PROTOCOL`` below, the one statement of it (``bench.json`` stores it).
Everything here is one process and one shared memory: the times are dispatch, rendezvous and
memory copies, never a network.
"""

from __future__ import annotations

import time

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.collectives.kernels import (
    COLLECTIVES,
    all_gather_shards,
    block_collective,
    momentum_update,
    sharded_momentum_step,
)
from course_utils.constants import BETA, LR, STEP_ATOL, STEP_RTOL
from course_utils.devices.setup import axis_of
from course_utils.observe.ir import hlo_collectives
from course_utils.observe.timing import Thunk, blocked_us, sample_blocked, summarize

VARIANTS = ("psum", "psum_scatter", "all_gather", "rs_ag_calls", "rs_ag_fused")
ZERO1_STEPS = ("dp", "zero1_fused", "zero1_calls")
LABELS = {
    "psum": "psum",
    "psum_scatter": "psum_scatter",
    "all_gather": "all_gather",
    "rs_ag_calls": "RS+AG, 2 calls",
    "rs_ag_fused": "RS+AG, 1 jit",
    "dp": "data-parallel (psum)",
    "zero1_fused": "ZeRO-1, 1 jit",
    "zero1_calls": "ZeRO-1, 3 calls",
}
# what each variant computes, for the nccl-tests bus-bandwidth factor
KIND = {
    "psum": "all_reduce",
    "psum_scatter": "reduce_scatter",
    "all_gather": "all_gather",
    "rs_ag_calls": "all_reduce",
    "rs_ag_fused": "all_reduce",
}
SLOW_CALL_US = 1000.0  # calls slower than this get fewer samples
MEMCPY_MIB = (16, 32, 64)
MEMCPY_TRIES = 7
SIZE_DEFINITION = (
    "S = 4·elements bytes, the size of the one logical float32 vector (nccl-tests): psum, "
    "psum_scatter and RS+AG take a (p, elements) array split by rows (each device a whole S-byte "
    "partial, p·S in all) and end with S per device (psum_scatter: S/p); all_gather takes "
    "(p, elements/p) (S/p per device) and ends with S per device."
)


# the benchmark protocol, stated once: course bench stores it with every run
PROTOCOL = (
    "per worker process: memcpy first; at each size every variant's first call (trace + "
    "compile + run; programs an earlier variant compiled come from the cache) timed apart "
    "as compile_us, warm-up rounds, then samples interleaved round-robin "
    "(order rotating), gc off, every call blocked; fewer samples for calls over "
    f"{SLOW_CALL_US:g} µs; repeats are whole sweeps in fresh processes"
)


def _shard_map(mesh: Mesh, kernel, in_specs, out_specs):
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=in_specs, out_specs=out_specs))


def memcpy_bandwidth(mib_sizes=MEMCPY_MIB, tries: int = MEMCPY_TRIES) -> list[dict]:
    """Best-of-``tries`` time of a NumPy copy into a preallocated (already faulted-in) buffer,
    per size.
    """
    found = []
    for mib in mib_sizes:
        src = np.ones(mib * 2**18, np.float32)
        dst = np.zeros_like(src)
        times = []
        for _ in range(tries):
            start = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - start)
        found.append({"bytes": src.nbytes, "best_s": min(times)})
    return found


def rs_ag_fused(mesh: Mesh):
    """One jitted shard_map: ``psum_scatter`` then ``all_gather`` of a ``(p, m)``
    row-split array.
    """
    axis = axis_of(mesh)

    def kernel(block):
        # block: f32[1, m] → f32[m/p] → f32[1, m]
        piece = jax.lax.psum_scatter(block[0], axis, tiled=True)
        return jax.lax.all_gather(piece, axis, tiled=True)[None]

    return _shard_map(mesh, kernel, P(axis, None), P(axis, None))


def dp_step(mesh: Mesh):
    """The data-parallel step, one jit: ``psum`` of the partial gradients,
    replicated momentum update.
    """
    axis = axis_of(mesh)

    def kernel(g_block, w, v):
        # g_block: f32[1, n]; w, v: f32[n] on every device
        return momentum_update(w, v, jax.lax.psum(g_block[0], axis), LR, BETA)

    return _shard_map(mesh, kernel, (P(axis, None), P(), P()), (P(), P()))


def zero1_step(mesh: Mesh):
    """The fused ZeRO-1 step, one jit: reduce-scatter, sliced momentum update, all-gather of w."""
    axis = axis_of(mesh)

    def kernel(g_block, w, v_slice):
        # g_block: f32[1, n]; w: f32[n] on every device; v_slice: f32[n/p], this device's slice
        g_slice = jax.lax.psum_scatter(g_block[0], axis, tiled=True)  # f32[n/p]
        start = jax.lax.axis_index(axis) * g_slice.size
        w_slice = jax.lax.dynamic_slice_in_dim(w, start, g_slice.size)
        w_slice, v_slice = momentum_update(w_slice, v_slice, g_slice, LR, BETA)
        # to="invarying": the gathered w is the same on every device, so out_specs=P() holds
        w = jax.lax.all_gather(w_slice, axis, tiled=True, to="invarying")  # f32[n]
        return w, v_slice  # v_slice: f32[n/p]

    return _shard_map(mesh, kernel, (P(axis, None), P(), P(axis)), (P(), P(axis)))


def scatter_call(mesh: Mesh):
    """A reduce-scatter call: ``(p, n)`` row-split partials → the summed ``(n,)`` vector, sliced."""
    axis = axis_of(mesh)
    return _shard_map(
        mesh,
        lambda g_block: jax.lax.psum_scatter(g_block[0], axis, tiled=True),
        P(axis, None),
        P(axis),
    )


def collective_runs(mesh: Mesh, elements: int) -> dict[str, Thunk]:
    """The five collective variants at one size S = 4·elements bytes, inputs placed, as thunks."""
    p, axis = mesh.size, axis_of(mesh)
    rows = NamedSharding(mesh, P(axis, None))
    rng = np.random.default_rng(elements)
    partials = jax.device_put(rng.standard_normal((p, elements), dtype=np.float32), rows)
    pieces = jax.device_put(rng.standard_normal((p, elements // p), dtype=np.float32), rows)
    psum, scatter, gather = (block_collective(mesh, kind).jitted for kind in COLLECTIVES)
    fused = rs_ag_fused(mesh)
    runs = {
        "psum": lambda: psum(partials),
        "psum_scatter": lambda: scatter(partials),
        "all_gather": lambda: gather(pieces),
        "rs_ag_calls": lambda: gather(scatter(partials)),
        "rs_ag_fused": lambda: fused(partials),
    }
    assert tuple(runs) == VARIANTS
    return runs


def zero1_runs(mesh: Mesh, params: int) -> dict[str, Thunk]:
    """The three optimizer steps over ``params`` float32 parameters, inputs placed, as thunks.

    All take the per-device partial gradients ``(p, params)`` split by rows and return ``(w, v)``
    with ``w`` replicated: ``dp`` (``dp_step``; v replicated), ``zero1_fused`` (``zero1_step``; v
    sliced) and ``zero1_calls`` (``scatter_call``, ``sharded_momentum_step`` on the sliced w and v,
    ``all_gather_shards`` of w).
    """
    p, axis = mesh.size, axis_of(mesh)
    rows, whole, sliced = (NamedSharding(mesh, spec) for spec in (P(axis, None), P(), P(axis)))
    rng = np.random.default_rng(params)
    grads = jax.device_put(rng.standard_normal((p, params), dtype=np.float32), rows)
    w0, v0 = rng.standard_normal((2, params), dtype=np.float32)
    w_whole, v_whole = jax.device_put(w0, whole), jax.device_put(v0, whole)
    w_slices, v_slices = jax.device_put(w0, sliced), jax.device_put(v0, sliced)
    dp, zero1, scatter, gather = (
        dp_step(mesh),
        zero1_step(mesh),
        scatter_call(mesh),
        all_gather_shards(mesh),
    )

    def calls():
        w_slice, v_slice = sharded_momentum_step(
            w_slices, v_slices, scatter(grads), lr=LR, beta=BETA
        )
        return gather(w_slice), v_slice

    runs = {
        "dp": lambda: dp(grads, w_whole, v_whole),
        "zero1_fused": lambda: zero1(grads, w_whole, v_slices),
        "zero1_calls": calls,
    }
    assert tuple(runs) == ZERO1_STEPS
    return runs


def time_interleaved(
    runs: dict[str, Thunk], n_fast: int, n_slow: int, n_warmup: int
) -> dict[str, dict]:
    """Time the thunks round-robin: first call apart, warm-ups, then ``sample_blocked``.

    ``n_fast`` samples each when the slowest warm-up call was under ``SLOW_CALL_US``, else
    ``n_slow``.

    Returns:
        Per name: ``median_us``, ``iqr_us``, ``min_us`` (``summarize``), ``compile_us`` (the first
        call) and ``n_samples``.
    """
    compile_us = {name: blocked_us(run) for name, run in runs.items()}
    warm = {name: 0.0 for name in runs}
    for _ in range(n_warmup):
        for name, run in runs.items():
            warm[name] = blocked_us(run)
    n_samples = n_fast if max(warm.values()) < SLOW_CALL_US else n_slow
    samples = sample_blocked(runs, n_samples)
    return {
        name: {**summarize(samples[name]), "compile_us": compile_us[name], "n_samples": n_samples}
        for name in runs
    }


def device0_nbytes(array: jax.Array) -> int:
    """Bytes of ``array`` held by device 0, read from its addressable shards."""
    device = jax.devices()[0]
    return sum(s.data.nbytes for s in array.addressable_shards if s.device == device)


def zero1_facts(runs: dict[str, Thunk]) -> dict:
    """Optimizer-state (v) bytes on device 0 per step, and whether the three steps
    agree on (w, v).
    """
    outputs = {name: run() for name, run in runs.items()}
    w_ref, v_ref = (np.asarray(a) for a in outputs["dp"])
    agree = all(
        np.allclose(np.asarray(w), w_ref, rtol=STEP_RTOL, atol=STEP_ATOL)
        and np.allclose(np.asarray(v), v_ref, rtol=STEP_RTOL, atol=STEP_ATOL)
        for w, v in outputs.values()
    )
    return {
        "state_bytes_device0": {name: device0_nbytes(v) for name, (_, v) in outputs.items()},
        "agree": bool(agree),
    }


def compiled_collectives(mesh: Mesh) -> dict[str, list[str]]:
    """The collective ops XLA keeps in each one-jit program (compiled at a small size).

    Shows what "fused" means here: the ops stay separate inside one program and one dispatch.
    """
    p, axis = mesh.size, axis_of(mesh)
    n = 8 * p

    def arg(shape, spec):
        return jax.ShapeDtypeStruct(shape, np.float32, sharding=NamedSharding(mesh, spec))

    grads = arg((p, n), P(axis, None))
    programs = {
        "rs_ag_fused": (rs_ag_fused(mesh), (grads,)),
        "dp": (dp_step(mesh), (grads, arg((n,), P()), arg((n,), P()))),
        "zero1_fused": (zero1_step(mesh), (grads, arg((n,), P()), arg((n,), P(axis)))),
    }
    return {
        name: [e.op for e in hlo_collectives(fn.lower(*args).compile().as_text())]
        for name, (fn, args) in programs.items()
    }
