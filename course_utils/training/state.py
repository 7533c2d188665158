"""What every strategy shares: the ``Context`` a step reads, the ``TrainState`` it keeps, the
``StepInfo`` it reports, its two functions (``Strategy``), where each part of the state is
placed (``state_specs``, ``place``, ``placed_init``) and the pieces every step is built from
(this device's gradient, the optimizer's update, a micro-step of accumulation). Steps are
compiled with JAX's check of what varies on (``check_vma``): a shared value whose gradient is
this device's own enters as ``own_copy``; a sum gathered from the devices' slices is
declared the same on every device (``all_gather(..., to="invarying")``).

Placements are the arrays' own: each field of the state is placed with a ``PartitionSpec`` over
the mesh's named axis — ``P()`` replicated, ``P(axis)`` sliced (device i holds slice i), or
``P(axis)`` over p stacked copies ("own": every device its own whole copy) — so memory per
device is the sum over the state's shards, and a two-axis mesh (hosts × devices, HSDP: sliced
over ``devices``, replicated over ``hosts``) is a matter of other specs, not another state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.problems.classification import MLP, PART_THREE_MLP, loss_sum
from course_utils.training.optimizers import MOMENTUM, Optimizer


@dataclass(frozen=True)
class Context:
    """What a step needs to know besides its arrays.

    Attributes:
        axis: the mesh axis the data are split over (on a two-axis mesh, the one the state's
            ``sliced`` and ``own`` forms run along, ``Parts.axis``: ``"host"`` for DiLoCo's
            replicas, ``"device"`` for HSDP's slices).
        p: devices along it (replicas, for ``"host"``).
        n: length of the flat parameter vector.
        rows: rows of one optimizer step's global batch (the whole data set by default).
        k: entries top-k sends per device.
        mlp: the task's model (part three's unless given).
        optimizer: what the inner step applies (the strategy's, ``StrategySpec.optimizer``).
    """

    axis: str
    p: int
    n: int
    rows: int
    k: int
    mlp: MLP = PART_THREE_MLP
    optimizer: Optimizer = MOMENTUM


class TrainState(NamedTuple):
    """What a strategy keeps between steps; absent parts are ``None``. ``MEMORY_PART`` says
    which part of the memory per device each counts as.

    Attributes:
        params: the flat parameters w.
        momentum: the optimizer's state (the heavy-ball velocity v; any pytree).
        gradient: the gradient kept from the last step.
        residual: error feedback: what was not sent yet.
        warm_start: PowerSGD's right factors, one per weight matrix.
        accumulated: the local gradient summed over this step's micro-steps so far (only with
            gradient accumulation).
        outer: what a strategy with an outer optimizer keeps for its outer step: the
            parameters at the last sync, then the outer optimizer's state (any pytree).
    """

    params: jax.Array
    momentum: Any
    gradient: jax.Array | None = None
    residual: jax.Array | None = None
    warm_start: tuple[jax.Array, ...] | None = None
    accumulated: jax.Array | None = None
    outer: Any = None


# which part of the memory per device each field of the state counts as
MEMORY_PART = {"params": "parameters", "momentum": "optimizer", "gradient": "gradients",
               "residual": "optimizer", "warm_start": "optimizer", "accumulated": "gradients",
               "outer": "optimizer"}


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
    """A training strategy's two pure functions, as ``optax.GradientTransformation``.

    Attributes:
        init: ``init(params, mesh, ctx) -> TrainState``: the state, placed, from the flat
            initial parameters (NumPy, length n).
        step: ``step(state, x, y, ctx) -> (TrainState, StepInfo)``: one device's step inside
            ``shard_map``, on its rows ``x``, ``y``.
    """

    init: Callable[[np.ndarray, Mesh, Context], TrainState]
    step: Callable[[TrainState, jax.Array, jax.Array, Context], Step]


def state_specs(state: TrainState) -> TrainState:
    """The ``PartitionSpec`` of every array of ``state``, read from the arrays themselves.

    Examples:
        >>> from course_utils.devices.setup import data_mesh
        >>> from course_utils.problems.classification import init_params, padded_size
        >>> from course_utils.training.strategies import STRATEGY_STEPS
        >>> mesh = data_mesh()
        >>> n = padded_size(mesh.size)
        >>> ctx = Context("data", mesh.size, n, rows=15360, k=1)
        >>> state = STRATEGY_STEPS["zero2"].init(init_params(n), mesh, ctx)
        >>> specs = state_specs(state)  # ZeRO-2: w whole, v and the kept gradient in slices
        >>> (specs.params, specs.momentum, specs.gradient) == (P(), P("data"), P("data"))
        True
        >>> specs.residual is None and specs.warm_start is None
        True
    """
    return jax.tree.map(lambda array: array.sharding.spec, state)



def place(mesh: Mesh, ctx: Context, value: np.ndarray, form: str) -> jax.Array:
    """``value`` on ``mesh`` as ``form``: ``replicated``, ``sliced`` or ``own`` (p copies); a
    scalar (an optimizer's count) is replicated whatever the form."""
    if np.ndim(value) == 0:
        form = "replicated"
    if form == "own":
        value = np.tile(value, ctx.p)
    return jax.device_put(value, NamedSharding(mesh, P() if form == "replicated" else P(ctx.axis)))


def placed_init(params: str, optimizer: str, gradient: str | None,
                extra: Callable | None = None, *,
                layout: Callable[[int, int, MLP], np.ndarray] | None = None) -> Callable:
    """An ``init`` placing w, the optimizer's state (``ctx.optimizer.init``) and the kept
    gradient (zeros; none if ``gradient`` is ``None``) as the forms given, then the parts
    ``extra(w0, mesh, ctx)`` returns; w in the order ``layout(n, p, mlp)`` if given."""

    def init(w0: np.ndarray, mesh: Mesh, ctx: Context) -> TrainState:
        if layout is not None:
            w0 = w0[layout(ctx.n, ctx.p, ctx.mlp)]
        state = TrainState(
            place(mesh, ctx, w0, params),
            jax.tree.map(lambda a: place(mesh, ctx, a, optimizer), ctx.optimizer.init(w0)),
            None if gradient is None else place(mesh, ctx, np.zeros_like(w0), gradient))
        return state if extra is None else state._replace(**extra(w0, mesh, ctx))

    return init


def own_copy(w: jax.Array, axes: str | tuple[str, ...]) -> jax.Array:
    """``w``, the same on every device along ``axes``, as this device's own copy (varying, for
    JAX's check of what varies, ``check_vma``): its gradient is then this device's alone, where
    that of a value the devices share would be summed over them. It compiles to nothing."""
    return jax.lax.pcast(w, axes, to="varying")


def local_gradient(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context
                   ) -> tuple[jax.Array, jax.Array]:
    """This device's share of the mean loss and of its gradient (plus the micro-steps'), of
    the replicated w (every caller's)."""
    loss, g = jax.value_and_grad(loss_sum)(own_copy(state.params, ctx.axis), x, y, ctx.mlp)
    g = g / ctx.rows
    if state.accumulated is not None:  # the micro-steps' gradients, summed in the state
        g = g + state.accumulated
    return loss / ctx.rows, g


def accumulate_gradient(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context
                        ) -> tuple[TrainState, jax.Array]:
    """A micro-step of accumulation: this device's gradient added to ``state.accumulated``,
    nothing sent; the strategy's ``step`` adds the last one, sends the sum once, restarts it."""
    loss, g = jax.value_and_grad(loss_sum)(own_copy(state.params, ctx.axis), x, y, ctx.mlp)
    return state._replace(accumulated=state.accumulated + g / ctx.rows), loss / ctx.rows


def apply_update(state: TrainState, g: jax.Array, ctx: Context, **parts) -> TrainState:
    """The optimizer's step from ``g`` on the whole state (the gradient kept), and ``parts``."""
    w, v = ctx.optimizer.update(g, state.momentum, state.params)
    return next_state(state, params=w, momentum=v, gradient=g, **parts)


def next_state(state: TrainState, **parts) -> TrainState:
    """``state`` with ``parts`` replaced, the accumulated gradient (if any) restarted."""
    if state.accumulated is not None:
        parts["accumulated"] = jnp.zeros_like(state.accumulated)
    return state._replace(**parts)


def my_slice(full: jax.Array, ctx: Context) -> jax.Array:
    """This device's slice of a whole vector (n/p values, in the mesh's order)."""
    size = ctx.n // ctx.p
    return jax.lax.dynamic_slice_in_dim(full, jax.lax.axis_index(ctx.axis) * size, size)
