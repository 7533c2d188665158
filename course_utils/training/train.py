"""``train``: one small data-parallel training run under any strategy of part three.

Every strategy runs the same task (``course_utils.problems.classification``) from the same initial
parameters and data; ``train`` reads the strategy's description (``strategies.SPECS``), places its
state and compiles its programs once (``programs.build_programs``: its step, and its outer step if
it syncs every H steps, with the bytes they send, ``bytes_per_step``), runs ``steps`` steps and
reads what each device holds from the shards of the state's arrays themselves.

Part five's strategies (``StrategySpec.mesh_axes`` ``("host", "device")``) run on a mesh of
replicas (``diloco.replica_mesh``): the rows split over both axes, so that with ``skewed`` each
replica sees mostly a few classes, and the bytes one device sends across the replicas are read
apart (``TrainingRun.bytes_across_replicas``, and per sync ``bytes_per_sync_across_replicas``).
Streaming DiLoCo's overlap runs here in one process: the result of an outer step merges after
the inner step τ later exactly (``Sync.merge``), so its curves do not depend on timing.
"""

from __future__ import annotations

from functools import partial

import jax
import numpy as np
from jax.sharding import Mesh

from course_utils.observe.placement import shard_shapes, values_per_device
from course_utils.problems.classification import (
    MLP,
    PART_THREE_MLP,
    init_params,
    loss_sum,
    padded_size,
)
from course_utils.problems.stream import heldout_rows
from course_utils.training.batches import Batches, StreamBatches, split_task
from course_utils.training.optimizers import Optimizer
from course_utils.training.programs import axes, build_programs, initial_state
from course_utils.training.quantize import check_format
from course_utils.training.run import Memory, TrainingRun
from course_utils.training.state import MEMORY_PART, Context, TrainState
from course_utils.training.strategies import SPECS
from course_utils.training.streaming import check_streaming
from course_utils.validate import positive_int


def _trainable() -> list[str]:
    """The registered strategies ``train`` runs: all of them, each on its mesh."""
    return list(SPECS)


def _check_mesh(mesh, strategy) -> None:
    if strategy not in SPECS:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {', '.join(SPECS)}")
    axes = SPECS[strategy].mesh_axes
    if not isinstance(mesh, Mesh):
        raise ValueError(f"train needs a jax Mesh, got {type(mesh).__name__}: pass data_mesh()")
    if axes is None and len(mesh.axis_names) != 1:
        raise ValueError(f"{strategy} runs on a one-axis mesh, not on axes {mesh.axis_names}: "
                         "pass data_mesh()")
    if axes is not None and tuple(mesh.axis_names) != axes:
        raise ValueError(f"{strategy} runs on a mesh with axes {axes}, got {mesh.axis_names}: "
                         "pass replica_mesh()")


def _check(mesh, strategy, steps, seed, local_steps, topk_fraction, skewed, optimizer) -> None:
    _check_mesh(mesh, strategy)
    positive_int("steps", steps)
    positive_int("seed", seed, low=0)
    positive_int("local_steps", local_steps)
    sync = SPECS[strategy].sync
    if local_steps != 1 and sync.outer is None:
        every_h = ", ".join(s for s in _trainable() if SPECS[s].sync.outer is not None)
        raise ValueError(f"local_steps applies to {every_h} only; {strategy} syncs every step")
    if sync.axis is not None and sync.axis not in (SPECS[strategy].mesh_axes or ()):
        raise ValueError(f"{strategy} syncs over axis {sync.axis!r}, not one of its mesh's")
    if sync.stream is not None:
        raise ValueError(f"{strategy} sends on a stream device; train overlaps in one process "
                         "(a fixed τ, Sync.overlap) on the compute devices: time it with "
                         "course cluster")
    check_format(sync.dtype)
    streamed = (sync.fragments, sync.dtype, sync.overlap, sync.merge) != (1, "float32", 0, None)
    if streamed and (sync.outer is None or sync.axis is None):
        raise ValueError(f"{strategy} syncs in fragments, in fewer bits or overlapped; train runs "
                         "these in an outer step across the replicas of a mesh ('host', "
                         "'device') only")
    if isinstance(topk_fraction, bool) or not isinstance(topk_fraction, (int, float)) or not (
            0 < topk_fraction <= 1):
        raise ValueError(f"topk_fraction must be a number in (0, 1], got {topk_fraction!r}")
    if not isinstance(skewed, bool):
        raise ValueError(f"skewed must be True or False, got {skewed!r}")
    if optimizer is not None and not isinstance(optimizer, Optimizer):
        raise ValueError(f"optimizer must be an Optimizer such as adamw(1e-3), got "
                         f"{type(optimizer).__name__}")


