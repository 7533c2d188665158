"""The programs ``course cluster --measure diloco`` times on each host, and a round of them.

Each host's process has two devices (``--devices-per-host 2``, as step 19's overlap): the
first computes, the second is the communication stream (``collectives.overlap.stream_meshes``).
A replica is a host: its inner steps run on its compute device on its own rows, nothing sent.
A sync takes one fragment of the parameters (``training.streaming``: F strided chunks of the
flat vector; F = 1 is DiLoCo's whole vector) off the compute device, moves it to the stream
device, exchanges the outer gradient (the parameters at the last sync minus this replica's)
across the hosts in the method's format (``training.quantize.quantized_all_reduce``: float32,
int8, or int4 packed two codes a byte, summed in f32), averages it and takes the outer
Nesterov step there — the registry's outer step of the method (``Sync.outer.exchange``, the
body ``train`` runs) — and moves the new shared fragment back, where it is mixed into the
replica's parameters (``Sync.outer.merging``, ``train``'s merge) after ``overlap`` more inner
steps (0: at once, the compute waiting). A method is a registry name (``MethodRow``).

A timed round is H inner steps holding every one of the F sends and merges of Streaming
DiLoCo's schedule (``streaming.sent_after``, ``merged_after``): its steps τ + 1 … τ + H, so
the fragment sent after the last step but τ merges inside it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.collectives import overlap as ov
from course_utils.problems.classification import PART_FOUR_MLP, classification_task, init_params
from course_utils.results.diloco_cluster import BASELINE, INNER, MethodRow
from course_utils.tools.cluster.timing import placed
from course_utils.training.hsdp import DEVICE, HOST
from course_utils.training.programs import build_programs
from course_utils.training.state import Context
from course_utils.training.strategies import spec
from course_utils.training.streaming import merged_after, sent_after, take_fragment


class Layout(NamedTuple):
    """The meshes, the inner step's context, the data one host computes on, the starting
    states of the inner steps (each host its own copy) and of data parallelism (replicated),
    and those two steps, built once for every method: placing a value on every host's devices
    sends it to every other host first, to check that it is the same there (``jax.device_put``
    across processes), which at 10 Mbit/s takes seconds per state."""

    compute: Mesh
    stream: Mesh
    ctx: Context
    x: jax.Array
    y: jax.Array
    state: object
    dp_state: object
    inner: Callable  # (state, x, y) -> state: DiLoCo's inner step, nothing sent
    data_parallel: Callable  # (state, x, y) -> state: the gradient all-reduced, AdamW


def layout(mesh: Mesh, batch_size: int, n: int) -> Layout:
    """The compute and stream device of every host of ``mesh`` (``("host", "device")``, one
    row per host: ``tools.cluster.overlap.host_mesh``); ``batch_size`` rows per host and inner
    step, ``n`` parameters."""
    compute, stream = ov.stream_meshes(mesh)
    hosts = compute.size
    # the registry's replicas: a mesh ("host", "device") of one compute device per host
    compute = Mesh(compute.devices.reshape(hosts, 1), (HOST, DEVICE))
    ctx = Context(HOST, hosts, n, hosts * batch_size, k=1, mlp=PART_FOUR_MLP,
                  optimizer=spec(INNER).optimizer)
    x, y = classification_task(mlp=PART_FOUR_MLP)
    rows, w0 = hosts * batch_size, init_params(n, 0, PART_FOUR_MLP)
    batch = placed(compute, x[:rows], P(HOST, None)), placed(compute, y[:rows], P(HOST))
    states = [spec(name).init(w0, compute, ctx) for name in (INNER, BASELINE)]

    def step_of(name, like):  # train's step (``build_programs``), its state alone kept
        step = build_programs(spec(name), compute, ctx, like, batch).step
        return lambda s, x, y: step(s, x, y)[0]

    return Layout(compute, stream, ctx, *batch, *states,
                  *(step_of(name, like) for name, like in zip((INNER, BASELINE), states)))


def _on(mesh: Mesh, fn: Callable, in_specs, out_specs):
    return jax.jit(jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                 check_vma=True))


class Rounds(NamedTuple):
    """What a round of one method dispatches besides the layout's steps: a fragment's take and
    merge (compute) and sync (stream), and each fragment's starting outer values."""

    take: Callable  # (w, f) -> this replica's fragment f
    sync: Callable  # (local, shared, outer state) -> (shared, outer state), on the stream
    merge: Callable  # (w, shared, f) -> w with fragment f mixed in
    outer: list  # per fragment: (shared values, outer optimizer's state), on the stream


