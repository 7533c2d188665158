"""The ring, built by hand from ``jax.lax.ppermute``: reduce-scatter and all-gather in p − 1 steps.

In every step each device sends one chunk of N/p values to the next device on the ring
(device j to j + 1, the last back to 0) and receives one from the previous device. After p − 1
steps of reduce-scatter device i holds the whole sum of chunk i; after p − 1 steps of all-gather
every device holds every chunk. Nothing else travels: the compiled program has p − 1
``collective-permute`` ops per phase, each moving N/p values per device (Patarasuk & Yuan, 2009).

Both kernels take and return blocks like ``block_collective(mesh, kind)``. The loop itself
(``ring_scatter_sum``) is the one ``ppermute`` ring of the package: ``ring_all_reduce`` (a
reduce-scatter by that loop, then an all-gather) runs it with any message encoding, as the
compressed 16-bit all-reduce (step 15) and ``course cluster``'s "ring f32" do.
"""

from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.collectives.kernels import Kernel, cached_builder, check_blocks, make_kernel
from course_utils.devices.setup import axis_of


def ring_permutation(p: int) -> list[tuple[int, int]]:
    """The ring's ``(source, destination)`` pairs for ``ppermute``: each device j sends to j + 1.

    Examples:
        >>> ring_permutation(3)
        [(0, 1), (1, 2), (2, 0)]
    """
    return [(j, (j + 1) % p) for j in range(p)]


def ring_chunk(device: int, steps_done: int, p: int) -> int:
    """Which chunk's partial sum ``device`` holds after ``steps_done`` reduce-scatter steps
    (before the first step: the chunk it sends first). After p − 1 steps it is chunk ``device``.

    Examples:
        >>> [ring_chunk(d, 0, 4) for d in range(4)], [ring_chunk(d, 3, 4) for d in range(4)]
        ([3, 0, 1, 2], [0, 1, 2, 3])
    """
    return (device - steps_done - 1) % p


def reduce_scatter_step(partial, chunks, s, axis_name: str):
    """Step ``s`` (0, 1, …) of the ring reduce-scatter on one device.

    Args:
        partial: f32[m/p], the partial sum this device passes on in this step.
        chunks: f32[p, m/p], this device's own block cut into p chunks.
        s: the step number.
        axis_name: the mesh axis the ring runs along.

    Returns:
        f32[m/p]: the partial sum received from the previous device, plus this device's own chunk
        of the same index. (Step 11 writes it on its page as ``ring_step``.)
    """
    p = chunks.shape[0]
    received = jax.lax.ppermute(partial, axis_name, ring_permutation(p))  # f32[m/p]
    i = jax.lax.axis_index(axis_name)
    return received + chunks[(i - s - 2) % p]  # f32[m/p]


def encoded_step(encode: Callable, decode: Callable) -> Callable:
    """``reduce_scatter_step`` with the message encoded: ``encode(partial)`` goes on the wire
    (bf16 bits as u16, say), ``decode`` reads it back and the sum is kept in f32 on arrival."""

    def step(partial, chunks, s, axis_name):
        p = chunks.shape[0]
        received = jax.lax.ppermute(encode(partial), axis_name, ring_permutation(p))
        return decode(received) + chunks[(jax.lax.axis_index(axis_name) - s - 2) % p]

    return step


def ring_scatter_sum(chunks, axis_name: str, *, step: Callable = reduce_scatter_step,
                     n_steps: int | None = None, direction: int = 1):
    """The ring reduce-scatter on one device: ``n_steps`` (default p − 1) calls of ``step``.

    Args:
        chunks: f32[p, m/p], this device's own block cut into p chunks.
        axis_name: the mesh axis the ring runs along.
        step: ``step(partial, chunks, s, axis_name)``, one step (``reduce_scatter_step``).
        n_steps: how many steps; after p − 1 device i holds the sum of chunk i.
        direction: 1 where device i sends to i + 1 (``reduce_scatter_step``'s ring), −1 where
            it sends to i − 1: device i starts with its chunk i − direction, so that after
            p − 1 steps it holds chunk i either way.

    Returns:
        f32[m/p], the partial sum this device holds after the steps.
    """
    if direction not in (1, -1):
        raise ValueError(f"direction must be 1 or -1, got {direction!r}")
    p = chunks.shape[0]
    i = jax.lax.axis_index(axis_name)
    partial = chunks[(i - direction) % p]  # f32[m/p], the chunk this device sends first
    for s in range(p - 1 if n_steps is None else n_steps):
        partial = step(partial, chunks, s, axis_name)  # f32[m/p]
    return partial


