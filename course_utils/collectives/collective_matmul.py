"""A collective matmul on the hosts' meshes: ``C = A @ B`` with ``A``'s rows split over the
hosts and ``B``'s columns split, so that host h computes its column block ``A @ B_h`` and needs
every host's rows of ``A``.

Three ways (each ``(a, b) -> c``, ``c`` split by columns as ``b``):
``gathered_matmul`` all-gathers ``A``, then multiplies: nothing to compute until the gather ends.
``looped_matmul`` is the shard_map documentation's form, in one program: p steps, each
multiplying the block a host holds, then ``ppermute`` passing it on. On two hosts XLA:CPU runs
it one operation after another (a program of at most 8 thunks runs sequentially:
``thunk_executor.h``), so nothing in it overlaps there. ``by_hand_matmul`` runs the same steps
as separate programs: the partial product on the compute device, dispatched first, and the
``ppermute`` on the stream.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.collectives.overlap import move

MATMUL_ROWS, MATMUL_COLUMNS = P("host", None), P(None, "host")


def _shift(block):
    p = jax.lax.axis_size("host")
    return jax.lax.ppermute(block, "host", [(i, (i + 1) % p) for i in range(p)])


def _place(out, block, b, k):
    """``out`` with rows of host (h − k)'s block times ``b`` filled in: after k shifts, host h
    holds host (h − k)'s rows of ``A``."""
    p, h = jax.lax.axis_size("host"), jax.lax.axis_index("host")
    rows = block.shape[0]
    return jax.lax.dynamic_update_slice(out, block @ b, (((h - k) % p) * rows, 0))


def gathered_matmul(compute: Mesh) -> Callable:
    """All-gather ``A``'s rows, then one matmul (``a``: ``P("host", None)``, ``b``:
    ``P(None, "host")``)."""
    return jax.jit(jax.shard_map(lambda a, b: jax.lax.all_gather(a, "host", tiled=True) @ b,
                                 mesh=compute, in_specs=(MATMUL_ROWS, MATMUL_COLUMNS),
                                 out_specs=MATMUL_COLUMNS))


def looped_matmul(compute: Mesh) -> Callable:
    """One program: p partial products, each block passed on by ``ppermute`` for the next (on
    XLA:CPU at two hosts, one after the other: see the module's docstring)."""

    def body(a, b):
        p = jax.lax.axis_size("host")
        out, block = jnp.zeros((p * a.shape[0], b.shape[1]), a.dtype), a
        for k in range(p):
            out = _place(out, block, b, k)
            if k < p - 1:
                block = _shift(block)
        return out

    return jax.jit(jax.shard_map(body, mesh=compute, in_specs=(MATMUL_ROWS, MATMUL_COLUMNS),
                                 out_specs=MATMUL_COLUMNS))


class ByHand(NamedTuple):
    """The programs of ``by_hand_matmul``."""

    place: Callable  # (k, out, block, b) -> out with step k's partial product, on compute
    shift: Callable  # block -> the previous host's block, on the stream
    zeros: Callable  # (a, b) -> an empty c
    compute: NamedSharding  # where a block is multiplied


def by_hand_programs(compute: Mesh, stream: Mesh) -> ByHand:
    """The programs of the collective matmul split between the compute device and the stream."""

    @partial(jax.jit, static_argnums=0)
    def place(k, out, block, b):
        return jax.shard_map(partial(lambda k, o, a, b: _place(o, a, b, k), k), mesh=compute,
                             in_specs=(MATMUL_COLUMNS, MATMUL_ROWS, MATMUL_COLUMNS),
                             out_specs=MATMUL_COLUMNS)(out, block, b)

    shift = jax.jit(jax.shard_map(_shift, mesh=stream, in_specs=MATMUL_ROWS, out_specs=MATMUL_ROWS))

    # made on each device: a whole array put from one process would be sent over the links
    @partial(jax.jit, static_argnums=(0, 1, 2),
             out_shardings=NamedSharding(compute, MATMUL_COLUMNS))
    def empty(rows, columns, dtype):
        return jnp.zeros((rows, columns), dtype)

    def zeros(a, b):
        return empty(a.shape[0], b.shape[1], a.dtype)

    return ByHand(place, shift, zeros, NamedSharding(compute, MATMUL_ROWS))


def by_hand_matmul(progs: ByHand, a, a_on_stream, b):
    """``A @ B`` by hand: each step's partial product is dispatched on the compute device
    first, then the ``ppermute`` of the same block on the stream, which runs meanwhile (a
    ``ppermute`` program has no arithmetic, so the CPU client runs it in the calling thread
    when its input is ready: dispatched first, it would hold up the product)."""
    hosts = a.sharding.mesh.shape["host"]
    out, block, sent = progs.zeros(a, b), a, a_on_stream
    for k in range(hosts):
        out = progs.place(k, out, block, b)
        if k < hosts - 1:
            sent = progs.shift(sent)
            block = move(sent, progs.compute)
    return out
