"""One training step per strategy of part three, as seen by one device inside ``shard_map``.

Every strategy takes the same data-parallel step — each device computes the gradient of its own
rows (``loss_sum`` / all rows, so the sum over devices is the global mean's gradient), then a
heavy-ball momentum update — and differs only in what it sends and what it stores:

==================  ==================================================  ==========================
strategy            communication per step                              held per device
==================  ==================================================  ==========================
data_parallel       all-reduce of the gradient                          w, g, v whole
zero1               reduce-scatter g, update own slice, all-gather w    w, g whole; v a slice
zero2               the same                                            w whole; g, v slices
zero3               all-gather w before use; grad's transpose is a      w, g, v slices
                    reduce-scatter
zero3_regather      zero3, w gathered again for the backward pass       w, g, v slices
bf16                16-bit ring reduce-scatter + all-gather (as u16)    w, g, v whole
int8                all-to-all + all-gather of int8 and scales          w, g, v whole
topk                all-gather of the k largest entries and indices     w, g, v whole
topk_ef             topk of g + residual; the rest is the next residual w, g, v, residual whole
powersgd            rank-r all-reduces of each matrix, with residual    w, g, v, residual whole
local_sgd           nothing; every H steps parameters averaged (pmean)  w, g, v whole (its own)
==================  ==================================================  ==========================

A state entry has a *form*: ``replicated`` (every device the same array, ``P()``), ``sliced``
(device i holds slice i, ``P(axis)``) or ``own`` (every device its own whole copy, stacked
along ``P(axis)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from course_utils.collectives import compression
from course_utils.collectives.kernels import momentum_update
from course_utils.constants import BETA
from course_utils.problems.classification import (
    HIDDEN,
    LAYERS,
    N_PARAMS,
    cross_entropy_sum,
    logits,
    loss_sum,
    unflatten,
)

# the learning rate of every run of part three (momentum BETA as everywhere in the course)
TRAIN_LR = 0.05
# the rank of PowerSGD's approximation of each weight matrix
POWERSGD_RANK = 1


@dataclass(frozen=True)
class Context:
    """What a step body needs to know besides its arrays."""

    axis: str
    p: int
    n: int  # length of the flat parameter vector
    rows: int  # rows of the whole data set
    k: int  # entries top-k sends per device


@dataclass(frozen=True)
class Strategy:
    """A step body and the forms of its state.

    Attributes:
        body: ``body(state, x, y, ctx) -> (state, loss, g_used, g_local)``; ``g_used`` is the
            gradient the update used, ``g_local`` this device's own gradient before any
            communication (``None`` where ``forms_local`` is false).
        forms: form of each state entry: ``replicated``, ``sliced`` or ``own``.
        used_form: the form of ``g_used``.
        holds_local: the gradient a device holds is ``g_local`` (whole) rather than ``g_used``.
        forms_local: the body forms ``g_local`` (ZeRO-3's gradient arrives already reduced).
        extra_state: ``(p, n) -> {name: (global array, form)}`` beyond ``w`` and ``v``.
    """

    body: Callable
    forms: dict
    used_form: str = "replicated"
    holds_local: bool = False
    forms_local: bool = True
    extra_state: Callable = field(default=lambda p, n: {})


def _local_gradient(w, x, y, ctx: Context):
    loss, g = jax.value_and_grad(loss_sum)(w, x, y)
    return loss / ctx.rows, g / ctx.rows


def _update(state: dict, g, **extra) -> dict:
    w, v = momentum_update(state["w"], state["v"], g, TRAIN_LR, BETA)
    return {**state, "w": w, "v": v, **extra}


def _my_slice(full, ctx: Context):
    size = ctx.n // ctx.p
    return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(ctx.axis) * size, size)


def data_parallel(state, x, y, ctx):
    loss, g_local = _local_gradient(state["w"], x, y, ctx)
    g = jax.lax.psum(g_local, ctx.axis)  # all-reduce: every device the whole sum
    return _update(state, g), loss, g, g_local


def sliced_update(state, x, y, ctx):
    """ZeRO-1 and ZeRO-2: the same bytes as data parallelism, cut in two halves."""
    loss, g_local = _local_gradient(state["w"], x, y, ctx)
    g = jax.lax.psum_scatter(g_local, ctx.axis, tiled=True)  # my slice of the sum
    w, v = momentum_update(_my_slice(state["w"], ctx), state["v"], g, TRAIN_LR, BETA)
    w = jax.lax.all_gather(w, ctx.axis, tiled=True)  # every device the whole new w
    return {**state, "w": w, "v": v}, loss, g, g_local


def zero3(state, x, y, ctx):
    """Parameters live as slices; gathered for the forward pass; ``jax.grad`` through the
    all-gather gives its transpose, a reduce-scatter: the gradient arrives as a slice."""

    def loss_of_slice(w_mine):
        return loss_sum(jax.lax.all_gather(w_mine, ctx.axis, tiled=True), x, y) / ctx.rows

    loss, g = jax.value_and_grad(loss_of_slice)(state["w"])
    return _update(state, g), loss, g, None


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
        return logits(jax.lax.all_gather(w_mine, ctx.axis, tiled=True), x)

    def forward(w_mine):
        return scores(w_mine), w_mine  # keep only the slice for the backward pass

    def backward(w_mine, cotangent):
        again = w_mine + 0.0 * cotangent[0, 0]
        w = jax.lax.all_gather(again, ctx.axis, tiled=True)  # the second all-gather
        _, pullback = jax.vjp(lambda full: logits(full, x), w)
        (g_full,) = pullback(cotangent)
        return (jax.lax.psum_scatter(g_full, ctx.axis, tiled=True),)

    scores.defvjp(forward, backward)
    return lambda w_mine: cross_entropy_sum(scores(w_mine), y) / ctx.rows


def zero3_regather(state, x, y, ctx):
    loss, g = jax.value_and_grad(_regathering_loss(ctx, x, y))(state["w"])
    return _update(state, g), loss, g, None


def _compressed(reduce: Callable) -> Callable:
    def body(state, x, y, ctx):
        loss, g_local = _local_gradient(state["w"], x, y, ctx)
        g = reduce(g_local, ctx.axis, ctx.p)
        return _update(state, g), loss, g, g_local

    return body


def topk(state, x, y, ctx):
    loss, g_local = _local_gradient(state["w"], x, y, ctx)
    _, kept, indices = compression.topk_select(g_local, ctx.k)
    g = compression.sparse_all_gather(kept, indices, ctx.n, ctx.axis)
    return _update(state, g), loss, g, g_local


def topk_ef(state, x, y, ctx):
    loss, g_local = _local_gradient(state["w"], x, y, ctx)
    acc = g_local + state["residual"]  # the gradient plus what was not sent before
    sent, kept, indices = compression.topk_select(acc, ctx.k)
    g = compression.sparse_all_gather(kept, indices, ctx.n, ctx.axis)
    return _update(state, g, residual=acc - sent), loss, g, g_local


def powersgd(state, x, y, ctx):
    loss, g_local = _local_gradient(state["w"], x, y, ctx)
    acc = g_local + state["residual"]
    layer = unflatten(acc)
    w1, q1 = compression.powersgd_round(layer["w1"], state["q1"], ctx.axis)
    w2, q2 = compression.powersgd_round(layer["w2"], state["q2"], ctx.axis)
    biases = jax.lax.psum(jnp.concatenate([layer["b1"], layer["b2"]]), ctx.axis)
    padding = jnp.zeros(ctx.n - N_PARAMS, acc.dtype)
    g = jnp.concatenate([w1.ravel(), biases[:HIDDEN], w2.ravel(), biases[HIDDEN:], padding])
    mine = jnp.concatenate(  # this device's share of what was sent
        [w1.ravel() / ctx.p, layer["b1"], w2.ravel() / ctx.p, layer["b2"], padding])
    return _update(state, g, residual=acc - mine, q1=q1, q2=q2), loss, g, g_local


def local_sgd(state, x, y, ctx):
    """One local step on this device's rows alone; nothing is sent (the averaging every H steps
    is a program of its own)."""
    loss, g = jax.value_and_grad(loss_sum)(state["w"], x, y)
    g = g / (ctx.rows // ctx.p)  # the mean over this device's rows
    return _update(state, g), loss / ctx.rows, g, g


def _residual(p: int, n: int) -> dict:
    return {"residual": (np.zeros(p * n, np.float32), "own")}


def _powersgd_state(p: int, n: int) -> dict:
    rng = np.random.default_rng(0)
    cols = {name: shape[1] for name, shape in LAYERS if len(shape) == 2}
    start = {f"q{i}": (rng.normal(size=(cols[f"w{i}"], POWERSGD_RANK)).astype(np.float32),
                       "replicated") for i in (1, 2)}
    return {**_residual(p, n), **start}


_WHOLE = {"w": "replicated", "v": "replicated"}

STRATEGY_STEPS: dict[str, Strategy] = {
    "data_parallel": Strategy(data_parallel, _WHOLE),
    "zero1": Strategy(sliced_update, {"w": "replicated", "v": "sliced"}, "sliced",
                      holds_local=True),
    "zero2": Strategy(sliced_update, {"w": "replicated", "v": "sliced"}, "sliced"),
    "zero3": Strategy(zero3, {"w": "sliced", "v": "sliced"}, "sliced", forms_local=False),
    "zero3_regather": Strategy(zero3_regather, {"w": "sliced", "v": "sliced"}, "sliced",
                               forms_local=False),
    "bf16": Strategy(_compressed(compression.bf16_all_reduce), _WHOLE),
    "int8": Strategy(_compressed(compression.int8_all_reduce), _WHOLE),
    "topk": Strategy(topk, _WHOLE),
    "topk_ef": Strategy(topk_ef, _WHOLE, extra_state=_residual),
    "powersgd": Strategy(powersgd, _WHOLE, extra_state=_powersgd_state),
    "local_sgd": Strategy(local_sgd, {"w": "own", "v": "own"}, "own"),
}
STRATEGIES = tuple(STRATEGY_STEPS)
