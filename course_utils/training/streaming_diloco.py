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

The outer step (``diloco.OuterStep``, ``Sync.outer``: DiLoCo's, with F, the format, τ and α)
runs every H/F inner steps (``train``); its fragment is the next in turn, counted in the state
(``streaming.sent_after`` says the same).
One device's view: its slice of the fragment's outer gradient Δ_f = (w_f at the fragment's last
sync) − (its replica's w_f), summed across the replicas by ``quantize.quantized_all_reduce``
(the exchange that crosses hosts; after the reduction inside the host: the replica's devices
hold the same w, so each sends its 1/D of the fragment), averaged, the outer optimizer's update
of that slice (its state is elementwise: SGD with Nesterov momentum, one trace per value), the
result kept as the fragment on its way. It merges (``diloco.Merge``, ``Sync.merge``) after the
inner step τ later, exactly — so the loss never depends on how long the exchange took: the
slices all-gathered inside the replica, the replica's fragment mixed as α · local + (1 − α) ·
arrived (``streaming.mix``), and the fragment's w at the last sync replaced. With τ = 0 the
outer step merges at once. F = 1, τ = 0, α = 0 and float32 is DiLoCo's outer step: one body.
The bytes and messages of one sync: ``diloco.sync_traffic``.
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.training.diloco import outer_parts
from course_utils.training.hsdp import DEVICE
from course_utils.training.optimizers import Optimizer
from course_utils.training.state import Context


def streaming_parts(outer: Optimizer, fragments: int, overlap: int
                    ) -> Callable[[np.ndarray, Mesh, Context], dict]:
    """``Parts.extra``: DiLoCo's outer state (``diloco.outer_parts``), the count of syncs (0,
    replicated) and, with an ``overlap``, the fragment on its way (zeros, in slices)."""
    base = outer_parts(outer)

    def extra(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
        outer_state = base(w0, mesh, ctx)["outer"]
        count = jax.device_put(np.int32(0), NamedSharding(mesh, P()))
        pending = None if overlap == 0 else jax.device_put(
            np.zeros(w0.size // fragments, np.float32), NamedSharding(mesh, P(DEVICE)))
        return {"outer": outer_state._replace(count=count, pending=pending)}

    return extra
