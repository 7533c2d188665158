"""Every strategy of parts three and four (the model in ``Context.mlp``) as a pair of pure
functions, ``init`` and ``step``.

A strategy is shaped like ``optax.GradientTransformation``: ``init(params, mesh, ctx)`` places
the initial ``TrainState`` on the mesh, and ``step(state, x, y, ctx)``, one device's view inside
``shard_map``, returns the next state and a ``StepInfo``. Every strategy takes the same
data-parallel step — each device computes the gradient of its own rows (``loss_sum`` / the
step's rows, so the sum over devices is the global mean's gradient), then a heavy-ball momentum
update — and differs only in what it sends and what its state holds:

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
bf16                16-bit ring reduce-scatter + all-gather (as u16)    w, g, v whole
int8                all-to-all + all-gather of int8 and scales          w, g, v whole
topk                all-gather of the k largest entries and indices     w, g, v whole
topk_ef             topk of g + residual; the rest is the next residual w, g, v, residual whole
powersgd            rank-r all-reduces of each matrix, with residual    w, g, v, residual whole
local_sgd           nothing; every H steps parameters averaged (pmean)  w, g, v whole (its own)
==================  ==================================================  ==========================

ZeRO-1 and ZeRO-2 send the same bytes; they differ by the gradient each keeps between steps
(``TrainState.gradient``): ZeRO-1 the whole local gradient, ZeRO-2 only its slice of the sum.

Placements are the arrays' own: each field of the state is placed with a ``PartitionSpec`` over
the mesh's named axis — ``P()`` replicated, ``P(axis)`` sliced (device i holds slice i), or
``P(axis)`` over p stacked copies ("own": every device its own whole copy) — so memory per
device is the sum over the state's shards, and a two-axis mesh (hosts × devices, HSDP: sliced
over ``devices``, replicated over ``hosts``) is a matter of other specs, not another state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.collectives import compression
from course_utils.collectives.kernels import momentum_update
from course_utils.constants import BETA
from course_utils.models.cost_model import Topology, bytes_sent
from course_utils.problems.classification import (
    MLP,
    PART_THREE,
    cross_entropy_sum,
    logits,
    loss_sum,
    unflatten,
)
from course_utils.training.layers import layer_chunks, layer_order

# the learning rate of every run of part three (momentum BETA as everywhere in the course)
TRAIN_LR = 0.02
# the rank of PowerSGD's approximation of each weight matrix
POWERSGD_RANK = 1


@dataclass(frozen=True)
class Context:
    """What a step needs to know besides its arrays.

    Attributes:
        axis: the mesh axis the data are split over.
        p: devices along it.
        n: length of the flat parameter vector.
        rows: rows of one optimizer step's global batch (the whole data set by default).
        k: entries top-k sends per device.
        mlp: the task's model (part three's unless given).
    """

    axis: str
    p: int
    n: int
    rows: int
    k: int
    mlp: MLP = PART_THREE


class TrainState(NamedTuple):
    """What a strategy keeps between steps; absent parts are ``None``.

    Attributes:
        params: the flat parameters w (``parameters`` in the memory count).
        momentum: the heavy-ball velocity v (``optimizer``).
        gradient: the gradient kept from the last step (``gradients``).
        residual: error feedback: what was not sent yet (``optimizer``).
        warm_start: PowerSGD's right factors, one per weight matrix (``optimizer``).
        accumulated: the local gradient summed over this step's micro-steps so far
            (``gradients``; only with gradient accumulation).
    """

    params: jax.Array
    momentum: jax.Array
    gradient: jax.Array
    residual: jax.Array | None = None
    warm_start: tuple[jax.Array, ...] | None = None
    accumulated: jax.Array | None = None


# which part of the memory per device each field of the state counts as
MEMORY_PART = {"params": "parameters", "momentum": "optimizer", "gradient": "gradients",
               "residual": "optimizer", "warm_start": "optimizer", "accumulated": "gradients"}


class StepInfo(NamedTuple):
    """What one step reports besides its state (one device's view).

    Attributes:
        loss: this device's share of the mean loss, before the update.
        used: the gradient the update used (this device's copy, or its slice).
        local: this device's own gradient before any communication; ``None`` where none is
            formed (ZeRO-3's arrives reduced; local SGD's is never combined).
    """

    loss: jax.Array
    used: jax.Array
    local: jax.Array | None


Step = tuple[TrainState, StepInfo]  # what a strategy's step returns


class Strategy(NamedTuple):
    """A training strategy: two pure functions, as ``optax.GradientTransformation``.

    Attributes:
        init: ``init(params, mesh, ctx) -> TrainState``: the state, placed, from the flat
            initial parameters (NumPy, length n).
        step: ``step(state, x, y, ctx) -> (TrainState, StepInfo)``: one device's step inside
            ``shard_map``, on its rows ``x``, ``y``.
    """

    init: Callable[[np.ndarray, Mesh, Context], TrainState]
    step: Callable[[TrainState, jax.Array, jax.Array, Context], Step]


def placements(state: TrainState) -> TrainState:
    """The ``PartitionSpec`` of every array of ``state``, read from the arrays themselves.

    Examples:
        >>> from course_utils.devices.setup import data_mesh
        >>> from course_utils.problems.classification import init_params, padded_size
        >>> mesh = data_mesh()
        >>> n = padded_size(mesh.size)
        >>> ctx = Context("data", mesh.size, n, rows=15360, k=1)
        >>> state = STRATEGY_STEPS["zero2"].init(init_params(n), mesh, ctx)
        >>> specs = placements(state)  # ZeRO-2: w whole, v and the kept gradient in slices
        >>> (specs.params, specs.momentum, specs.gradient) == (P(), P("data"), P("data"))
        True
        >>> specs.residual is None and specs.warm_start is None
        True
    """
    return jax.tree.map(lambda array: array.sharding.spec, state)


def place(mesh: Mesh, ctx: Context, value: np.ndarray, form: str) -> jax.Array:
    """``value`` on ``mesh`` as ``form``: ``replicated``, ``sliced`` or ``own`` (p copies)."""
    if form == "own":
        value = np.tile(value, ctx.p)
    return jax.device_put(value, NamedSharding(mesh, P() if form == "replicated" else P(ctx.axis)))


def _init(params: str, momentum: str, gradient: str, extra: Callable | None = None, *,
          layout: Callable[[int, int, MLP], np.ndarray] | None = None) -> Callable:
    """An ``init`` placing w, v and the kept gradient (zeros) as the forms given; w in the
    order ``layout(n, p, mlp)`` if given (zero3's chunk of every layer per device)."""

    def init(w0: np.ndarray, mesh: Mesh, ctx: Context) -> TrainState:
        if layout is not None:
            w0 = w0[layout(ctx.n, ctx.p, ctx.mlp)]
        state = TrainState(place(mesh, ctx, w0, params),
                           place(mesh, ctx, np.zeros_like(w0), momentum),
                           place(mesh, ctx, np.zeros_like(w0), gradient))
        return state if extra is None else state._replace(**extra(w0, mesh, ctx))

    return init


def _local_gradient(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context
                    ) -> tuple[jax.Array, jax.Array]:
    loss, g = jax.value_and_grad(loss_sum)(state.params, x, y, ctx.mlp)
    g = g / ctx.rows
    if state.accumulated is not None:  # the micro-steps' gradients, summed in the state
        g = g + state.accumulated
    return loss / ctx.rows, g


def accumulate_gradient(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context
                        ) -> tuple[TrainState, jax.Array]:
    """A micro-step of accumulation: this device's gradient added to ``state.accumulated``,
    nothing sent; the strategy's ``step`` adds the last one, sends the sum once, restarts it."""
    loss, g = jax.value_and_grad(loss_sum)(state.params, x, y, ctx.mlp)
    return state._replace(accumulated=state.accumulated + g / ctx.rows), loss / ctx.rows


def _update(state: TrainState, g: jax.Array, **extra) -> TrainState:
    w, v = momentum_update(state.params, state.momentum, g, TRAIN_LR, BETA)
    return _next(state, params=w, momentum=v, gradient=g, **extra)


def _next(state: TrainState, **parts) -> TrainState:
    if state.accumulated is not None:
        parts["accumulated"] = jnp.zeros_like(state.accumulated)
    return state._replace(**parts)


def _my_slice(full, ctx: Context):
    size = ctx.n // ctx.p
    return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(ctx.axis) * size, size)


def data_parallel(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = _local_gradient(state, x, y, ctx)
    g = jax.lax.psum(g_local, ctx.axis)  # all-reduce: every device the whole sum
    return _update(state, g), StepInfo(loss, g, g_local)


def _sliced_update(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """ZeRO-1 and ZeRO-2: the same bytes as data parallelism, cut in two halves."""
    loss, g_local = _local_gradient(state, x, y, ctx)
    g = jax.lax.psum_scatter(g_local, ctx.axis, tiled=True)  # my slice of the sum
    w, v = momentum_update(_my_slice(state.params, ctx), state.momentum, g, TRAIN_LR, BETA)
    w = jax.lax.all_gather(w, ctx.axis, tiled=True)  # every device the whole new w
    return state._replace(params=w, momentum=v), StepInfo(loss, g, g_local)


def zero1(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """Optimizer state in slices; the whole local gradient is kept."""
    state, info = _sliced_update(state, x, y, ctx)
    return _next(state, gradient=info.local), info


def zero2(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """Optimizer state and the kept gradient in slices: only this device's slice of the sum."""
    state, info = _sliced_update(state, x, y, ctx)
    return _next(state, gradient=info.used), info


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
    return _update(state, g), StepInfo(loss, g, None)


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
    return _update(state, g), StepInfo(loss, g, None)


def _compressed(reduce: Callable[[jax.Array, str, int], jax.Array]) -> Callable[..., Step]:
    def step(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
        loss, g_local = _local_gradient(state, x, y, ctx)
        g = reduce(g_local, ctx.axis, ctx.p)
        return _update(state, g), StepInfo(loss, g, g_local)

    return step


def topk(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = _local_gradient(state, x, y, ctx)
    _, kept, indices = compression.topk_select(g_local, ctx.k)
    g = compression.sparse_all_gather(kept, indices, ctx.n, ctx.axis)
    return _update(state, g), StepInfo(loss, g, g_local)


def topk_ef(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = _local_gradient(state, x, y, ctx)
    acc = g_local + state.residual  # the gradient plus what was not sent before
    sent, kept, indices = compression.topk_select(acc, ctx.k)
    g = compression.sparse_all_gather(kept, indices, ctx.n, ctx.axis)
    return _update(state, g, residual=acc - sent), StepInfo(loss, g, g_local)


def powersgd(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = _local_gradient(state, x, y, ctx)
    acc = g_local + state.residual
    layer, hidden = unflatten(acc, ctx.mlp), ctx.mlp.hidden
    w1, q1 = compression.powersgd_round(layer["w1"], state.warm_start[0], ctx.axis)
    w2, q2 = compression.powersgd_round(layer["w2"], state.warm_start[1], ctx.axis)
    biases = jax.lax.psum(jnp.concatenate([layer["b1"], layer["b2"]]), ctx.axis)
    padding = jnp.zeros(ctx.n - ctx.mlp.n_params, acc.dtype)
    g = jnp.concatenate([w1.ravel(), biases[:hidden], w2.ravel(), biases[hidden:], padding])
    mine = jnp.concatenate(  # this device's share of what was sent
        [w1.ravel() / ctx.p, layer["b1"], w2.ravel() / ctx.p, layer["b2"], padding])
    state = _update(state, g, residual=acc - mine, warm_start=(q1, q2))
    return state, StepInfo(loss, g, g_local)


def local_sgd(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """One local step on this device's rows alone; nothing sent (averaging: its own program)."""
    loss, g = jax.value_and_grad(loss_sum)(state.params, x, y, ctx.mlp)
    g = g / (ctx.rows // ctx.p)  # the mean over this device's rows
    return _update(state, g), StepInfo(loss / ctx.rows, g, None)


def local_sgd_bytes(nbytes: float, p: int, steps: int, local_steps: int) -> float:
    """Bytes one device sends over ``steps`` steps of local SGD averaging every ``local_steps``:
    one ring all-reduce (``pmean``) of the ``nbytes`` parameters per whole round of H steps, each
    ``2(p−1)/p · nbytes`` (a last round cut short is not averaged, as in ``train``).

    Examples:
        >>> local_sgd_bytes(4096, 4, steps=100, local_steps=8)  # 12 averagings of 6 KiB
        73728.0
    """
    return (steps // local_steps) * bytes_sent("all_reduce", "ring", nbytes, Topology(1, p))


def _residual(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
    return {"residual": place(mesh, ctx, np.zeros_like(w0), "own")}


def _powersgd_state(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
    rng = np.random.default_rng(0)
    cols = [shape[1] for _, shape in ctx.mlp.layers if len(shape) == 2]
    start = tuple(place(mesh, ctx, rng.normal(size=(c, POWERSGD_RANK)).astype(np.float32),
                        "replicated") for c in cols)
    return {**_residual(w0, mesh, ctx), "warm_start": start}


_WHOLE = _init("replicated", "replicated", "replicated")
_SLICES = _init("sliced", "sliced", "sliced")

STRATEGY_STEPS: dict[str, Strategy] = {
    "data_parallel": Strategy(_WHOLE, data_parallel),
    "zero1": Strategy(_init("replicated", "sliced", "own"), zero1),
    "zero2": Strategy(_init("replicated", "sliced", "sliced"), zero2),
    "zero3": Strategy(_init("sliced", "sliced", "sliced", layout=layer_order), zero3),
    "zero3_regather": Strategy(_SLICES, zero3_regather),
    "bf16": Strategy(_WHOLE, _compressed(compression.bf16_all_reduce)),
    "int8": Strategy(_WHOLE, _compressed(compression.int8_all_reduce)),
    "topk": Strategy(_WHOLE, topk),
    "topk_ef": Strategy(_init("replicated", "replicated", "replicated", _residual), topk_ef),
    "powersgd": Strategy(_init("replicated", "replicated", "replicated", _powersgd_state),
                         powersgd),
    "local_sgd": Strategy(_init("own", "own", "own"), local_sgd),
}
STRATEGIES = tuple(STRATEGY_STEPS)
# the strategies whose step starts from a whole local gradient, which accumulation sums
ACCUMULATING = tuple(s for s in STRATEGIES if s not in ("zero3", "zero3_regather", "local_sgd"))
