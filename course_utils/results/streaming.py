"""Streaming DiLoCo's held-out curves, a saved run (``course_utils/saved/streaming.json``, written
by ``scripts/streaming_curves.py``): DiLoCo, DiLoCo with int8 and with 4-bit outer gradients
and Streaming DiLoCo (``training.streaming_diloco``) at one H, and data parallelism with the same
inner AdamW for the target, each from ``SEEDS`` seeds, trained in one process on a mesh of 2
replicas of 2 devices (``diloco.replica_mesh``).

Every run is on the stream task (``problems.stream``: fresh rows every step, the same rows for
every strategy) under part five's inner optimizer (``optimizers.scheduled_adamw``: AdamW, weight
decay 0.1, warm-up then cosine decay), the same for every strategy. The model is part four's (``PART_FOUR_MLP``): the one ``course cluster`` times, whose step time
times these curves' steps is a time to target, and whose 1.1 million parameters (94 % in the
first layer) are what fragments and fewer bits are for; the curves do not depend on the link
or on timing (Streaming DiLoCo merges each fragment τ steps after its outer step, exactly).
The held-out loss is that of the parameters at the last sync (``train``'s ``heldout_every``);
the target is step 20's rule (``results.training``: ``TARGET_FRACTION``; ``results.curves``'
readers) with data parallelism (AdamW) as the baseline. The plan is the registry's
(``training.strategies.SAVED_PLANS``, each strategy's ``SavedRuns.curves``). JSON only through
``results.records``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from jax.sharding import Mesh

from course_utils.problems.classification import PART_FOUR_MLP
from course_utils.results.curves import CurvePlan, loss_at_step, run_curves, step_to
from course_utils.results.meta import RunMeta, this_run
from course_utils.results.records import load_saved
from course_utils.results.training import TARGET_FRACTION, HeldoutCurve
from course_utils.training.optimizers import scheduled_adamw
from course_utils.training.strategies import SAVED_PLANS, saved_in, spec

SAVED = "streaming.json"
_SAVED = SAVED_PLANS[SAVED]  # the registry's plan of the file (``SavedPlan``)
(BASELINE,) = saved_in(SAVED, "baseline")
CURVE_STRATEGIES = saved_in(SAVED)
(CURVE_LOCAL_STEPS,) = _SAVED.local_steps  # H: the middle of part five's 8, 32, 128
# rows per replica and inner step: a cluster host's batch (``course cluster --measure diloco``
# reads it), so that time to target is these curves' steps times that run's step time
REPLICA_ROWS = _SAVED.replica_rows
# 10 rounds of H: every strategy syncs at least 8 times (a start-up effect of a few rounds is
# not read as a verdict); on the stream no curve can rise by learning its rows
CURVE_STEPS = _SAVED.steps
HELDOUT_EVERY = _SAVED.heldout_every  # H/F: every sync of Streaming DiLoCo's fragments is seen
SEEDS = len(_SAVED.seeds)
DATA_SEED = _SAVED.data_seed
COMMAND = "python scripts/streaming_curves.py"


@dataclass(frozen=True)
class SyncBytes:
    """What one device of a strategy sends across the replicas (from the compiled programs):
    per inner step, and in one sync (one run of its outer step; ``None`` without one)."""

    strategy: str
    per_step: float
    per_sync: float | None = None


@dataclass(frozen=True)
class StreamingCurves:
    """What ``streaming.json`` holds: how it was made, the mesh (replicas × devices each), the
    plan, every strategy's curves by seed (``HeldoutCurve``; the task's rows are
    ``data_seed``'s) and its bytes across the replicas."""

    meta: RunMeta
    replicas: int
    devices_per_replica: int
    local_steps: int
    batch_size: int
    steps: int
    heldout_every: int
    data_seed: int
    curves: tuple[HeldoutCurve, ...]
    bytes: tuple[SyncBytes, ...]


