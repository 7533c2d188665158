"""The optimizer a strategy's inner step applies, shaped like optax's: ``init`` and ``update``
on a state.

``init(w0)`` gives the optimizer's state for the flat parameters ``w0`` (NumPy arrays, any
pytree: the heavy-ball velocity here, AdamW's two moments and a count later); a strategy places
each array as it places its parameters. ``update(g, state, w)`` takes one step, elementwise, so it
runs as well on a device's slice (the sliced ZeRO steps) as on the whole vector, and returns the
new parameters and the new state (optax returns the updates and leaves their application to
``apply_updates``; returning ``w`` itself keeps the course's ``w − lr · v`` bit for bit).

Part five's optimizers are optax's, wrapped (``from_optax``): AdamW for the inner steps
(``adamw``) and, for DiLoCo's outer step, SGD with Nesterov momentum (``outer_nesterov``), plain
SGD (``outer_sgd``, the ablation without momentum) or the plain average (``outer_average``, local
SGD's outer step). ``nesterov_multiplier`` is how far the Nesterov outer step moves per sync
when the outer gradient stays the same.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np
import optax

from course_utils.collectives.kernels import momentum_update
from course_utils.constants import BETA
from course_utils.validate import positive_int

# the learning rate of every run of part three (momentum BETA as everywhere in the course)
TRAIN_LR = 0.02
# part five's inner AdamW learning rate (fixed by the protocol of ``results.diloco.PROTOCOL``)
ADAMW_LR = 3e-3
# DiLoCo's outer step: the paper's learning rate and Nesterov momentum (Douillard et al. 2023)
OUTER_LR, OUTER_MOMENTUM = 0.7, 0.9
# the ablation "momentum at plain averaging's steady step": lr / (1 − μ) = 1 (lr = 1 − μ)
UNIT_STEP_LR = 0.1


class Optimizer(NamedTuple):
    """Two pure functions, as ``optax.GradientTransformation``.

    Attributes:
        init: ``init(w0) -> state``: the optimizer's state (a pytree of NumPy arrays).
        update: ``update(g, state, w) -> (w, state)``: one step from the gradient ``g``.
    """

    init: Callable[[np.ndarray], Any]
    update: Callable[[Any, Any, Any], tuple[Any, Any]]


def momentum(lr: float = TRAIN_LR, beta: float = BETA, *, nesterov: bool = False) -> Optimizer:
    """Heavy-ball momentum, ``v ← βv + g``, ``w ← w − lr · v`` (the course's rule,
    ``kernels.momentum_update``); with ``nesterov`` the step looks ahead, ``w ← w − lr(g + βv)``.

    Examples:
        >>> sgd = momentum(0.5, 0.9)
        >>> w, v = sgd.update(np.float32(1.0), sgd.init(np.zeros(1, np.float32)), np.ones(1))
        >>> w.tolist(), v.tolist()
        ([0.5], [1.0])
        >>> look_ahead = momentum(0.5, 0.9, nesterov=True)
        >>> look_ahead.update(np.float32(1.0), np.zeros(1), np.ones(1))[0].tolist()  # 1 − 0.5·1.9
        [0.050000000000000044]
    """

    def init(w0: np.ndarray) -> np.ndarray:
        return np.zeros_like(w0)

    def update(g, v, w):
        if not nesterov:
            return momentum_update(w, v, g, lr, beta)
        v = beta * v + g
        return w - lr * (g + beta * v), v

    return Optimizer(init, update)


MOMENTUM = momentum()  # what every strategy of parts three and four applies


def from_optax(transformation: optax.GradientTransformation) -> Optimizer:
    """An ``optax.GradientTransformation`` as the course's ``Optimizer``: ``update`` is optax's
    update followed by ``optax.apply_updates``.

    Examples:
        >>> sgd = from_optax(optax.sgd(0.5))
        >>> sgd.update(np.ones(1, np.float32), sgd.init(np.zeros(1)), np.ones(1))[0].tolist()
        [0.5]
    """

    def update(g, state, w):
        updates, state = transformation.update(g, state, w)
        return optax.apply_updates(w, updates), state

    return Optimizer(transformation.init, update)


def warmup_cosine(peak_lr: float, steps: int, warmup: int, end_fraction: float = 0.1
                  ) -> optax.Schedule:
    """The learning rate of step t (0-based, AdamW's count): from 0 up to ``peak_lr`` in
    ``warmup`` steps, linearly, then down a cosine to ``end_fraction`` · ``peak_lr`` at
    ``steps`` (the shape of the DiLoCo paper's inner schedule: warm-up, then cosine decay).

    Examples:
        >>> lr = warmup_cosine(1e-3, steps=100, warmup=10)
        >>> [round(float(lr(t)), 6) for t in (0, 5, 10, 55, 100)]
        [0.0, 0.0005, 0.001, 0.00055, 0.0001]
        >>> warmup_cosine(1e-3, steps=10, warmup=10)
        Traceback (most recent call last):
        ...
        ValueError: warmup (10 steps) must be shorter than the run (10 steps)
    """
    if not 0 <= warmup < steps:
        raise ValueError(f"warmup ({warmup} steps) must be shorter than the run ({steps} steps)")
    return optax.warmup_cosine_decay_schedule(0.0, peak_lr, warmup, steps,
                                              end_value=end_fraction * peak_lr)


def adamw(lr: float | optax.Schedule = ADAMW_LR, *, b1: float = 0.9, b2: float = 0.999,
          eps: float = 1e-8, weight_decay: float = 1e-4) -> Optimizer:
    """AdamW (``optax.adamw``, its defaults): two moments and a step count as its state;
    ``lr`` a number or a schedule of the count (``warmup_cosine``).

    Examples:
        >>> opt = adamw(0.01)
        >>> w, state = opt.update(np.float32([2.0]), opt.init(np.ones(1, np.float32)),
        ...                       np.ones(1, np.float32))
        >>> round(float(w[0]), 6)  # the first step lr · sign(g), and the decay lr · 1e-4 · w
        0.989999
    """
    return from_optax(optax.adamw(lr, b1=b1, b2=b2, eps=eps, weight_decay=weight_decay))


# part five's inner set-up on the stream (the DiLoCo paper's shape, arXiv:2311.08105): warm-up
# over this share of the run, then a cosine decay to a tenth; AdamW's weight decay the paper's
WARMUP_SHARE, PAPER_WEIGHT_DECAY = 0.05, 0.1


def scheduled_adamw(steps: int, lr: float = ADAMW_LR, *, offset: int = 0) -> Optimizer:
    """Part five's inner optimizer on the stream, the same for every strategy: AdamW with weight
    decay ``PAPER_WEIGHT_DECAY`` under ``warmup_cosine`` over a run of ``steps`` (warm-up over
    ``WARMUP_SHARE`` of it). ``offset``: the steps a warm start's run already took, so the
    schedule goes on where it stopped (its moments start afresh).

    Examples:
        >>> opt = scheduled_adamw(100, offset=60)  # past the warm-up: a step moves w
        >>> w, _ = opt.update(np.float32([2.0]), opt.init(np.ones(1, np.float32)),
        ...                   np.ones(1, np.float32))
        >>> bool(w[0] < 1)
        True
    """
    schedule = warmup_cosine(lr, positive_int("steps", steps), round(WARMUP_SHARE * steps))
    if not 0 <= offset < steps:
        raise ValueError(f"offset ({offset}) must lie in the run of {steps} steps")
    return adamw(lambda count: schedule(count + offset), weight_decay=PAPER_WEIGHT_DECAY)


def outer_nesterov(lr: float = OUTER_LR, momentum: float = OUTER_MOMENTUM) -> Optimizer:
    """DiLoCo's outer optimizer: SGD with Nesterov momentum on the outer gradient Δ (the
    parameters at the last sync minus the replicas' mean), ``optax.sgd(lr, momentum,
    nesterov=True)``: ``m ← μm + Δ``, ``w ← w − lr(Δ + μm)``.

    Examples:
        >>> outer = outer_nesterov()
        >>> w, m = outer.update(np.float32([1.0]), outer.init(np.zeros(1, np.float32)),
        ...                     np.zeros(1, np.float32))
        >>> round(float(w[0]), 6), round(float(m[0].trace[0]), 6)  # −0.7 · (1 + 0.9 · 1)
        (-1.33, 1.0)
    """
    return from_optax(optax.sgd(lr, momentum, nesterov=True))


def outer_sgd(lr: float = OUTER_LR) -> Optimizer:
    """Plain SGD as the outer optimizer, no momentum: ``w ← w − lr · Δ`` (DiLoCo's outer step
    without its momentum); it keeps no state.

    Examples:
        >>> sgd = outer_sgd()
        >>> round(float(sgd.update(np.float32([1.0]), sgd.init(np.zeros(1)), np.zeros(1))[0][0]), 6)
        -0.7
    """
    return from_optax(optax.sgd(lr))


def nesterov_multiplier(syncs: int, lr: float = OUTER_LR, momentum: float = OUTER_MOMENTUM, *,
                        mean: bool = True) -> float:
    """How far ``outer_nesterov(lr, momentum)`` moves the synced parameters, in units of the
    outer gradient Δ, when every outer gradient so far was the same Δ. After j outer steps the
    momentum is m_j = Δ(1 − μ^j)/(1 − μ), and the j-th step moves lr(Δ + μ m_j) =
    lr(1 + μ(1 − μ^j)/(1 − μ))Δ: lr(1 + μ)Δ first, lr/(1 − μ)Δ in the limit. ``mean``: the total
    move over the first ``syncs`` steps ÷ (``syncs`` · Δ) =
    lr(k/(1 − μ) − μ²(1 − μ^k)/(1 − μ)²)/k for k = ``syncs``; else the ``syncs``-th step's
    move ÷ Δ. (Plain averaging, lr 1 without momentum: 1 either way.)

    Examples:
        >>> round(nesterov_multiplier(1), 6), round(nesterov_multiplier(1, mean=False), 6)
        (1.33, 1.33)
        >>> round(nesterov_multiplier(8, mean=False), 2), round(nesterov_multiplier(8), 2)
        (4.29, 2.96)
        >>> round(nesterov_multiplier(10_000, mean=False), 6)  # the limit lr / (1 − μ)
        7.0
        >>> outer, k = outer_nesterov(), 4  # the same by optax's update, k steps of Δ = 1
        >>> w, state = np.zeros(1, np.float32), outer.init(np.zeros(1, np.float32))
        >>> for _ in range(k):
        ...     w, state = outer.update(np.ones(1, np.float32), state, w)
        >>> round(float(-w[0]) / k, 5), round(nesterov_multiplier(k), 5)
        (2.12522, 2.12522)
        >>> nesterov_multiplier(0)
        Traceback (most recent call last):
        ...
        ValueError: syncs must be at least 1, got 0
    """
    if syncs < 1:
        raise ValueError(f"syncs must be at least 1, got {syncs}")
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    mu, k = momentum, syncs
    if not mean:
        return lr * (1 + mu * (1 - mu**k) / (1 - mu))
    return lr * (k / (1 - mu) - mu**2 * (1 - mu**k) / (1 - mu) ** 2) / k


def outer_average() -> Optimizer:
    """Local SGD's outer step as an outer optimizer: SGD with learning rate 1 and no momentum,
    ``w ← w − Δ``, which is the replicas' mean (up to rounding); it keeps no state.

    Examples:
        >>> average = outer_average()
        >>> average.update(np.float32([0.25]), average.init(np.ones(1)), np.ones(1))[0].tolist()
        [0.75]
    """
    return from_optax(optax.sgd(1.0))
