"""Data parallelism and the ZeRO stages: the exact gradient, sent whole or in slices.

==================  ==================================================  ==========================
strategy            communication per step                              the state per device
==================  ==================================================  ==========================
data_parallel       all-reduce of the gradient                          w, g, v whole
zero1               reduce-scatter g, update own slice, all-gather w    w, own g whole; v a slice
zero2               the same                                            w whole; g, v slices
zero3               all-gather each layer before use; grad's transpose  w, g, v slices (each
                    is a reduce-scatter per layer                       device: a chunk of
                                                                        every layer)
zero3_regather      zero3, w gathered again for the backward pass       w, g, v slices
==================  ==================================================  ==========================

ZeRO-1 and ZeRO-2 send the same bytes; they differ by the gradient each keeps between steps
(``TrainState.gradient``): ZeRO-1 the whole local gradient, ZeRO-2 only its slice of the sum.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from course_utils.models.cost_model import Topology
from course_utils.models.link_traffic import (
    F32,
    Traffic,
    TrafficSettings,
    ring_traffic,
    total_traffic,
)
from course_utils.problems.classification import cross_entropy_sum, logits
from course_utils.training.layers import layer_chunks
from course_utils.training.state import (
    Context,
    Step,
    StepInfo,
    TrainState,
    apply_update,
    local_gradient,
    my_slice,
    next_state,
)


def data_parallel(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = local_gradient(state, x, y, ctx)
    g = jax.lax.psum(g_local, ctx.axis)  # all-reduce: every device the whole sum
    return apply_update(state, g, ctx), StepInfo(loss, g, g_local)


def _sliced_update(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """ZeRO-1 and ZeRO-2: the same bytes as data parallelism, cut in two halves."""
    loss, g_local = local_gradient(state, x, y, ctx)
    g = jax.lax.psum_scatter(g_local, ctx.axis, tiled=True)  # my slice of the sum
    w, v = ctx.optimizer.update(g, state.momentum, my_slice(state.params, ctx))
    w = jax.lax.all_gather(w, ctx.axis, tiled=True, to="invarying")  # all the whole new w
    return state._replace(params=w, momentum=v), StepInfo(loss, g, g_local)


def zero1(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """Optimizer state in slices; the whole local gradient is kept."""
    state, info = _sliced_update(state, x, y, ctx)
    return next_state(state, gradient=info.local), info


def zero2(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """Optimizer state and the kept gradient in slices: only this device's slice of the sum."""
    state, info = _sliced_update(state, x, y, ctx)
    return next_state(state, gradient=info.used), info


def gather_layer(w_mine: jax.Array, ctx: Context, index: int) -> jax.Array:
    """Layer ``index`` of ``ctx.mlp.layers``, whole, all-gathered from each device's chunk of
    it in zero3's layout (``layer_order``): one all-gather of ⌈size/p⌉ values per device."""
    chunks = layer_chunks(ctx.n, ctx.p, ctx.mlp)
    start = sum(chunks[:index])
    whole = jax.lax.all_gather(w_mine[start:start + chunks[index]], ctx.axis, tiled=True)
    name, shape = ctx.mlp.layers[index]
    return whole[:math.prod(shape)].reshape(shape)


def zero3(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """Parameters live as slices, each device a chunk of every layer (``layer_order``); each
    layer is gathered just before its use, so one layer at a time is whole; ``jax.grad``
    through each all-gather gives its transpose, a reduce-scatter: the gradient arrives as a
    slice in the same layout."""

    def loss_of_slice(w_mine):
        w1, b1 = gather_layer(w_mine, ctx, 0), gather_layer(w_mine, ctx, 1)
        hidden = jnp.tanh(x @ w1 + b1)
        w2, b2 = gather_layer(w_mine, ctx, 2), gather_layer(w_mine, ctx, 3)
        return cross_entropy_sum(hidden @ w2 + b2, y) / ctx.rows

    loss, g = jax.value_and_grad(loss_of_slice)(state.params)
    return apply_update(state, g, ctx), StepInfo(loss, g, None)


def _regathering_loss(ctx: Context, x, y):
    """The zero3 loss of a parameter slice whose backward pass gathers the parameters again.

    The backward pass re-gathers from ``w_mine + 0·c`` with ``c`` an entry of the incoming
    cotangent: a data dependence on the backward pass that XLA does not fold (x·0 is not 0 for
    floats: NaN, ∞), so the two gathers are not merged into one, whatever the release. (The XLA:CPU
    of jax 0.10 removes optimization barriers before it eliminates common subexpressions, so
    ``jax.checkpoint`` leaves a single all-gather there; that of jax 0.12 keeps both.)
    """

    @jax.custom_vjp
    def scores(w_mine):
        return logits(jax.lax.all_gather(w_mine, ctx.axis, tiled=True), x, ctx.mlp)

    def forward(w_mine):
        return scores(w_mine), w_mine  # keep only the slice for the backward pass

    def backward(w_mine, cotangent):
        again = w_mine + 0.0 * cotangent[0, 0]
        w = jax.lax.all_gather(again, ctx.axis, tiled=True)  # the second all-gather
        _, pullback = jax.vjp(lambda full: logits(full, x, ctx.mlp), w)
        (g_full,) = pullback(cotangent)
        return (jax.lax.psum_scatter(g_full, ctx.axis, tiled=True),)

    scores.defvjp(forward, backward)
    return lambda w_mine: cross_entropy_sum(scores(w_mine), y) / ctx.rows


def zero3_regather(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g = jax.value_and_grad(_regathering_loss(ctx, x, y))(state.params)
    return apply_update(state, g, ctx), StepInfo(loss, g, None)


def all_reduce_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """Data parallelism's: one all-reduce of the gradient, 4n bytes."""
    return ring_traffic("all_reduce", F32 * n, topology)


def fsdp_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """ZeRO-3 as FSDP runs it: the parameters all-gathered for the forward pass and again for
    the backward pass (the gathered layers freed in between, ``zero3_regather``'s program), the
    gradient reduce-scattered."""
    gather = ring_traffic("all_gather", F32 * n, topology)
    return total_traffic(gather, gather, ring_traffic("reduce_scatter", F32 * n, topology))