def train_streaming_curves(mesh: Mesh, *, seeds: Sequence[int] = range(SEEDS),
                           steps: int = CURVE_STEPS,
                           strategies: Sequence[str] = CURVE_STRATEGIES,
                           on_run: Callable[[str, int], None] | None = None) -> StreamingCurves:
    """Every strategy's held-out curve from every seed on ``mesh`` (``replica_mesh()``), by
    ``curves.run_curves``; ``on_run(strategy, seed)`` is called before each."""
    replicas, devices = mesh.shape.values()
    if REPLICA_ROWS % devices:
        raise ValueError(f"a replica of {devices} devices cannot split {REPLICA_ROWS} rows "
                         "evenly: use replica_mesh() on 1, 2, 4 or 8 devices")
    batch_size = REPLICA_ROWS // devices
    plans = [CurvePlan(strategy, tuple(seeds), {
        "steps": steps, "data_seed": DATA_SEED, "batch_size": batch_size, "stream": True,
        "optimizer": scheduled_adamw(steps), "heldout_every": HELDOUT_EVERY, "mlp": PART_FOUR_MLP,
        "local_steps": 1 if strategy == BASELINE else CURVE_LOCAL_STEPS})
        for strategy in strategies]
    started, curves, sent = time.monotonic(), [], {}
    for plan, seed, run in run_curves(mesh, plans, on_run=None if on_run is None else (
            lambda plan, seed: on_run(plan.strategy, seed))):
        curves.append(HeldoutCurve(plan.strategy, batch_size, tuple(
            (step, loss) for step, loss in run.heldout_loss), seed))
        sent[plan.strategy] = SyncBytes(plan.strategy, run.bytes_across_replicas,
                                        run.bytes_per_sync_across_replicas)
    meta = this_run(COMMAND, time.monotonic() - started)
    return StreamingCurves(meta, replicas, devices, CURVE_LOCAL_STEPS, batch_size, steps,
                           HELDOUT_EVERY, DATA_SEED, tuple(curves), tuple(sent.values()))


def saved_streaming_curves() -> StreamingCurves:
    """The saved run, ``course_utils/saved/streaming.json``. Regenerate (about 6 minutes on
    this machine's two shared cores): ``python scripts/streaming_curves.py``.

    Raises:
        ValueError: the file is missing or not this version's (names the file and the field).
    """
    return load_saved(StreamingCurves, "streaming.json", COMMAND)


def curves_of(results: StreamingCurves, strategy: str) -> dict[int, HeldoutCurve]:
    """``strategy``'s curves, by seed."""
    found = {c.seed: c for c in results.curves if c.strategy == strategy}
    if not found:
        names = ", ".join(dict.fromkeys(c.strategy for c in results.curves))
        raise ValueError(f"no curve of {strategy!r}; the run has {names}")
    return found


def streaming_target(results: StreamingCurves, fraction: float = TARGET_FRACTION) -> float:
    """The target: the mean over seeds of data parallelism's (AdamW) held-out loss at
    ``fraction`` of the run, where its curve still falls (step 20's rule)."""
    return float(np.mean([loss_at_step(c, fraction * results.steps)
                          for c in curves_of(results, BASELINE).values()]))


def steps_to_target(results: StreamingCurves, strategy: str, target: float, *,
                    interpolate: bool = True) -> dict[int, float | None]:
    """Each seed's inner steps to ``target``. A strategy with an outer step is held out on the
    parameters at the last sync, which change only when a fragment merges (DiLoCo's every H
    steps, Streaming DiLoCo's every H/F, τ after each send): its step is the merge that the
    first evaluation at or below the target sees (exact when the curve is evaluated at least
    as often as merges come, as the saved run is; else an upper bound; ``curves.step_to``'s
    ``"sync"`` reading). Any other (data parallelism) is interpolated between evaluations
    (``"linear"``, step 20's rule). With ``interpolate=False``, the first evaluation at or
    below the target for all (``"evaluated"``).
    ``None``: not reached in the steps run.

    Examples:
        >>> curves = saved_streaming_curves()
        >>> steps_to_target(curves, "diloco", streaming_target(curves))  # its first sync
        {0: 32, 1: 32, 2: 32}
    """
    from course_utils.training.streaming import schedule

    sync, curves = spec(strategy).sync, curves_of(results, strategy)
    if not interpolate or sync.outer is None:
        read = "linear" if interpolate else "evaluated"
        return {seed: step_to(c, target, read=read) for seed, c in curves.items()}
    merges = [e.step for e in schedule(results.steps, local_steps=results.local_steps,
                                       fragments=sync.fragments, overlap=sync.overlap)
              if e.kind == "merge"]
    return {seed: step_to(c, target, read="sync", syncs=merges) for seed, c in curves.items()}


def bytes_of(results: StreamingCurves, strategy: str) -> SyncBytes:
    """``strategy``'s bytes across the replicas."""
    return next(b for b in results.bytes if b.strategy == strategy)
