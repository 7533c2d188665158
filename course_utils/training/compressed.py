"""The compression schemes: data parallelism's step with fewer bits sent.

==================  ==================================================  ==========================
strategy            communication per step                              the state per device
==================  ==================================================  ==========================
bf16                16-bit ring reduce-scatter + all-gather (as u16)    w, g, v whole
int8                all-to-all + all-gather of int8 and scales          w, g, v whole
topk                all-gather of the k largest entries and indices     w, g, v whole
topk_ef             topk of g + residual; the rest is the next residual w, g, v, residual whole
powersgd            rank-r all-reduces of each matrix, with residual    w, g, v, residual whole
==================  ==================================================  ==========================
"""

from __future__ import annotations

import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from course_utils.collectives import compression
from course_utils.constants import SCALE_BUCKET
from course_utils.models.cost_model import Topology
from course_utils.models.link_traffic import (
    F32,
    Traffic,
    TrafficSettings,
    all_to_all_traffic,
    ring_traffic,
    total_traffic,
)
from course_utils.problems.classification import unflatten
from course_utils.training.state import (
    Context,
    Step,
    StepInfo,
    TrainState,
    apply_update,
    local_gradient,
    place,
)

# the rank of PowerSGD's approximation of each weight matrix
POWERSGD_RANK = 1


def compressed(reduce: Callable[[jax.Array, str, int], jax.Array]) -> Callable[..., Step]:
    """Data parallelism's step with the all-reduce ``reduce(g, axis, p)``."""

    def step(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
        loss, g_local = local_gradient(state, x, y, ctx)
        g = reduce(g_local, ctx.axis, ctx.p)
        return apply_update(state, g, ctx), StepInfo(loss, g, g_local)

    return step


def topk(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = local_gradient(state, x, y, ctx)
    _, kept, indices = compression.topk_select(g_local, ctx.k)
    g = compression.sparse_all_gather(kept, indices, ctx.n, ctx.axis)
    return apply_update(state, g, ctx), StepInfo(loss, g, g_local)


def topk_ef(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = local_gradient(state, x, y, ctx)
    acc = g_local + state.residual  # the gradient plus what was not sent before
    sent, kept, indices = compression.topk_select(acc, ctx.k)
    g = compression.sparse_all_gather(kept, indices, ctx.n, ctx.axis)
    return apply_update(state, g, ctx, residual=acc - sent), StepInfo(loss, g, g_local)


def powersgd(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    loss, g_local = local_gradient(state, x, y, ctx)
    acc = g_local + state.residual
    layer, hidden = unflatten(acc, ctx.mlp), ctx.mlp.hidden
    w1, q1 = compression.powersgd_round(layer["w1"], state.warm_start[0], ctx.axis)
    w2, q2 = compression.powersgd_round(layer["w2"], state.warm_start[1], ctx.axis)
    biases = jax.lax.psum(jnp.concatenate([layer["b1"], layer["b2"]]), ctx.axis)
    padding = jnp.zeros(ctx.n - ctx.mlp.n_params, acc.dtype)
    g = jnp.concatenate([w1.ravel(), biases[:hidden], w2.ravel(), biases[hidden:], padding])
    mine = jnp.concatenate(  # this device's share of what was sent
        [w1.ravel() / ctx.p, layer["b1"], w2.ravel() / ctx.p, layer["b2"], padding])
    state = apply_update(state, g, ctx, residual=acc - mine, warm_start=(q1, q2))
    return state, StepInfo(loss, g, g_local)


def residual(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
    """Error feedback's residual: zeros, every device its own."""
    return {"residual": place(mesh, ctx, np.zeros_like(w0), "own")}


def powersgd_state(w0: np.ndarray, mesh: Mesh, ctx: Context) -> dict:
    """The residual and PowerSGD's warm start, one random right factor per weight matrix."""
    rng = np.random.default_rng(0)
    cols = [shape[1] for _, shape in ctx.mlp.layers if len(shape) == 2]
    start = tuple(place(mesh, ctx, rng.normal(size=(c, POWERSGD_RANK)).astype(np.float32),
                        "replicated") for c in cols)
    return {**residual(w0, mesh, ctx), "warm_start": start}


def bf16_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """An all-reduce of 2n bytes."""
    return ring_traffic("all_reduce", F32 * n / 2, topology)


def int8_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """An all-to-all and an all-gather of n bytes of codes, each with a float32 scale per
    ``SCALE_BUCKET`` values (step 15's scheme)."""
    codes = n + F32 * math.ceil(n / SCALE_BUCKET)  # int8 values and their scales
    return total_traffic(all_to_all_traffic(codes, topology), ring_traffic("all_gather", codes,
                                                                           topology))


def topk_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """An all-gather of k values (float32) and k indices per device."""
    k = settings.topk
    if not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"topk must be a whole number from 1 to n = {n}, got {k!r}")
    return ring_traffic("all_gather", topology.ranks * k * (F32 + settings.index_bytes),
                        topology)


def powersgd_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """Per weight matrix of shape (a, b) two all-reduces, of a · r and of b · r float32 values;
    the biases' gradient (``dense`` values) all-reduced whole."""
    matrices, dense = settings.matrices, settings.dense
    weights = sum(a * b for a, b in matrices)
    if not matrices or weights > n:
        raise ValueError("powersgd needs the weight matrices' shapes (matrices=[(a, b), "
                         f"...]) with at most n = {n} values in all; got {list(matrices)}")
    dense = n - weights if dense is None else dense
    if not isinstance(dense, int) or not 0 <= dense <= n - weights:
        raise ValueError(f"dense must be a whole number from 0 to {n - weights} (the values "
                         f"outside the matrices), got {dense!r}")
    factors = [ring_traffic("all_reduce", F32 * side * settings.rank, topology)
               for a, b in matrices for side in (a, b)]
    return total_traffic(*factors, ring_traffic("all_reduce", F32 * dense, topology))
