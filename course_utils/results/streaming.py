"""Streaming DiLoCo's held-out curves, a saved run (``course_utils/saved/streaming.json``, written
by ``scripts/streaming_curves.py``): DiLoCo, DiLoCo with int8 and with 4-bit outer gradients
and Streaming DiLoCo (``training.streaming_diloco``) at one H, and data parallelism with the same
inner AdamW as the baseline, each from ``SEEDS`` seeds, trained in one process on a mesh of 2
replicas of 2 devices (``diloco.replica_mesh``).

Every run is on the stream task (``problems.stream``: fresh rows every step, the same rows for
every strategy) under part five's inner optimizer (``optimizers.scheduled_adamw``: AdamW, weight
decay 0.1, warm-up then cosine decay), the same for every strategy. The model is part four's
(``PART_FOUR_MLP``): the one ``course cluster`` times, whose step time times these curves' steps is
a time to target, and whose 1.1 million parameters (94 % in the first layer) are what fragments and
fewer bits are for; the curves do not depend on the link or on timing (Streaming DiLoCo merges each
fragment τ steps after its outer step, exactly).
The held-out loss is that of the parameters at the last sync (``train``'s ``heldout_every``);
step 22 reads each strategy's lead over another across a band of targets (``BAND``,
``streaming_band``; ``results.curves.band_lead`` on ``dated_curves``), data parallelism (AdamW)
the baseline. The plan is the registry's
(``training.strategies.SAVED_PLANS``, each strategy's ``SavedRuns.curves``). JSON only through
``results.records``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jax.sharding import Mesh

from course_utils.problems.classification import PART_FOUR_MLP
from course_utils.results.curves import (
    Band,
    CurvePlan,
    run_curves,
    task_band,
)
from course_utils.results.meta import RunMeta, this_run
from course_utils.results.records import load_saved
from course_utils.results.training import HeldoutCurve
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


# the peak rates of step 21's protocol, run again on this model (part three's pick is not
# transplanted: the model is 100 times wider)
LR_GRID = (3e-4, 1e-3, 3e-3)
# the band of targets step 22's verdicts read: these shares of the reducible loss gone, each
# reached and kept by data parallelism in every seed (whole per cents, as ``curves.describe_lead``
# names them: 98.5 % left out)
BAND = (0.95, 0.96, 0.97, 0.98, 0.99)


def streaming_band(fractions: Sequence[float] = BAND) -> Band:
    """The band of targets on part four's stream task (``curves.task_band``)."""
    return task_band(PART_FOUR_MLP, fractions)


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
    ``data_seed``'s) and its bytes across the replicas; the inner AdamW's peak rate
    (``adamw_lr``) and the protocol's runs that picked it on this model (``lr_runs``: data
    parallelism at each rate of ``LR_GRID``, ``results.diloco.pick_lr``'s rule)."""

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
    adamw_lr: float | None = None
    lr_runs: tuple[HeldoutCurve, ...] = ()


