"""DiLoCo (Douillard et al. 2023, arXiv:2311.08105) and its two baselines, on a mesh
``("host", "device")`` (``replica_mesh``): a replica is the devices of one ``host`` row; inside
a replica, plain data parallelism every step (the gradient summed over ``device``); across the
replicas, what each strategy sends.

==================  ==================================================  ==========================
strategy            communication                                       the state per device
==================  ==================================================  ==========================
dp_adamw            every step, the gradient's two-level all-reduce:    w, AdamW's moments whole
                    reduce-scatter inside the replica, all-reduce of
                    1/D across the replicas, all-gather inside
local_sgd_adamw     every step, the gradient all-reduced inside the     w, AdamW's moments whole
                    replica; every H steps the outer gradient's         (the replica's own); a
                    two-level all-reduce and the outer step "average"   slice of w at the last sync
diloco              the same; the outer step SGD with Nesterov          the same, and a slice of
                    momentum (lr 0.7, momentum 0.9, the paper's)        the outer momentum
==================  ==================================================  ==========================

Every H inner steps (``train``'s ``local_steps``) the outer step (``outer_step``) forms the outer
gradient Δ = (the parameters at the last sync) − (the replica's own), averages it across the
replicas — each device of a replica sends only its 1/D slice across hosts, then an all-gather
inside the replica puts the slices together — and applies the outer optimizer to the
parameters at the last sync; every replica restarts from the result. The outer state (the
parameters at the last sync, the outer optimizer's state) is kept in ``TrainState.outer``,
in slices over ``device`` (each device holds the slice its outer step updates).

The hyperparameters of part five's comparisons were fixed before measuring, by a protocol
(``results.diloco.PROTOCOL``, also in the saved sweep): the inner optimizer is AdamW for every
strategy; its learning rate (``optimizers.ADAMW_LR``) is the one of a small grid whose
data-parallel runs (``dp_adamw``, i.i.d. shards, the sweep's seeds) reach the lowest seed-mean
held-out loss over the run, the largest of the rates whose seeds' ranges overlap the winner's
(``results.diloco.pick_lr``); the outer step is the paper's (learning rate 0.7, Nesterov
momentum 0.9; local SGD's is the average), transplanted from its setting, not validated here;
H is 8, 32 and 128. No value was tuned to make one method win.
"""

from __future__ import annotations

from typing import Callable

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.models.cost_model import Topology, link_bytes_sent, message_steps
from course_utils.models.link_traffic import F32, Traffic, TrafficSettings
from course_utils.problems.classification import loss_sum
from course_utils.training.hsdp import DEVICE, HOST
from course_utils.training.optimizers import Optimizer
from course_utils.training.state import Context, Step, StepInfo, TrainState, own_copy
from course_utils.validate import positive_int


def replica_mesh(replicas: int | None = None) -> Mesh:
    """A mesh ``("host", "device")`` over all devices: ``replicas`` rows (the replicas, one per
    "host") of consecutive devices in ``jax.devices()`` order.

    Args:
        replicas: how many replicas; it divides the device count. ``None``: 2 when the device
            count is even (two replicas of half the devices each: at 2 devices, a device each),
            else one replica per device (at 1 and 3 devices a replica is one device).

    Examples:
        >>> mesh = replica_mesh()  # at 4 devices 2 replicas of 2, at 3 devices 3 of 1
        >>> mesh.axis_names, mesh.shape["host"] * mesh.shape["device"] == jax.device_count()
        (('host', 'device'), True)
        >>> replica_mesh(jax.device_count() + 1)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: replicas=... does not divide the ... devices; pick a divisor of ...
    """
    devices = np.asarray(jax.devices())
    count = devices.size
    if replicas is None:
        replicas = 2 if count % 2 == 0 else count
    positive_int("replicas", replicas)
    if count % replicas:
        raise ValueError(f"replicas={replicas} does not divide the {count} devices; "
                         f"pick a divisor of {count}")
    return Mesh(devices.reshape(replicas, count // replicas), (HOST, DEVICE))


def replica_step(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """One inner step of a replica: data parallelism inside it, nothing sent across replicas
    (``ctx.axis`` is ``"host"``, ``ctx.p`` the replicas; w f32[n] the replica's own)."""
    loss, g = jax.value_and_grad(loss_sum)(own_copy(state.params, DEVICE), x, y, ctx.mlp)
    g = jax.lax.psum(g / (ctx.rows // ctx.p), DEVICE)  # the mean over the replica's rows
    w, opt = ctx.optimizer.update(g, state.momentum, state.params)
    return state._replace(params=w, momentum=opt), StepInfo(loss / ctx.rows, g, None)


def dp_adamw(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """Data parallelism on the two-axis mesh: the gradient's two-level all-reduce every step,
    then the inner optimizer (AdamW) on the whole vector, the same on every device."""
    loss, g = jax.value_and_grad(loss_sum)(own_copy(state.params, (HOST, DEVICE)), x, y,
                                           ctx.mlp)
    g = jax.lax.psum_scatter(g / ctx.rows, DEVICE, tiled=True)  # my slice of my replica's sum
    g = jax.lax.psum(g, HOST)  # my slice of the sum over every replica: crosses hosts
    g = jax.lax.all_gather(g, DEVICE, tiled=True, to="invarying")  # in the replica: the sum
    w, opt = ctx.optimizer.update(g, state.momentum, state.params)
    return state._replace(params=w, momentum=opt), StepInfo(loss / ctx.rows, g, None)


def outer_parts(outer: Optimizer) -> Callable[[np.ndarray, Mesh, Context], dict]:
    """``Parts.extra`` of a strategy with an outer step: ``TrainState.outer`` = (the parameters
    at the last sync, ``outer``'s state), each in slices over ``device`` (a scalar replicated)."""

    def extra(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
        def sliced(value):
            spec = P() if np.ndim(value) == 0 else P(DEVICE)
            return jax.device_put(value, NamedSharding(mesh, spec))

        return {"outer": (sliced(w0), jax.tree.map(sliced, outer.init(w0)))}

    return extra


def outer_step(outer: Optimizer) -> Callable[[TrainState, Context], TrainState]:
    """The outer step (``Sync.outer``) with the outer optimizer ``outer``, one device's view:
    its slice of Δ = (w at the last sync) − (its replica's w), averaged across the replicas
    (the all-reduce that crosses hosts: 1/D of the parameters per device), ``outer``'s update
    of its slice of w at the last sync, and the slices all-gathered inside the replica."""

    def step(state: TrainState, ctx: Context) -> TrainState:
        synced, outer_state = state.outer  # this device's slices: f32[n/D]
        size = synced.shape[0]
        mine = jax.lax.dynamic_slice_in_dim(state.params, jax.lax.axis_index(DEVICE) * size, size)
        delta = jax.lax.pmean(synced - mine, HOST)  # the outer gradient: crosses hosts
        synced, outer_state = outer.update(delta, outer_state, synced)
        params = jax.lax.all_gather(synced, DEVICE, tiled=True)  # inside the replica
        return state._replace(params=params, outer=(synced, outer_state))

    return step


def every_h_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """The outer gradient's two-level all-reduce every ``local_steps`` steps (per inner step: a
    1/H share); across hosts only, as the inner steps send nothing over a host's link."""
    h = settings.local_steps
    return Traffic(link_bytes_sent("all_reduce", "two_level", F32 * n, topology) / h,
                   message_steps("all_reduce", "two_level", topology) / h)
