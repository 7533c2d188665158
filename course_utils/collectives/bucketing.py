"""Bucketing: many small gradients all-reduced as a few flat buckets.

``bucketed_all_reduce(mesh, bucket_bytes)`` packs consecutive gradients into flat buffers of about
``bucket_bytes`` (``latency.plan_buckets``) and issues one ``psum`` per bucket: fewer, larger
messages, so the per-message cost α is paid fewer times.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.collectives.kernels import Kernel, cached_builder, make_kernel
from course_utils.devices.setup import axis_of
from course_utils.models.latency import plan_buckets


def bucketed_all_reduce(mesh: Mesh, bucket_bytes: int) -> Kernel:
    """All-reduce a list of gradients, one ``psum`` per bucket of about ``bucket_bytes``.

    Args:
        mesh: a one-axis mesh.
        bucket_bytes: a bucket is closed once it holds this many bytes (per device) or more.

    Returns:
        A kernel of one list of ``(p, m_i)`` block arrays (row i on device i, as
        ``block_collective``) returning the list of their ``psum``s, each ``(p, m_i)`` with every
        row the sum of all rows.
    """
    axis, p = axis_of(mesh), mesh.size
    if not isinstance(bucket_bytes, int) or isinstance(bucket_bytes, bool) or bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be a positive integer, got {bucket_bytes!r}")

    def check(blocks) -> None:
        if not isinstance(blocks, (list, tuple)) or not blocks:
            raise ValueError("expected a non-empty list of (p, m_i) block arrays")
        for i, b in enumerate(blocks):
            if len(np.shape(b)) != 2 or np.shape(b)[0] != p:
                raise ValueError(
                    f"block array {i} has shape {np.shape(b)}; expected ({p}, m), "
                    "one row per device"
                )

    def kernel(blocks):
        # blocks: a list of f32[1, m_i], this device's row of each gradient
        sizes = [b.size * b.dtype.itemsize for b in blocks]
        summed = [None] * len(blocks)
        for bucket in plan_buckets(sizes, bucket_bytes):
            flat = jnp.concatenate([blocks[i][0] for i in bucket])  # f32[Σ m_i], one buffer
            flat = jax.lax.psum(flat, axis)  # one all-reduce per bucket
            ends = np.cumsum([blocks[i].shape[1] for i in bucket])[:-1]
            for i, piece in zip(bucket, jnp.split(flat, ends)):
                summed[i] = piece[None]  # f32[1, m_i]
        return summed

    return make_kernel(mesh, kernel, (P(axis, None),), P(axis, None), check)


bucketed_all_reduce = cached_builder(bucketed_all_reduce)  # the same mesh, the same kernel