def _check_batches(strategy, shard, batch_size, accumulate_k, heldout_every) -> None:
    positive_int("accumulate", accumulate_k)
    if accumulate_k != 1 and not SPECS[strategy].accumulates:
        accumulating = ", ".join(s for s in _trainable() if SPECS[s].accumulates)
        raise ValueError(f"accumulate does not apply to {strategy}; use one of {accumulating}")
    if batch_size is None and shard % accumulate_k:
        raise ValueError(f"accumulate={accumulate_k} does not divide a device's {shard} rows; "
                         "pick a divisor or give batch_size")
    if batch_size is not None and positive_int("batch_size", batch_size) > shard:
        raise ValueError(f"batch_size={batch_size} is more than a device's {shard} rows")
    if heldout_every is not None:
        positive_int("heldout_every", heldout_every)


def _start(start, n: int, seed: int, mlp: MLP) -> np.ndarray:
    """The initial flat parameters: ``start`` (checked against the run's length) or seed's."""
    if start is None:
        return init_params(n, seed, mlp)
    w = np.asarray(start, dtype=np.float32)
    if w.shape != (n,):
        raise ValueError(f"start holds {w.size} parameters, this run's vector {n}: start from "
                         "a run on as many devices (its params)")
    return w


def _stream_task(strategy, mlp, task_seed, *, batch_size, accumulate, heldout_every):
    """The stream task's checks and its rows to read losses on: the held-out sample twice."""
    if batch_size is None:
        raise ValueError("a stream draws batch_size fresh rows per device every step: give "
                         "batch_size")
    _check_batches(strategy, batch_size, batch_size, accumulate, heldout_every)
    x, y = heldout_rows(mlp, task_seed)
    return x, y, (x, y) if heldout_every is not None else None


