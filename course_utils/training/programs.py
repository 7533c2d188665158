"""``build_programs``: a strategy's compiled programs on a mesh, what ``train`` runs and
``course cluster --measure training`` times: its inner step, the micro-step of gradient
accumulation, its outer step and the merge of an overlapped sync (``Sync.merge``), with the
collectives of each read off the compiled programs (``observe.ir``): the ring payload one
device sends per step, and on a mesh of hosts the bytes that cross them. Each is compiled with
JAX's check of what varies on (``check_vma``): a shared value whose gradient is a device's own
enters as ``state.own_copy`` (``pcast(..., to="varying")``), a sum gathered from slices is
declared the same on every device (``all_gather(..., to="invarying")``).

The state is placed by ``initial_state``; the rows split over the mesh as ``axes`` says.
"""

from __future__ import annotations

from functools import partial
from typing import Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.devices.setup import axis_of
from course_utils.observe.ir import Collective, hlo_collectives, ring_payload
from course_utils.training.state import (
    Context,
    TrainState,
    accumulate_gradient,
    place,
    state_specs,
)
from course_utils.training.strategies import StrategySpec


class Programs(NamedTuple):
    """A strategy's compiled programs on a mesh, and the bytes they send.

    Attributes:
        step: ``step(state, x, y) -> (state, StepInfo)``, each part of the info stacked by device.
        micro: a micro-step of accumulation, ``micro(state, x, y) -> (state, loss by device)``;
            ``None`` without accumulation.
        outer: ``outer(state) -> state``, run every ``every`` inner steps; ``None`` if the
            strategy syncs inside its step.
        merge: ``merge(state) -> state``, the last outer step's result merged ``Sync.overlap``
            steps after it; ``None`` if the outer step merges at once.
        every: inner steps per outer step (H/F).
        collectives: the step's collectives.
        payload: ring payload one device sends in one step and its micro-steps.
        outer_payload: ring payload one device sends in one outer step (0 without one).
        bytes_across_replicas: bytes one device sends across the hosts per inner step, its
            share of the outer step's included; ``None`` on a one-axis mesh.
        bytes_per_sync_across_replicas: those of one outer step; ``None`` without one.
    """

    step: Callable
    micro: Callable | None
    outer: Callable | None
    merge: Callable | None
    every: int
    collectives: tuple[Collective, ...]
    payload: float
    outer_payload: float
    bytes_across_replicas: float | None
    bytes_per_sync_across_replicas: float | None

    def bytes_per_step(self, steps: int) -> float:
        """Ring payload per device per inner step over a run of ``steps`` steps, the outer
        steps that run in it spread over them."""
        if self.outer is None:
            return self.payload
        return self.payload + self.outer_payload * (steps // self.every) / steps


def axes(spec: StrategySpec, mesh: Mesh) -> tuple[str, str | tuple[str, ...]]:
    """The axis the state's forms run along (``Context.axis``) and the one (or ones) the rows
    split over: a one-axis mesh's axis for both, else ``Parts.axis`` and every axis."""
    if spec.mesh_axes is None:
        axis = axis_of(mesh)
        return axis, axis
    return spec.parts.axis, tuple(mesh.axis_names)


def initial_state(spec: StrategySpec, mesh: Mesh, ctx: Context, w0: np.ndarray, *,
                  accumulate: int = 1) -> TrainState:
    """``spec``'s state placed on ``mesh`` from the flat parameters ``w0``, with the sum of
    the micro-steps' gradients (zeros, every device its own) if it ``accumulate``s."""
    state = spec.init(w0, mesh, ctx)
    if accumulate > 1:
        state = state._replace(accumulated=place(mesh, ctx, np.zeros(ctx.n, np.float32), "own"))
    return state


def build_programs(spec: StrategySpec, mesh: Mesh, ctx: Context, state: TrainState,
                   batch: tuple[jax.Array, jax.Array], *, accumulate: int = 1,
                   local_steps: int = 1) -> Programs:
    """``spec``'s programs on ``mesh``, compiled for ``state`` and one (micro-)step's rows
    ``batch`` (placed as ``axes`` says), with ``accumulate`` micro-steps per step and, for a
    strategy that syncs every H steps, H = ``local_steps``.

    Examples:
        >>> from course_utils.devices.setup import data_mesh
        >>> from course_utils.problems.classification import (classification_task,
        ...                                                   init_params, padded_size)
        >>> from course_utils.training.batches import placed_rows
        >>> from course_utils.training.strategies import spec
        >>> mesh, entry = data_mesh(), spec("local_sgd")
        >>> n, (x, y) = padded_size(mesh.size), classification_task()
        >>> ctx = Context("data", mesh.size, n, len(y), k=1)
        >>> state = initial_state(entry, mesh, ctx, init_params(n))
        >>> programs = build_programs(entry, mesh, ctx, state, placed_rows(mesh, "data", x, y),
        ...                           local_steps=4)
        >>> programs.outer is not None, programs.micro is None, programs.every
        (True, True, 4)
    """
    rows_axis = axes(spec, mesh)[1]
    specs, rows = state_specs(state), (P(rows_axis, None), P(rows_axis))

    def compiled(body):
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(specs, *rows),
                                     out_specs=(specs, rows[1]), check_vma=True)
                       ).lower(state, *batch).compile()

    def body(state, x, y):
        new_state, info = spec.step(state, x, y, ctx)
        return new_state, info._replace(loss=info.loss[None])  # every part stacked by device

    def micro_body(state, x, y):
        new_state, loss = accumulate_gradient(state, x, y, ctx)
        return new_state, loss[None]

    step = compiled(body)
    collectives = hlo_collectives(step.as_text())
    payload, across = ring_payload(collectives, mesh.size), _across(collectives, mesh)
    micro = None
    if accumulate > 1:
        micro = compiled(micro_body)
        payload += ring_payload(hlo_collectives(micro.as_text()), mesh.size) * (accumulate - 1)
    sync, outer, merge, outer_payload, per_sync = spec.sync, None, None, 0.0, None
    every = local_steps // sync.fragments  # an outer step every H/F inner steps
    if sync.outer is not None:  # the outer step (one fragment's, if F > 1)
        outer, merge = (None if f is None else jax.jit(jax.shard_map(
            partial(f, ctx=ctx), mesh=mesh, in_specs=(specs,), out_specs=specs,
            check_vma=True)).lower(state).compile() for f in (sync.outer, sync.merge))
        outer_collectives = hlo_collectives(outer.as_text())
        outer_payload = ring_payload(outer_collectives, mesh.size)
        if across is not None:  # the outer program's share of an inner step
            per_sync = _across(outer_collectives, mesh)
            across += per_sync / every
    return Programs(step, micro, outer, merge, every, tuple(collectives), payload, outer_payload,
                    across, per_sync)


def _across(collectives, mesh: Mesh) -> float | None:
    """Bytes one device sends in the collectives whose groups hold devices of more than one
    host (ring payload); ``None`` on a one-axis mesh. Group members are positions in the
    mesh's order, host-major: position i is on host i // (devices per host)."""
    if len(mesh.axis_names) == 1:
        return None
    per_host = mesh.size // mesh.shape[mesh.axis_names[0]]
    crossing = [c for c in collectives
                if any(len({i // per_host for i in group}) > 1
                       for group in c.replica_groups or [range(mesh.size)])]
    return ring_payload(crossing, mesh.size)
