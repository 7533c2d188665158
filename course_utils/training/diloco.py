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

One outer step and one merge serve every strategy of part five (``OuterStep``, ``Merge``):
Streaming DiLoCo's (``streaming_diloco``) is DiLoCo's with F fragments, a format, τ and α, and
``course cluster --measure diloco`` runs the same ``OuterStep.exchange`` on its stream device
and the same ``Merge.fragment``. One model of a sync's bytes and messages (``sync_traffic``)
is read by the registry's per-step traffic (``every_h_traffic``), step 22's and the cluster's
round model (``results.diloco_cluster``) and the exercises' checks.

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

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.models.cost_model import Topology, message_steps
from course_utils.models.link_traffic import Traffic, TrafficSettings
from course_utils.problems.classification import loss_sum
from course_utils.training.hsdp import DEVICE, HOST
from course_utils.training.optimizers import Optimizer
from course_utils.training.quantize import check_format, exchange_bytes, quantized_all_reduce
from course_utils.training.state import Context, Step, StepInfo, TrainState, own_copy
from course_utils.training.streaming import mix, put_fragment, take_fragment
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


class OuterState(NamedTuple):
    """``TrainState.outer`` of a strategy with an outer step (``outer_parts``).

    Attributes:
        synced: this device's slice of w at each fragment's last sync, f32[n/D].
        state: the outer optimizer's state, in slices likewise.
        count: the syncs so far (int32, replicated; ``None`` if not kept): the last one sent
            fragment count mod F (``streaming_diloco.streaming_parts`` keeps it).
        pending: with an overlap, this device's slice of the fragment on its way, f32[n/(D·F)]
            (``None`` if τ = 0: the outer step merges at once).
    """

    synced: jax.Array
    state: Any
    count: jax.Array | None = None
    pending: jax.Array | None = None