def rounds(lay: Layout, method: MethodRow) -> Rounds:
    """The programs of ``method`` on ``lay`` (whose inner and data-parallel steps are the ones
    ``train`` runs, ``build_programs``, on the compute devices as the registry's replica mesh):
    the registry's outer step of ``method``
    (``Sync.outer``, a ``diloco.OuterStep``: its ``exchange``, the body ``train`` runs, here
    on each fragment on the stream device) and merge (its ``merging``, on the compute device)."""
    ctx, fragments, hosts = lay.ctx, method.fragments, lay.stream.size
    own = P(HOST)
    w0 = init_params(ctx.n, 0, PART_FOUR_MLP)
    outer_step = method.sync.outer

    def sync(mine, shared, opt):  # one host's fragment: f32[n/F] each, and its outer state
        return outer_step.exchange(shared, mine, opt, HOST, hosts)  # (shared, opt)

    def own_copy(value):  # every host its copy, on its stream device (a scalar replicated)
        return placed(lay.stream, np.tile(value, hosts) if np.ndim(value) else np.asarray(value),
                      own if np.ndim(value) else P())

    take = _on(lay.compute, lambda w, f: take_fragment(w, f, fragments), (own, P()), own)
    put = _on(lay.compute, outer_step.merging.fragment, (own, P(), own), own)
    init = outer_step.optimizer.init
    outer = [jax.tree.map(own_copy, (w0[f::fragments], init(w0[f::fragments])))
             for f in range(fragments)]
    specs = jax.tree.map(lambda a: a.sharding.spec, outer[0])
    return Rounds(lambda w, f: take(w, np.int32(f)), _on(lay.stream, sync, (own, *specs), specs),
                  lambda w, g, f: put(w, np.int32(f), g), outer)


def to(x, mesh: Mesh):
    """``x`` moved to the same host's device of ``mesh``, each host's shard to its own host."""
    return ov.move(x, NamedSharding(mesh, P(HOST)))


def run_round(r: Rounds, lay: Layout, method: MethodRow | None, local_steps: int):
    """One round of ``local_steps`` inner steps with ``method``'s sends and merges (none if
    ``None``), dispatched in order; returns the final state (wait on it to time the round)."""
    tau = 0 if method is None else method.overlap
    state, outer, pending = lay.state, list(r.outer), {}
    for t in range(tau + 1, tau + local_steps + 1):
        state = lay.inner(state, lay.x, lay.y)
        if method is None:
            continue
        every = {"local_steps": local_steps, "fragments": method.fragments}
        f = sent_after(t, **every)
        if f is not None:
            pending[f] = r.sync(to(r.take(state.params, f), lay.stream), *outer[f])
        f = merged_after(t, **every, overlap=tau)
        if f is not None:
            outer[f] = pending.pop(f)
            state = state._replace(params=r.merge(state.params, to(outer[f][0], lay.compute),
                                                  f))
    return state


def one_sync(r: Rounds, lay: Layout):
    """Fragment 0's sync alone from the starting state: taken, moved, exchanged."""
    return r.sync(to(r.take(lay.state.params, 0), lay.stream), *r.outer[0])


def dp_steps(lay: Layout, steps: int):
    """``steps`` data-parallel steps (the gradient all-reduced every step) in a row."""
    state = lay.dp_state
    for _ in range(steps):
        state = lay.data_parallel(state, lay.x, lay.y)
    return state