def ring_gather(mine, axis: str, p: int):
    """The all-gather of the ring inside ``shard_map`` over ``axis``: f32[m] ``mine`` (device
    i's slice i) in, f32[p, m] out, row j device j's slice, after p − 1 ``ppermute`` steps, each
    passing on the slice received in the step before."""
    i = jax.lax.axis_index(axis)
    gathered = jnp.zeros((p, *mine.shape), mine.dtype).at[i].set(mine)  # f32[p, m]
    current = mine  # f32[m], the slice this device passes on next
    for s in range(p - 1):
        current = jax.lax.ppermute(current, axis, ring_permutation(p))  # f32[m]
        gathered = gathered.at[(i - s - 1) % p].set(current)  # the slice of device i - s - 1
    return gathered


def ring_all_reduce(g, axis: str, p: int, *, encode: Callable | None = None,
                    decode: Callable | None = None, by_hand: bool = False):
    """The sum over devices of f32[n] ``g``, inside ``shard_map`` over ``axis``: the ring
    reduce-scatter (``ring_scatter_sum``, each device adding its own chunk in f32 on arrival),
    then an all-gather of the summed slices. With ``encode`` and ``decode`` every message is
    ``encode(values)`` on the wire, ``decode`` on arrival (``encoded_step``); without, f32.
    ``by_hand``: the all-gather too from ``ppermute`` (``ring_gather``; f32 only), so that the
    all-reduce is 2(p − 1) message steps of n/p values, each one ``collective-permute``.
    """
    if by_hand:
        mine = ring_scatter_sum(g.reshape(p, -1), axis)  # f32[n/p], summed
        return ring_gather(mine, axis, p).reshape(-1)  # f32[n], the same on every device
    if encode is None or decode is None:
        mine = ring_scatter_sum(g.reshape(p, -1), axis)  # f32[n/p], summed
        return jax.lax.all_gather(mine, axis, tiled=True, to="invarying")  # f32[n]
    mine = ring_scatter_sum(g.reshape(p, -1), axis, step=encoded_step(encode, decode))
    return decode(jax.lax.all_gather(encode(mine), axis, tiled=True, to="invarying"))


def ring_reduce_scatter(
    mesh: Mesh, *, step: Callable = reduce_scatter_step, n_steps: int | None = None,
    direction: int = 1,
) -> Kernel:
    """Reduce-scatter built from ``ppermute``: blocks ``(p, m)`` in, ``(p, m/p)`` out, row i the
    sum of chunk i over all devices, as ``block_collective(mesh, "reduce_scatter")``.

    Args:
        mesh: a one-axis mesh.
        step: the function of one step, ``step(partial, chunks, s, axis_name)`` (default
            ``reduce_scatter_step``).
        n_steps: stop after this many steps (default p − 1, the whole ring), to look at the
            partial sums on the way: after k steps row j holds chunk ``ring_chunk(j, k, p)``.
        direction: 1 for the ring i → i + 1, −1 for i → i − 1 (``ring_scatter_sum``); ``step``
            must send the same way.
    """
    axis, p = axis_of(mesh), mesh.size
    n_steps = p - 1 if n_steps is None else n_steps
    if not 0 <= n_steps <= p - 1:
        raise ValueError(f"n_steps must be from 0 to p - 1 = {p - 1}, got {n_steps}")
    if direction not in (1, -1):
        raise ValueError(f"direction must be 1 or -1, got {direction!r}")

    def kernel(block):
        # block: f32[1, m], this device's row
        chunks = block[0].reshape(p, -1)  # f32[p, m/p]
        return ring_scatter_sum(chunks, axis, step=step, n_steps=n_steps,
                                direction=direction)[None]  # f32[1, m/p]

    return make_kernel(mesh, kernel, (P(axis, None),), P(axis, None),
                   lambda blocks: check_blocks(blocks, p, "reduce_scatter"))


ring_reduce_scatter = cached_builder(ring_reduce_scatter)  # the same mesh, the same kernel


def ring_all_gather(mesh: Mesh) -> Kernel:
    """All-gather built from ``ppermute``: blocks ``(p, m)`` in, ``(p, p·m)`` out, every row all
    blocks in device order, as ``block_collective(mesh, "all_gather")``."""
    axis, p = axis_of(mesh), mesh.size

    def kernel(block):
        # block: f32[1, m], this device's row
        return ring_gather(block[0], axis, p).reshape(1, -1)  # f32[1, p*m]

    return make_kernel(mesh, kernel, (P(axis, None),), P(axis, None),
                   lambda blocks: check_blocks(blocks, p, "all_gather"))


ring_all_gather = cached_builder(ring_all_gather)  # the same mesh, the same kernel
