"""The optimizer a strategy's inner step applies, shaped like optax's: ``init`` and ``update``
on a state.

``init(w0)`` gives the optimizer's state for the flat parameters ``w0`` (NumPy arrays, any
pytree: the heavy-ball velocity here, AdamW's two moments and a count later); a strategy places
each array as it places its parameters. ``update(g, state, w)`` takes one step, elementwise, so it
runs as well on a device's slice (the sliced ZeRO steps) as on the whole vector, and returns the
new parameters and the new state (optax returns the updates and leaves their application to
``apply_updates``; returning ``w`` itself keeps the course's ``w − lr · v`` bit for bit).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from course_utils.collectives.kernels import momentum_update
from course_utils.constants import BETA

# the learning rate of every run of part three (momentum BETA as everywhere in the course)
TRAIN_LR = 0.02


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
