"""``train``: one small data-parallel training run under any strategy of part three.

Every strategy runs the same task (``course_utils.problems.classification``) from the same initial
parameters and data; ``train`` compiles the strategy's step once, reads the collectives of the
compiled program (``bytes_per_step``, the ring payload per device, ``ir.ring_payload``), runs
``steps`` steps and reads what each device holds from the shards of the arrays themselves.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.devices.setup import axis_of
from course_utils.observe.ir import hlo_collectives, ring_payload
from course_utils.observe.placement import shard_shapes, values_per_device
from course_utils.problems.classification import (
    classification_task,
    init_params,
    loss_sum,
    padded_size,
)
from course_utils.training.strategies import STRATEGIES, STRATEGY_STEPS, Context, Strategy
from course_utils.validate import positive_int

# what each state entry counts as in the memory per device
_KIND = {"w": "parameters", "v": "optimizer"}


def _spec(form: str, axis: str) -> P:
    return P() if form == "replicated" else P(axis)


def _initial_state(strategy: Strategy, p: int, n: int, seed: int) -> dict:
    w0 = init_params(n, seed)
    state = {}
    for name, value in (("w", w0), ("v", np.zeros_like(w0))):
        form = strategy.forms[name]
        state[name] = (np.tile(value, p) if form == "own" else value, form)  # own: p copies
    return {**state, **strategy.extra_state(p, n)}


def _check(mesh, strategy, steps, seed, local_steps, topk_fraction, skewed) -> None:
    if not isinstance(mesh, Mesh) or len(mesh.axis_names) != 1:
        raise ValueError("train needs a one-axis mesh: pass data_mesh()")
    if strategy not in STRATEGY_STEPS:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(STRATEGIES)}")
    positive_int("steps", steps)
    positive_int("seed", seed, low=0)
    positive_int("local_steps", local_steps)
    if local_steps != 1 and strategy != "local_sgd":
        raise ValueError(f"local_steps applies to local_sgd only; {strategy} averages every step")
    if isinstance(topk_fraction, bool) or not isinstance(topk_fraction, (int, float)) or not (
            0 < topk_fraction <= 1):
        raise ValueError(f"topk_fraction must be a number in (0, 1], got {topk_fraction!r}")
    if not isinstance(skewed, bool):
        raise ValueError(f"skewed must be True or False, got {skewed!r}")


def train(mesh: Mesh, strategy: str, *, steps: int, seed: int = 0, local_steps: int = 1,
          topk_fraction: float = 0.01, skewed: bool = False) -> dict:
    """Train the task's MLP for ``steps`` steps with ``strategy`` on ``mesh``.

    Args:
        mesh: a one-axis mesh (``data_mesh()``); its size p divides the data's rows.
        strategy: one of ``STRATEGIES``.
        steps: optimizer steps.
        seed: seed of the data and the initial parameters.
        local_steps: H, for ``local_sgd``: parameters are averaged after every H-th step.
        topk_fraction: for ``topk`` and ``topk_ef``: each device sends this fraction of entries.
        skewed: shards ordered by label (each device sees mostly a few classes).

    Returns:
        A dict with ``loss`` (the mean training loss at each step, before its update; for
        local SGD, the mean over devices of each device's own model on its own rows),
        ``bytes_per_step`` (ring payload per device, from the compiled programs; for local SGD
        the averaging program's payload times the number of averagings, divided by ``steps``),
        ``state_bytes_per_device`` (the sum of ``memory``), ``memory`` (bytes of ``parameters``,
        ``gradients`` and ``optimizer`` state on one device, read from the shards; error-feedback
        residuals and PowerSGD's warm start count as optimizer state), ``gradient_error`` (per
        step, ‖g_used − g_exact‖ / ‖g_exact‖, or ``None`` where no local gradient is formed),
        ``cumulative_error`` (the same for the sums of both over the steps so far: error
        feedback keeps it small), ``final_loss`` (the mean loss of the final parameters on all
        the data), ``averaged_loss`` (local SGD: ``(step, loss)`` of the averaged parameters on
        all the data after each averaging; else ``None``),
        ``collectives`` (the step program's compiled collectives) and ``params`` (the final flat
        parameters, device 0's copy), ``shards`` (the shard shape on each device of every state
        entry and of the held gradient ``g``).
    """
    _check(mesh, strategy, steps, seed, local_steps, topk_fraction, skewed)
    axis, p = axis_of(mesh), mesh.size
    n, spec = padded_size(p), STRATEGY_STEPS[strategy]
    x, y = classification_task(seed, skewed=skewed)
    if len(y) % p:
        raise ValueError(f"{len(y)} rows do not split evenly across {p} devices")
    ctx = Context(axis, p, n, len(y), k=max(1, round(topk_fraction * n)))

    initial = _initial_state(spec, p, n, seed)
    specs = {name: _spec(form, axis) for name, (_, form) in initial.items()}
    state = {name: jax.device_put(value, NamedSharding(mesh, specs[name]))
             for name, (value, _) in initial.items()}
    data = (jax.device_put(x, NamedSharding(mesh, P(axis, None))),
            jax.device_put(y, NamedSharding(mesh, P(axis))))

    local_out = (P(axis),) if spec.forms_local else ()

    def body(state, x, y):
        new_state, loss, g_used, g_local = spec.body(state, x, y, ctx)
        return (new_state, loss[None], g_used, *((g_local,) if local_out else ()))

    step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(specs, P(axis, None), P(axis)),
                                 out_specs=(specs, P(axis), _spec(spec.used_form, axis),
                                            *local_out), check_vma=False))
    compiled = step.lower(state, *data).compile()
    collectives = hlo_collectives(compiled.as_text())
    payload = ring_payload(collectives, p)

    average = None
    if strategy == "local_sgd":
        average = jax.jit(jax.shard_map(lambda w: jax.lax.pmean(w, axis), mesh=mesh,
                                        in_specs=P(axis), out_specs=P(axis), check_vma=False))
        average = average.lower(state["w"]).compile()
        payload += ring_payload(hlo_collectives(average.as_text()), p) * (
            steps // local_steps) / steps

    losses, errors, averaged, sums = [], [], [], {"used": 0.0, "exact": 0.0}
    for t in range(steps):
        state, loss, g_used, *g_local = compiled(state, *data)
        losses.append(float(np.sum(loss)))  # reading the loss waits for the step to finish
        if g_local and strategy != "local_sgd":
            exact = np.asarray(g_local[0]).reshape(p, n).sum(axis=0)
            sums = {"used": sums["used"] + np.asarray(g_used), "exact": sums["exact"] + exact}
            errors.append((_relative_error(np.asarray(g_used), exact),
                           _relative_error(sums["used"], sums["exact"])))
        if average is not None and (t + 1) % local_steps == 0:
            state = {**state, "w": average(state["w"])}
            averaged.append((t + 1, float(_mean_loss(np.asarray(state["w"])[:n], x, y))))

    held = g_local[0] if spec.holds_local else g_used
    memory = {"parameters": 0, "gradients": _bytes(held), "optimizer": 0}
    for name, array in state.items():
        memory[_KIND.get(name, "optimizer")] += _bytes(array)
    params = np.asarray(state["w"])[:n]
    return {
        "loss": losses,
        "bytes_per_step": payload,
        "state_bytes_per_device": sum(memory.values()),
        "memory": memory,
        "gradient_error": [e for e, _ in errors] or None,
        "cumulative_error": [e for _, e in errors] or None,
        "final_loss": float(_mean_loss(params, x, y)),
        "collectives": collectives,
        "averaged_loss": averaged or None,
        "shards": {name: shard_shapes(array) for name, array in {**state, "g": held}.items()},
        "params": params,
    }


@jax.jit
def _mean_loss(w, x, y):
    return loss_sum(w, x, y) / len(y)


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _bytes(array: jax.Array) -> int:
    return values_per_device(array) * array.dtype.itemsize
