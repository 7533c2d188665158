"""Streaming DiLoCo (Douillard et al. 2025, arXiv:2501.18512): DiLoCo's loop (``diloco``) with
its outer step cut into fragments, overlapped with the inner steps and sent in fewer bits.

==================  ==================================================  ==========================
strategy            communication                                       the state per device
==================  ==================================================  ==========================
diloco_int8,        DiLoCo's, the outer gradient sent as int8 or int4   DiLoCo's
diloco_4bit         codes with a scale per 64 values, summed in f32     (and the count of syncs)
streaming_diloco    every H/F steps one fragment's outer gradient       DiLoCo's, a slice of the
                    (1/F of the parameters, strided), sent in int4;     fragment on its way
                    it merges τ steps later (α = 0.5)
==================  ==================================================  ==========================

The outer step (``outer_step``, ``Sync.outer``) runs every H/F inner steps (``train``); its
fragment is the next in turn, counted in the state (``streaming.sent_after`` says the same).
One device's view: its slice of the fragment's outer gradient Δ_f = (w_f at the fragment's last
sync) − (its replica's w_f), summed across the replicas by ``quantize.quantized_all_reduce``
(the exchange that crosses hosts; after the reduction inside the host: the replica's devices
hold the same w, so each sends its 1/D of the fragment), averaged, the outer optimizer's update
of that slice (its state is elementwise: SGD with Nesterov momentum, one trace per value), the
result kept as the fragment on its way. It merges (``merge_step``, ``Sync.merge``) after the
inner step τ later, exactly — so the loss never depends on how long the exchange took: the
slices all-gathered inside the replica, the replica's fragment mixed as α · local + (1 − α) ·
arrived (``streaming.mix``), and the fragment's w at the last sync replaced. With τ = 0 the
outer step merges at once. F = 1, τ = 0, α = 0 and float32 is DiLoCo's outer step.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.models.cost_model import Topology, link_bytes_sent, message_steps
from course_utils.models.link_traffic import Traffic, TrafficSettings
from course_utils.training.diloco import outer_parts
from course_utils.training.hsdp import DEVICE, HOST
from course_utils.training.optimizers import Optimizer
from course_utils.training.quantize import BITS, BLOCK, quantized_all_reduce
from course_utils.training.state import Context, TrainState
from course_utils.training.streaming import mix, put_fragment, take_fragment


class StreamingOuter(NamedTuple):
    """``TrainState.outer`` of these strategies (DiLoCo's two parts first).

    Attributes:
        synced: this device's slice of w at each fragment's last sync, f32[n/D].
        state: the outer optimizer's state, in slices likewise.
        count: the syncs so far (int32, replicated): the last one sent fragment count mod F.
        pending: with an overlap, this device's slice of the fragment on its way, f32[n/(D·F)]
            (``None`` if τ = 0: the outer step merges at once).
    """

    synced: jax.Array
    state: Any
    count: jax.Array
    pending: jax.Array | None = None


def streaming_parts(outer: Optimizer, fragments: int, overlap: int
                    ) -> Callable[[np.ndarray, Mesh, Context], dict]:
    """``Parts.extra``: DiLoCo's outer state (``diloco.outer_parts``), the count of syncs (0,
    replicated) and, with an ``overlap``, the fragment on its way (zeros, in slices)."""
    base = outer_parts(outer)

    def extra(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
        synced, outer_state = base(w0, mesh, ctx)["outer"]
        count = jax.device_put(np.int32(0), NamedSharding(mesh, P()))
        pending = None if overlap == 0 else jax.device_put(
            np.zeros(w0.size // fragments, np.float32), NamedSharding(mesh, P(DEVICE)))
        return {"outer": StreamingOuter(synced, outer_state, count, pending)}

    return extra


def _fragment_of(tree, fragment, fragments: int):
    return jax.tree.map(lambda a: a if a.ndim == 0 else take_fragment(a, fragment, fragments),
                        tree)


def _with_fragment(tree, part, fragment, fragments: int):
    return jax.tree.map(lambda a, b: a if a.ndim == 0 else put_fragment(a, fragment, fragments, b),
                        tree, part)


def _merged(state: TrainState, fragment, arrived, *, fragments: int,
            mixing: float) -> TrainState:
    """``state`` with ``fragment``'s result ``arrived`` (this device's slice) merged: gathered
    inside the replica, mixed into the replica's w, and made the fragment's w at its sync."""
    whole = jax.lax.all_gather(arrived, DEVICE, tiled=True)  # f32[n/F], inside the replica
    local = take_fragment(state.params, fragment, fragments)
    params = put_fragment(state.params, fragment, fragments, mix(local, whole, mixing))
    synced = put_fragment(state.outer.synced, fragment, fragments, arrived)
    return state._replace(params=params, outer=state.outer._replace(synced=synced))


def merge_step(*, fragments: int, mixing: float) -> Callable[[TrainState, Context], TrainState]:
    """The fragment on its way merging (``Sync.merge``), one device's view."""

    def step(state: TrainState, ctx: Context) -> TrainState:
        fragment = state.outer.count % fragments  # the last one sent
        return _merged(state, fragment, state.outer.pending, fragments=fragments, mixing=mixing)

    return step


def outer_step(outer: Optimizer, *, fragments: int, dtype: str, overlap: int,
               mixing: float) -> Callable[[TrainState, Context], TrainState]:
    """The outer step of the next fragment (``Sync.outer``), one device's view: its slice of the
    fragment's outer gradient exchanged across hosts in ``dtype``, ``outer``'s update, the
    result kept on its way (merged at once if ``overlap`` is 0)."""

    def step(state: TrainState, ctx: Context) -> TrainState:
        synced, outer_state, count, _ = state.outer  # synced: this device's slice, f32[n/D]
        count = count + 1
        fragment = count % fragments  # this sync's fragment
        size = synced.shape[0]
        mine = jax.lax.dynamic_slice_in_dim(state.params, jax.lax.axis_index(DEVICE) * size, size)
        anchor = take_fragment(synced, fragment, fragments)  # f32[n/(D·F)]
        delta = quantized_all_reduce(anchor - take_fragment(mine, fragment, fragments), HOST,
                                     ctx.p, dtype=dtype) / ctx.p  # crosses hosts
        arrived, part = outer.update(delta, _fragment_of(outer_state, fragment, fragments),
                                     anchor)
        outer_state = _with_fragment(outer_state, part, fragment, fragments)
        if overlap == 0:
            state = state._replace(outer=StreamingOuter(synced, outer_state, count))
            return _merged(state, fragment, arrived, fragments=fragments, mixing=mixing)
        return state._replace(outer=StreamingOuter(synced, outer_state, count, arrived))

    return step


def quantized_traffic(dtype: str, fragments: int = 1
                      ) -> Callable[[int, Topology, TrafficSettings], Traffic]:
    """The outer gradient's two-level exchange in ``dtype`` (codes and a scale per ``BLOCK``
    values), of n/F values every H/F steps: per inner step a 1/H share of the whole vector's
    bytes, whatever F, and F/H of its messages."""
    per_value = BITS[dtype] / 8 + (0 if dtype == "float32" else 4 / BLOCK)

    def traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
        h = settings.local_steps
        return Traffic(link_bytes_sent("all_reduce", "two_level", per_value * n, topology) / h,
                       message_steps("all_reduce", "two_level", topology) * fragments / h)

    return traffic
