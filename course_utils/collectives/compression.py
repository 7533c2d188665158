"""Compressed communication, one device's side: what each scheme of notebook 15 sends and how the
receiver rebuilds the summed gradient. Every function runs inside ``shard_map`` over ``axis``.

- ``bf16_all_reduce``: 16-bit messages. XLA:CPU compiles a bf16 ``psum`` (and bf16 ``ppermute``,
  ``all_gather``) to an f32 collective, so the bf16 values travel bit-cast to ``uint16`` through a
  ring reduce-scatter built from ``ppermute`` (sums kept in f32 on arrival) and an ``all_gather``.
- ``int8_all_reduce``: values scaled per bucket of ``SCALE_BUCKET`` to int8, exchanged with
  ``all_to_all`` (each device receives its slice from everyone), summed, quantized again and
  all-gathered — each device's codes have scales of their own, so they cannot simply be summed
  by an int8 all-reduce (and int8 sums would overflow).
- ``topk_select`` and ``sparse_all_gather``: the k largest entries and their indices, gathered by
  all devices and added into a dense vector (Lin et al., 2018, *Deep Gradient Compression*).
- ``powersgd_round``: one step of power iteration on each weight matrix, two small all-reduces
  (Vogels et al., 2019, *PowerSGD*).

Error feedback (Seide et al., 2014; Karimireddy et al., 2019) is the caller's: compress
``g + residual``, keep what was not sent as the next residual.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from course_utils.collectives.ring import ring_all_reduce
from course_utils.constants import SCALE_BUCKET


def _to_u16(values):
    return jax.lax.bitcast_convert_type(values.astype(jnp.bfloat16), jnp.uint16)


def _from_u16(bits):
    return jax.lax.bitcast_convert_type(bits, jnp.bfloat16).astype(jnp.float32)


def bf16_all_reduce(g, axis: str, p: int):
    """``ring.ring_all_reduce`` with every message rounded to bf16 and sent as u16 (partial sums
    are rounded to bf16 before they are passed on). Ring payload 2(p − 1)/p · 2n bytes: half of
    an f32 all-reduce's."""
    return ring_all_reduce(g, axis, p, encode=_to_u16, decode=_from_u16)


def quantize_int8(values):
    """Per bucket of ``SCALE_BUCKET`` values: int8 codes and one f32 scale (max |value| / 127).

    Returns ``(codes s8[…, b, SCALE_BUCKET], scales f32[…, b, 1])`` for values
    ``f32[…, b·SCALE_BUCKET]``.
    """
    buckets = values.reshape(*values.shape[:-1], -1, SCALE_BUCKET)
    scales = jnp.max(jnp.abs(buckets), axis=-1, keepdims=True) / 127
    safe = jnp.where(scales > 0, scales, 1.0)
    return jnp.round(buckets / safe).astype(jnp.int8), scales


def dequantize_int8(codes, scales):
    """The f32 values that ``quantize_int8`` encoded, flattened back to ``f32[…, n]``."""
    values = codes.astype(jnp.float32) * scales
    return values.reshape(*values.shape[:-2], -1)


def int8_all_reduce(g, axis: str, p: int):
    """The sum over devices of f32[n] ``g``, sent as int8 with a scale per bucket.

    ``all_to_all`` hands device i chunk i of every device's codes (n/p int8 and n/p/64 scales
    each), device i sums them in f32, quantizes its summed slice again and ``all_gather`` returns
    every slice to every device. Payload about 2(p − 1)/p · n · (1 + 4/64) bytes.
    """
    codes, scales = quantize_int8(g.reshape(p, -1))  # s8[p, b, 64], f32[p, b, 1]
    codes = jax.lax.all_to_all(codes, axis, 0, 0, tiled=True)  # chunk i of every device
    scales = jax.lax.all_to_all(scales, axis, 0, 0, tiled=True)
    mine = jnp.sum(dequantize_int8(codes, scales), axis=0)  # f32[n/p], the summed slice
    codes, scales = quantize_int8(mine)
    codes = jax.lax.all_gather(codes, axis, tiled=True, to="invarying")  # s8[n/64, 64]
    scales = jax.lax.all_gather(scales, axis, tiled=True, to="invarying")
    return dequantize_int8(codes, scales)  # f32[n]


def topk_select(values, k: int):
    """The ``k`` entries of largest magnitude: ``(sent, kept_values, indices)`` where ``sent`` is
    ``values`` with every other entry set to zero (dense, f32[n])."""
    _, indices = jax.lax.top_k(jnp.abs(values), k)
    kept = values[indices]
    return jnp.zeros_like(values).at[indices].set(kept), kept, indices


def sparse_all_gather(kept, indices, n: int, axis: str):
    """Every device's ``(kept, indices)`` gathered and added into one dense f32[n] sum. Indices
    travel as u16 when n ≤ 65536 (6 bytes per entry instead of 8)."""
    index_type = jnp.uint16 if n <= 2**16 else jnp.int32
    all_kept = jax.lax.all_gather(kept, axis, tiled=True, to="invarying")  # f32[p·k]
    all_indices = jax.lax.all_gather(indices.astype(index_type), axis, tiled=True,
                                     to="invarying")
    return jnp.zeros(n, jnp.float32).at[all_indices.astype(jnp.int32)].add(all_kept)


def powersgd_round(m, q, axis: str):
    """One PowerSGD round on this device's matrix ``m`` (rows × cols) with the shared warm start
    ``q`` (cols × r): two all-reduces, of rows × r and cols × r values.

    Returns ``(approx, q_next)``: ``approx`` (rows × cols, the same on every device) approximates
    the sum over devices of ``m`` with rank r; ``q_next`` is the next round's warm start.
    """
    left = jax.lax.psum(m @ q, axis)  # f32[rows, r]
    left, _ = jnp.linalg.qr(left)  # orthonormal columns
    right = jax.lax.psum(m.T @ left, axis)  # f32[cols, r]
    return left @ right.T, right
