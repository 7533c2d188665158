"""Local SGD: every device steps on its own rows, nothing sent; every H steps (``train``'s
``local_steps``) the outer step averages the parameters (``pmean``), which is the whole of its
outer update: the mean itself, not ``w0 − (w0 − mean)``.

==================  ==================================================  ==========================
strategy            communication                                       the state per device
==================  ==================================================  ==========================
local_sgd           nothing; every H steps parameters averaged (pmean)  w, g, v whole (its own)
==================  ==================================================  ==========================
"""

from __future__ import annotations

import jax

from course_utils.models.cost_model import Topology, bytes_sent
from course_utils.models.link_traffic import F32, Traffic, TrafficSettings, ring_traffic
from course_utils.problems.classification import loss_sum
from course_utils.training.state import Context, Step, StepInfo, TrainState, apply_update


def local_sgd(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """One local step on this device's rows alone; nothing sent (the average: ``average``)."""
    loss, g = jax.value_and_grad(loss_sum)(state.params, x, y, ctx.mlp)
    g = g / (ctx.rows // ctx.p)  # the mean over this device's rows
    return apply_update(state, g, ctx), StepInfo(loss / ctx.rows, g, None)


def average(state: TrainState, ctx: Context) -> TrainState:
    """Local SGD's outer step, one device's view: its parameters replaced by the mean over the
    devices (one all-reduce); the optimizer's state stays each device's own."""
    return state._replace(params=jax.lax.pmean(state.params, ctx.axis))


def local_sgd_bytes(nbytes: float, p: int, steps: int, local_steps: int) -> float:
    """Bytes one device sends over ``steps`` steps of local SGD averaging every ``local_steps``:
    one ring all-reduce (``pmean``) of the ``nbytes`` parameters per whole round of H steps, each
    ``2(p−1)/p · nbytes`` (a last round cut short is not averaged, as in ``train``).

    Examples:
        >>> local_sgd_bytes(4096, 4, steps=100, local_steps=8)  # 12 averagings of 6 KiB
        73728.0
    """
    return (steps // local_steps) * bytes_sent("all_reduce", "ring", nbytes, Topology(1, p))


def every_h_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """An all-reduce of the parameters every ``local_steps`` steps (per step: a 1/H share)."""
    every = ring_traffic("all_reduce", F32 * n, topology)
    return Traffic(every.link_bytes / settings.local_steps, every.messages / settings.local_steps)