def outer_parts(outer: Optimizer) -> Callable[[np.ndarray, Mesh, Context], dict]:
    """``Parts.extra`` of a strategy with an outer step: ``TrainState.outer`` = (the parameters
    at the last sync, ``outer``'s state), each in slices over ``device`` (a scalar replicated)."""

    def extra(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
        def sliced(value):
            spec = P() if np.ndim(value) == 0 else P(DEVICE)
            return jax.device_put(value, NamedSharding(mesh, spec))

        return {"outer": OuterState(sliced(w0), jax.tree.map(sliced, outer.init(w0)))}

    return extra


def _fragment_of(tree, fragment, fragments: int):
    return jax.tree.map(lambda a: a if a.ndim == 0 else take_fragment(a, fragment, fragments),
                        tree)


def _with_fragment(tree, part, fragment, fragments: int):
    return jax.tree.map(lambda a, b: a if a.ndim == 0 else put_fragment(a, fragment, fragments, b),
                        tree, part)


@dataclass(frozen=True)
class Merge:
    """The merge of an outer step's result (``Sync.merge``): fragment f of F, mixed as
    α · local + (1 − α) · arrived (``streaming.mix``; α = ``mixing``, 0: replaced)."""

    fragments: int = 1
    mixing: float = 0.0

    def fragment(self, w: jax.Array, fragment, arrived: jax.Array) -> jax.Array:
        """``w`` (a replica's whole vector) with ``fragment`` mixed with ``arrived``, f32[n/F]:
        the one merge body (``train``'s and ``course cluster --measure diloco``'s)."""
        if self.mixing == 0.0:  # replaced: DiLoCo's merge, with no multiply by 0 kept by XLA
            return put_fragment(w, fragment, self.fragments, arrived)
        local = take_fragment(w, fragment, self.fragments)
        return put_fragment(w, fragment, self.fragments, mix(local, arrived, self.mixing))

    def merged(self, state: TrainState, fragment, arrived: jax.Array) -> TrainState:
        """``state`` with ``fragment``'s result ``arrived`` (this device's slice) merged:
        gathered inside the replica, mixed into the replica's w, and made the fragment's w at
        its sync."""
        # f32[n/F], inside the replica: the same on each of its devices
        whole = jax.lax.all_gather(arrived, DEVICE, tiled=True, to="invarying")
        synced = put_fragment(state.outer.synced, fragment, self.fragments, arrived)
        return state._replace(params=self.fragment(state.params, fragment, whole),
                              outer=state.outer._replace(synced=synced))

    def __call__(self, state: TrainState, ctx: Context) -> TrainState:
        """The fragment on its way (``OuterState.pending``) merging, one device's view."""
        return self.merged(state, state.outer.count % self.fragments, state.outer.pending)


@dataclass(frozen=True)
class OuterStep:
    """The outer step (``Sync.outer``) with the outer optimizer ``optimizer``: the outer
    gradient of one fragment of F (all of w if F = 1) exchanged across the replicas in
    ``dtype`` (``quantize.FORMATS``), averaged, the optimizer's update, the result merged at
    once (``overlap`` 0) or kept on its way (``OuterState.pending``, merged by ``merging``
    τ inner steps later). F = 1, float32, τ = 0 is DiLoCo's (and local SGD's with AdamW)."""

    optimizer: Optimizer
    fragments: int = 1
    dtype: str = "float32"
    overlap: int = 0
    mixing: float = 0.0

    @property
    def merging(self) -> Merge:
        """Its merge (``Sync.merge`` when ``overlap`` > 0)."""
        return Merge(self.fragments, self.mixing)

    def exchange(self, anchor: jax.Array, local: jax.Array, state, axis: str, ranks: int):
        """The one outer-step body (``train``'s and ``course cluster --measure diloco``'s),
        inside ``shard_map`` over ``axis`` (``ranks`` replicas): the outer gradient
        ``anchor`` (w at the last sync) − ``local`` (the replica's), summed across the
        replicas in ``dtype`` (``quantize.quantized_all_reduce``, which crosses hosts),
        averaged, and ``optimizer``'s update of ``anchor`` with its ``state``; returns
        (the new w at the sync, the new state)."""
        delta = quantized_all_reduce(anchor - local, axis, ranks, dtype=self.dtype) / ranks
        return self.optimizer.update(delta, state, anchor)

    def traffic(self, n: int, topology: Topology) -> Traffic:
        """One sync's bytes over a host's link and its messages (``sync_traffic`` of this
        step's F and format): what the registry's per-step traffic, step 22's and the
        cluster's models read, so that none restates the step's settings."""
        return sync_traffic(n, topology, fragments=self.fragments, dtype=self.dtype)

    def __call__(self, state: TrainState, ctx: Context) -> TrainState:
        """One device's view: its slice of the next fragment (the only one if F = 1)."""
        synced, outer_state, count, _ = state.outer  # synced: this device's slice, f32[n/D]
        count = None if count is None else count + 1
        fragment = 0 if count is None else count % self.fragments  # this sync's fragment
        size, f = synced.shape[0], self.fragments
        mine = jax.lax.dynamic_slice_in_dim(state.params, jax.lax.axis_index(DEVICE) * size, size)
        anchor = take_fragment(synced, fragment, f)  # f32[n/(D·F)]
        arrived, part = self.exchange(anchor, take_fragment(mine, fragment, f),
                                      _fragment_of(outer_state, fragment, f), HOST, ctx.p)
        outer = OuterState(synced, _with_fragment(outer_state, part, fragment, f), count)
        if self.overlap == 0:
            return self.merging.merged(state._replace(outer=outer), fragment, arrived)
        return state._replace(outer=outer._replace(pending=arrived))


def outer_step(outer: Optimizer, *, fragments: int = 1, dtype: str = "float32",
               overlap: int = 0, mixing: float = 0.0) -> OuterStep:
    """The outer step (``Sync.outer``) with the outer optimizer ``outer``, one device's view:
    its slice of the next fragment's Δ = (w at its last sync) − (its replica's w), exchanged
    across the replicas in ``dtype`` and averaged (1/D of the fragment per device crosses
    hosts), ``outer``'s update of its slice of w at the sync, and the slices all-gathered
    inside the replica and merged (at once, or ``overlap`` inner steps later). The defaults
    are DiLoCo's: all of w, float32, merged at once."""
    return OuterStep(outer, fragments, check_format(dtype), overlap, mixing)


def sync_traffic(n: int, topology: Topology, *, fragments: int = 1,
                 dtype: str = "float32") -> Traffic:
    """One outer step's exchange (the model of one sync, in bytes and messages): one fragment
    (n/F values), each of a host's D devices sending its slice (n/(D·F) values) through
    ``quantize.quantized_all_reduce`` across the hosts (``quantize.exchange_bytes``: float32
    whole, or codes and a scale per block); the message steps of the two-level all-reduce,
    twice in int8 or int4: the codes and the scales are exchanged as two collectives each.
    The all-gather inside the replica crosses no host's link.

    Examples:
        >>> sync_traffic(1024, Topology(2, 1))  # a ring of two hosts: each sends n floats
        Traffic(link_bytes=4096.0, messages=2)
        >>> sync_traffic(1024, Topology(2, 1), fragments=4, dtype="int4")  # 128 B + 4 scales
        Traffic(link_bytes=144.0, messages=4)
    """
    devices = topology.devices
    arrays = 1 if dtype == "float32" else 2  # quantized: the codes and the scales
    return Traffic(devices * exchange_bytes(n // (devices * fragments), topology.hosts, dtype),
                   arrays * message_steps("all_reduce", "two_level", topology))


def every_h_traffic(step: OuterStep) -> Callable[[int, Topology, TrafficSettings], Traffic]:
    """``StrategySpec.traffic`` of a strategy whose outer step ``step`` syncs F fragments every
    H steps: its one sync (``OuterStep.traffic``) F times every ``local_steps`` steps (per
    inner step an F/H share); across hosts only, as the inner steps send nothing over a
    host's link."""

    def traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
        one = step.traffic(n, topology)
        share = step.fragments / settings.local_steps
        return Traffic(one.link_bytes * share, one.messages * share)

    return traffic
