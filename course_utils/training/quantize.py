"""Quantized outer gradients (Streaming DiLoCo's third piece): what crosses the slow link in
8 or 4 bits, summed in float32.

Formats (``Sync.dtype``): ``"float32"`` (sent whole), ``"int8"`` and ``"int4"``. Both integer
formats are symmetric with one f32 scale per block of ``BLOCK`` values: scale = max |x| of the
block / L, code = round(x / scale) in [−L, L], with L = 127 (int8) or 7 (int4). Each value comes
back within half a step, |x − x̂| ≤ max |x of its block| / (2L) (``error_bound``): 1/254 and 1/14
of the block's largest value.

Why int4 and not the paper's E3M0 (Douillard et al. 2025, arXiv:2501.18512, send 4-bit floats
with a sign, 3 exponent bits and no mantissa): int4 is step 15's int8 with fewer levels — the
same scale per block, the same rounding, a bound that holds for every value — where E3M0 rounds
each value to a power of two (a relative error up to 1/3, more levels near zero). The paper
reports no loss of quality at 4 bits; which 4-bit format trains better here is not measured.

Packing: gloo and XLA:CPU's collectives move whole bytes, so two int4 codes share one uint8.
A code c in [−7, 7] is stored offset by 8 as the nibble c + 8 in [1, 15]; the value of even
index 2i goes in the low nibble and the next one (2i + 1) in the high nibble:
``byte = (c[2i] + 8) | (c[2i+1] + 8) << 4``. A block of 64 values is 32 bytes and one scale.

``quantized_all_reduce`` sums a vector over a mesh axis sending only codes and scales:
``all_to_all`` hands rank r chunk r of every rank's codes (a reduce-scatter in q bits), rank r
dequantizes and sums them in f32, quantizes its summed chunk again, and ``all_gather`` returns
every chunk to every rank (in q bits). Its ring payload per device is
2(R − 1)/R · (q/8 · m + 4 · m/BLOCK) bytes for m values (``exchange_bytes``): with BLOCK = 64,
int8 is (1 + 1/16)/4 ≈ 0.266 and int4 (1/2 + 1/16)/4 ≈ 0.141 of the f32 all-reduce's
2(R − 1)/R · 4m — 1/4 and 1/8 plus the scales.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from course_utils.constants import SCALE_BUCKET
from course_utils.models.cost_model import Topology, bytes_sent

BLOCK = SCALE_BUCKET  # values per f32 scale, step 15's bucket
LEVELS = {"int8": 127, "int4": 7}  # codes in [−L, L]
FORMATS = ("float32", *LEVELS)
BITS = {"float32": 32, "int8": 8, "int4": 4}


class Quantized(NamedTuple):
    """Codes and scales of values ``f32[…, m]`` (m a multiple of the block b).

    Attributes:
        codes: ``s8[…, m/b, b]`` (int8), or ``u8[…, m/b, b/2]`` (int4: two codes a byte).
        scales: ``f32[…, m/b, 1]``, one per block.
    """

    codes: jax.Array
    scales: jax.Array


def check_format(dtype: str) -> str:
    """``dtype`` if it is one of ``FORMATS``, else a one-line ``ValueError``."""
    if dtype not in FORMATS:
        raise ValueError(f"a sync sends one of {', '.join(FORMATS)}, got {dtype!r}")
    return dtype


def _levels(dtype: str) -> int:
    if dtype not in LEVELS:
        raise ValueError(f"quantized formats are {', '.join(LEVELS)}, got {dtype!r}")
    return LEVELS[dtype]


def quantize(values, dtype: str, *, block: int = BLOCK) -> Quantized:
    """``values`` f32[…, m] as codes and one scale per ``block`` (``dtype``: int8 or int4).

    Examples:
        >>> q = quantize(jnp.array([0.6, -1.0, 0.3, 0.0]), "int4", block=4)
        >>> q.codes.tolist()  # codes 4, −7, 2, 0 offset by 8: bytes 12 | 1 << 4, 10 | 8 << 4
        [[28, 138]]
    """
    levels = _levels(dtype)
    blocks = values.reshape(*values.shape[:-1], -1, block)
    scales = jnp.max(jnp.abs(blocks), axis=-1, keepdims=True) / levels
    safe = jnp.where(scales > 0, scales, 1.0)
    codes = jnp.clip(jnp.round(blocks / safe), -levels, levels)
    if dtype == "int8":
        return Quantized(codes.astype(jnp.int8), scales)
    nibbles = (codes + 8).astype(jnp.uint8)  # in [1, 15]
    return Quantized(nibbles[..., 0::2] | (nibbles[..., 1::2] << 4), scales)


def dequantize(q: Quantized, dtype: str) -> jax.Array:
    """The f32 values ``quantize`` encoded, flattened back to ``f32[…, m]``."""
    if dtype == "int8":
        codes = q.codes.astype(jnp.float32)
    else:
        low = (q.codes & 15).astype(jnp.float32) - 8
        high = (q.codes >> 4).astype(jnp.float32) - 8
        codes = jnp.stack([low, high], axis=-1).reshape(*q.codes.shape[:-1], -1)
    values = codes * q.scales
    return values.reshape(*values.shape[:-2], -1)


def error_bound(values: np.ndarray, dtype: str, *, block: int = BLOCK) -> np.ndarray:
    """Per value, the most a round trip may change it: max |x| of its block / (2L).

    Examples:
        >>> error_bound(np.array([1.0, -2.0, 0.5, 0.0]), "int4", block=2).round(4).tolist()
        [0.1429, 0.1429, 0.0357, 0.0357]
    """
    blocks = np.abs(np.asarray(values, np.float64)).reshape(-1, block)
    bound = blocks.max(axis=1, keepdims=True) / (2 * _levels(dtype))
    return np.broadcast_to(bound, blocks.shape).reshape(np.shape(values))


def _chunk(m: int, ranks: int, block: int) -> int:
    """Values of one rank's chunk: m split in ``ranks``, rounded up to whole blocks."""
    return -(-m // (ranks * block)) * block


def quantized_all_reduce(x, axis: str, ranks: int, *, dtype: str, block: int = BLOCK):
    """The sum over ``axis`` (``ranks`` members) of ``x`` f32[m], one rank's view inside
    ``shard_map``; ``dtype`` ``"float32"`` is a plain ``psum``, else int8 or int4 codes with a
    scale per ``block`` are exchanged and summed in f32 (padded with zeros to whole blocks of
    ``ranks`` chunks). Every rank returns the same values."""
    if check_format(dtype) == "float32":
        return jax.lax.psum(x, axis)
    m = x.shape[-1]
    chunk = _chunk(m, ranks, block)
    padded = jnp.pad(x, (0, ranks * chunk - m)).reshape(ranks, chunk)  # f32[R, chunk]
    q = quantize(padded, dtype, block=block)
    # chunk r of every rank, to rank r: a reduce-scatter in q bits
    q = Quantized(*(jax.lax.all_to_all(a, axis, 0, 0, tiled=True) for a in q))
    mine = jnp.sum(dequantize(q, dtype), axis=0)  # f32[chunk]: my chunk, summed
    q = quantize(mine, dtype, block=block)
    # every chunk, the same on every rank
    q = Quantized(*(jax.lax.all_gather(a, axis, tiled=True, to="invarying") for a in q))
    return dequantize(q, dtype)[:m]


def exchange_bytes(m: int, ranks: int, dtype: str, *, block: int = BLOCK) -> float:
    """Bytes one rank sends for ``quantized_all_reduce`` of m values over ``ranks`` (a ring
    model: an all-reduce of 4m bytes for f32; else an all-to-all and an all-gather, each
    (R − 1)/R of the codes and scales of the padded vector).

    Examples:
        >>> [exchange_bytes(1024, 2, d) for d in FORMATS]  # f32, int8, int4
        [4096.0, 1088.0, 576.0]
    """
    if check_format(dtype) == "float32":
        return bytes_sent("all_reduce", "ring", 4 * m, Topology(1, ranks))
    padded = ranks * _chunk(m, ranks, block)
    sent = padded * BITS[dtype] / 8 + 4 * padded / block  # codes and scales
    return 2 * bytes_sent("all_gather", "ring", sent, Topology(1, ranks))
