"""Who holds what: shard shapes and a readable placement report.

Both read ``array.addressable_shards``: in a multi-process run that is only this process's
devices, which is what one process can inspect.
"""

from __future__ import annotations

import jax


def _shards(array: jax.Array) -> list:
    if not hasattr(array, "addressable_shards"):
        raise TypeError(
            f"expected a jax.Array placed on devices, got {type(array).__name__}; "
            "use jax.device_put first"
        )
    return sorted(array.addressable_shards, key=lambda s: s.device.id)


def shard_shapes(array: jax.Array) -> list[tuple[int, ...]]:
    """The shape of the block each addressable device holds, in device-id order.

    Args:
        array: a placed ``jax.Array``.

    Returns:
        One shape tuple per addressable device.
    """
    return [tuple(s.data.shape) for s in _shards(array)]


def values_per_device(array: jax.Array) -> int:
    """How many values the first addressable device stores (all devices store as many here)."""
    return int(_shards(array)[0].data.size)


def _span(index: slice, size: int) -> str:
    start, stop, _ = index.indices(size)
    return f"{start}:{stop}"


def placement_report(array: jax.Array) -> str:
    """A table, one line per addressable device: device → index range → local shape.

    Args:
        array: a placed ``jax.Array``.

    Returns:
        Text such as ``cpu:0  [0:4, 0:8]  (4, 8)`` per line, ranges half-open.
    """
    lines = [f"global shape {tuple(array.shape)}, {array.dtype}"]
    for shard in _shards(array):
        spans = ", ".join(_span(ix, n) for ix, n in zip(shard.index, array.shape))
        lines.append(
            f"  {shard.device.platform}:{shard.device.id}  [{spans}]  {tuple(shard.data.shape)}"
        )
    return "\n".join(lines)