def train(mesh: Mesh, strategy: str, *, steps: int, seed: int = 0, local_steps: int = 1,
          topk_fraction: float = 0.01, skewed: bool = False, batch_size: int | None = None,
          accumulate: int = 1, heldout_every: int | None = None, mlp: MLP = PART_THREE_MLP,
          data_seed: int | None = None, optimizer: Optimizer | None = None,
          stream: bool = False, start: np.ndarray | None = None,
          first_step: int = 0) -> TrainingRun:
    """Train the task's MLP for ``steps`` steps with ``strategy`` on ``mesh``.

    Args:
        mesh: a one-axis mesh (``data_mesh()``), or for a strategy of replicas (part five's,
            ``StrategySpec.mesh_axes``) a mesh ``("host", "device")`` (``replica_mesh()``);
            its size p divides the data's rows.
        strategy: one of ``STRATEGIES``, or of part five's (``STRATEGY_SPECS``).
        steps: optimizer steps.
        seed: seed of the initial parameters and the minibatches (and of the data, unless
            ``data_seed`` is given).
        local_steps: H, for a strategy that syncs every H steps (``local_sgd``, ``diloco``):
            its outer step (``Sync.outer``; local SGD's averages the parameters) after every
            H-th step; with F fragments (``Sync.fragments``, ``streaming_diloco``) one
            fragment's after every (H/F)-th, its result merged ``Sync.overlap`` steps later
            (``Sync.merge``). F divides H and the parameters, and τ < H/F.
        topk_fraction: for ``topk`` and ``topk_ef``: each device sends this fraction of entries.
        skewed: shards ordered by label (each device sees mostly a few classes); on the stream
            each device draws only its share of the classes (``StreamBatches``).
        batch_size: rows each device draws from its shard per (micro-)step, without
            replacement, by a generator seeded with ``seed``; ``None``: the whole shard every
            step (full-batch descent).
        accumulate: k micro-steps per optimizer step: the local gradients are summed in the
            state (``TrainState.accumulated``) and sent once per k; without ``batch_size`` the
            shard is cut into k micro-batches, so one step sees the whole shard.
        heldout_every: if given, ``HELDOUT_ROWS`` rows are held out of training and the loss on
            them is recorded after every ``heldout_every``-th step: of device 0's parameters,
            or for a strategy with an outer optimizer (DiLoCo's) of the synced parameters,
            those at the last sync (``TrainState.outer``), not replica 0's drifting copy.
        mlp: the task's model: part three's, or ``PART_FOUR_MLP``'s wider one.
        data_seed: seed of the task's rows and its held-out split; ``None``: ``seed``. Runs of
            one ``data_seed`` and several ``seed`` differ only in the initial parameters and
            the minibatch order (the seeds of a held-out curve).
        optimizer: the inner step's optimizer, instead of the strategy's
            (``StrategySpec.optimizer``): e.g. ``adamw(3e-3)`` for a learning-rate sweep.
        stream: train on the stream task (``problems.stream``): ``batch_size`` fresh rows of
            the mixture per device every (micro-)step, seeded by ``seed``, the step and the
            device's place; the held-out loss on the mixture's fixed held-out sample, which
            also stands for "all the training rows" (``final_loss``, ``averaged_loss``): a
            stream has none. ``data_seed`` picks the mixture (``None``: 0, the same for every
            ``seed``).
        start: the flat parameters to start from (a ``TrainingRun``'s ``params``, e.g. a
            data-parallel run's, for a warm start), instead of ``seed``'s initial ones; the
            optimizers' states start afresh.
        first_step: the steps already trained before this run (a warm start's): the stream
            draws the rows of step ``first_step`` on, and the recorded steps count from it.
            An optimizer with a schedule takes its own count: shift it to match.

    Returns:
        A ``TrainingRun``.

    Examples:
        >>> from course_utils.devices.setup import data_mesh
        >>> run = train(data_mesh(), "zero2", steps=2)
        >>> len(run.loss), run.memory.total == sum(run.memory.parts().values())
        (2, True)
    """
    _check(mesh, strategy, steps, seed, local_steps, topk_fraction, skewed, optimizer)
    spec = SPECS[strategy]
    (axis, rows_axis), sync = axes(spec, mesh), spec.sync
    p, n = mesh.shape[axis], padded_size(mesh.size, mlp)
    if sync.outer is not None:  # every H/F steps, fragment after fragment
        check_streaming(local_steps=local_steps, fragments=sync.fragments, overlap=sync.overlap,
                        n=n, devices=mesh.size // p)
    if data_seed is not None:
        positive_int("data_seed", data_seed, low=0)
    if not isinstance(stream, bool):
        raise ValueError(f"stream must be True or False, got {stream!r}")
    if stream:
        x, y, held = _stream_task(strategy, mlp, data_seed or 0, batch_size=batch_size,
                                  accumulate=accumulate, heldout_every=heldout_every)
    else:
        x, y, held = split_task(seed if data_seed is None else data_seed, skewed=skewed,
                                heldout=heldout_every is not None, mlp=mlp)
        if len(y) % mesh.size:
            raise ValueError(f"{len(y)} rows do not split evenly across {mesh.size} devices")
        _check_batches(strategy, len(y) // mesh.size, batch_size, accumulate, heldout_every)
    micro_rows = mesh.size * (batch_size or len(y) // mesh.size // accumulate)
    ctx = Context(axis, p, n, micro_rows * accumulate, k=max(1, round(topk_fraction * n)),
                  mlp=mlp, optimizer=optimizer or spec.optimizer)
    state = initial_state(spec, mesh, ctx, _start(start, n, seed, mlp), accumulate=accumulate)
    if positive_int("first_step", first_step, low=0) and not stream:
        raise ValueError("first_step continues a stream's rows; a fixed task's minibatches "
                         "start from seed: give stream=True, or leave first_step 0")
    batches = (StreamBatches(mesh, rows_axis, mlp, batch_size=batch_size, seed=seed,
                             task_seed=data_seed or 0, first_step=first_step * accumulate,
                             skewed=skewed)
               if stream else
               Batches(mesh, rows_axis, x, y, batch_size=batch_size, accumulate=accumulate,
                       seed=seed))
    programs = build_programs(spec, mesh, ctx, state, batches.first, accumulate=accumulate,
                              local_steps=local_steps)

    losses, errors, averaged, heldout = [], [], [], []
    sums, every = {"used": 0.0, "exact": 0.0}, programs.every
    for t in range(steps):
        loss = 0.0
        for _ in range(accumulate - 1):
            state, micro_loss = programs.micro(state, *batches.next())
            loss += float(np.sum(micro_loss))
        state, info = programs.step(state, *batches.next())
        loss += float(np.sum(info.loss))  # reading the loss waits for the step to finish
        losses.append(loss)
        if info.local is not None:
            used = np.asarray(info.used)[:n]  # the slices in order, or device 0's copy
            exact = np.asarray(info.local).reshape(p, n).sum(axis=0)
            sums = {"used": sums["used"] + used, "exact": sums["exact"] + exact}
            errors.append((_relative_error(used, exact),
                           _relative_error(sums["used"], sums["exact"])))
        if programs.outer is not None and (t + 1) % every == 0:
            state = programs.outer(state)
        # the result merges τ steps after its outer step, exactly (at once if τ = 0)
        merged = t + 1 - sync.overlap
        if programs.outer is not None and merged >= every and merged % every == 0:
            if programs.merge is not None:
                state = programs.merge(state)
            averaged.append((first_step + t + 1,
                             float(_mean_loss(np.asarray(state.params)[:n], x, y, mlp))))
        if held is not None and (t + 1) % heldout_every == 0:
            w = (spec.flat(state.params, n, p, mlp) if state.outer is None else
                 np.asarray(state.outer[0])[:n])  # the parameters at the last sync
            heldout.append((first_step + t + 1, float(_mean_loss(w, *held, mlp))))

    params = spec.flat(state.params, n, p, mlp)
    return TrainingRun(
        strategy=strategy,
        loss=tuple(losses),
        bytes_per_step=programs.bytes_per_step(steps),
        memory=_memory(state),
        gradient_error=tuple(e for e, _ in errors) or None,
        cumulative_error=tuple(e for _, e in errors) or None,
        averaged_loss=tuple(averaged) or None,
        heldout_loss=tuple(heldout) or None,
        collectives=programs.collectives,
        params=params,
        shards=_shards(state),
        bytes_across_replicas=programs.bytes_across_replicas,
        bytes_per_sync_across_replicas=programs.bytes_per_sync_across_replicas,
        final_loss_of=lambda: float(_mean_loss(params, x, y, mlp)),
    )


def _memory(state: TrainState) -> Memory:
    parts = {"parameters": 0, "gradients": 0, "optimizer": 0}
    for name, value in state._asdict().items():
        for array in jax.tree.leaves(value):
            parts[MEMORY_PART[name]] += values_per_device(array) * array.dtype.itemsize
    return Memory(**parts)


def _shards(state: TrainState) -> dict[str, list[tuple[int, ...]]]:
    shards = {}
    for name, value in state._asdict().items():
        leaves = jax.tree.leaves(value)
        for i, array in enumerate(leaves):
            shards[name if len(leaves) == 1 else f"{name}{i + 1}"] = shard_shapes(array)
    return shards


@partial(jax.jit, static_argnums=3)
def _mean_loss(w, x, y, mlp: MLP):
    return loss_sum(w, x, y, mlp) / len(y)


def _relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))