def train_streaming_curves(mesh: Mesh, *, seeds: Sequence[int] = range(SEEDS),
                           steps: int = CURVE_STEPS,
                           strategies: Sequence[str] = CURVE_STRATEGIES,
                           lr_grid: Sequence[float] = LR_GRID,
                           on_run: Callable[[str, int], None] | None = None) -> StreamingCurves:
    """Every strategy's held-out curve from every seed on ``mesh`` (``replica_mesh()``), by
    ``curves.run_curves``; ``on_run(strategy, seed)`` is called before each. First step 21's
    protocol on this model (``results.diloco.pick_lr``): data parallelism at each peak rate of
    ``lr_grid``, the rate it picks used by every strategy (its data-parallel runs kept as the
    baseline's curves)."""
    from course_utils.results.diloco import pick_lr

    replicas, devices = mesh.shape.values()
    if REPLICA_ROWS % devices:
        raise ValueError(f"a replica of {devices} devices cannot split {REPLICA_ROWS} rows "
                         "evenly: use replica_mesh() on 1, 2, 4 or 8 devices")
    batch_size = REPLICA_ROWS // devices

    def plan(strategy, lr):
        return CurvePlan(strategy, tuple(seeds), {
            "steps": steps, "data_seed": DATA_SEED, "batch_size": batch_size, "stream": True,
            "optimizer": scheduled_adamw(steps, lr), "heldout_every": HELDOUT_EVERY,
            "mlp": PART_FOUR_MLP,
            "local_steps": 1 if strategy == BASELINE else CURVE_LOCAL_STEPS})

    started, curves, sent, lr_runs, kept = time.monotonic(), [], {}, [], {}
    report = None if on_run is None else (lambda plan, seed: on_run(plan.strategy, seed))
    for lr in lr_grid:
        for _, seed, run in run_curves(mesh, [plan(BASELINE, lr)], on_run=report):
            lr_runs.append(HeldoutCurve(BASELINE, batch_size, run.heldout_loss, seed, lr=lr))
            kept[lr, seed] = run
    picked = pick_lr(tuple(lr_runs)).picked
    runs = [(plan(BASELINE, picked), seed, kept[picked, seed]) for seed in seeds]
    runs += run_curves(mesh, [plan(s, picked) for s in strategies if s != BASELINE],
                       on_run=report)
    for p, seed, run in runs:
        curves.append(HeldoutCurve(p.strategy, batch_size, tuple(
            (step, loss) for step, loss in run.heldout_loss), seed))
        sent[p.strategy] = SyncBytes(p.strategy, run.bytes_across_replicas,
                                     run.bytes_per_sync_across_replicas)
    meta = this_run(COMMAND, time.monotonic() - started)
    return StreamingCurves(meta, replicas, devices, CURVE_LOCAL_STEPS, batch_size, steps,
                           HELDOUT_EVERY, DATA_SEED, tuple(curves), tuple(sent.values()),
                           picked, tuple(lr_runs))


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


def dated_curves(results: StreamingCurves, strategy: str) -> list[tuple[tuple[int, float], ...]]:
    """``strategy``'s held-out curves, one per seed in seed order (``curves.band_lead`` pairs
    them so), each ``(step, loss)``. A strategy with an outer step is held out on the parameters
    at the last sync, which change only when a fragment merges (DiLoCo's every H steps,
    Streaming DiLoCo's every H/F, τ after each send): each evaluation is dated at the merge it
    sees (the first evaluation of each merge kept), so that ``read="evaluated"`` reads the merge
    exactly (when evaluations come at least as often as merges, as in the saved run). Data
    parallelism's evaluations are kept as they are.

    Examples:
        >>> [step for step, _ in dated_curves(saved_streaming_curves(), "diloco")[0][:3]]
        [0, 32, 64]
        >>> [step for step, _ in dated_curves(saved_streaming_curves(), "streaming_diloco")[0][:3]]
        [0, 9, 17]
    """
    from course_utils.training.streaming import schedule

    sync = spec(strategy).sync
    curves = [c.heldout_loss for _, c in sorted(curves_of(results, strategy).items())]
    if sync.outer is None:
        return [tuple(c) for c in curves]
    merges = [0] + [e.step for e in schedule(results.steps, local_steps=results.local_steps,
                                             fragments=sync.fragments, overlap=sync.overlap)
                    if e.kind == "merge"]
    dated = []
    for curve in curves:
        seen: dict[int, float] = {}
        for step, loss in curve:
            seen.setdefault(max(m for m in merges if m <= step), loss)
        dated.append(tuple(seen.items()))
    return dated


def rises(results: StreamingCurves, strategy: str) -> list[float]:
    """How far each seed's held-out curve ends above its lowest point (end − lowest), in seed
    order: 0 for a curve that never rises."""
    return [c.heldout_loss[-1][1] - min(loss for _, loss in c.heldout_loss)
            for _, c in sorted(curves_of(results, strategy).items())]


def bytes_of(results: StreamingCurves, strategy: str) -> SyncBytes:
    """``strategy``'s bytes across the replicas."""
    return next(b for b in results.bytes if b.strategy == strategy)
