"""Part four's measurements (``course cluster --measure training``, ``training.json``): each
strategy's step time on the cluster at each link rate and batch size, and its held-out loss
curve, which does not depend on the link; time to a target loss is the steps a curve needs to
reach it times the measured step time (step 20 reads it at a band of targets, ``BAND``, with
``curves.band_lead``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Sequence

from course_utils.results.cluster import ClusterSetup
from course_utils.results.curves import HeldoutCurve, loss_at_step, step_to
from course_utils.results.meta import RunMeta
from course_utils.results.records import load_saved


@dataclass(frozen=True)
class TrainingRow:
    """One strategy at one link rate and batch size (rows per device per micro-step): seconds
    per optimizer step, of which compute (the step with nothing sent) and communication (the
    rest), and the bytes host 0's link sent per step (``None`` without its counter)."""

    strategy: str
    link_rate: str
    batch_size: int
    step_s: float
    compute_s: float
    communication_s: float
    link_bytes: float | None = None

    @property
    def link_limited(self) -> bool | None:
        """Whether the link's rate can set this step's time: its bytes do not fit in tbf's
        bucket (``links.link_limits``; ``None`` without the counter). A step that fits was
        not limited by the link: after an idle gap it leaves on the bucket's credit."""
        from course_utils.models.links import link_limits

        return None if self.link_bytes is None else link_limits(self.link_bytes, self.link_rate)


@dataclass(frozen=True)
class OwnWorkRow:
    """A strategy's step timed in one process on as many logical devices as the cluster has,
    where sending is a memory copy: a compression scheme's step minus data parallelism's is the
    scheme's own work (selection, encoding, decoding)."""

    strategy: str
    batch_size: int
    step_s: float


@dataclass(frozen=True)
class TrainingResults:
    """What ``training.json`` holds: how it was made (``meta.runs``: the runs whose medians
    the times are), on which cluster, one device's FLOPs per second while every device
    computes, and the rows, curves and own work; ``curves_meta``: how the curves were made
    where another command re-trained them (``scripts/retrain_curves.py``)."""

    meta: RunMeta
    cluster: ClusterSetup
    flops_per_s: float
    rows: tuple[TrainingRow, ...]
    curves: tuple[HeldoutCurve, ...]
    own_work: tuple[OwnWorkRow, ...] = ()
    curves_meta: RunMeta | None = None


def median_of_runs(runs: Sequence[TrainingResults]) -> TrainingResults:
    """One run whose times (step, compute, communication, own work, FLOP rate) are the medians
    over ``runs`` of one plan, cell by cell; its curves, which do not depend on the timings, and
    the rest of its ``meta`` are the first run's (``seconds``: the runs' total; ``runs``: their
    number).

    Raises:
        ValueError: fewer than two runs, or runs of different plans or cells.
    """
    if len(runs) < 2:
        raise ValueError("give at least two runs of the same plan")

    def cells(run):
        return [(r.strategy, r.link_rate, r.batch_size) for r in run.rows]

    if any(cells(r) != cells(runs[0]) or r.curves != runs[0].curves for r in runs[1:]):
        raise ValueError("the runs must be of the same plan, shape and code: their cells or "
                         "held-out curves differ")

    def median(values):
        return statistics.median(values)

    rows = tuple(replace(row, **{f: median(getattr(run.rows[i], f) for run in runs)
                                 for f in ("step_s", "compute_s", "communication_s")})
                 for i, row in enumerate(runs[0].rows))
    own_work = tuple(replace(o, step_s=median(run.own_work[i].step_s for run in runs))
                     for i, o in enumerate(runs[0].own_work))
    meta = replace(runs[0].meta, seconds=sum(r.meta.seconds for r in runs), runs=len(runs))
    return replace(runs[0], meta=meta, flops_per_s=median(r.flops_per_s for r in runs),
                   rows=rows, own_work=own_work)


def steps_to(curve: HeldoutCurve, target: float) -> int | None:
    """The first step at which ``curve``'s held-out loss is at or below ``target`` (``None``:
    never, in the steps run): ``curves.step_to`` read at the evaluations.

    Examples:
        >>> steps_to(HeldoutCurve("dp", 64, ((10, 0.9), (20, 0.5), (30, 0.4))), 0.5)
        20
    """
    return step_to(curve, target, read="evaluated")


# the band of targets step 20's verdicts read: these shares of the reducible loss (log of the
# class count − the floor of part four's mixture) gone, on the stream task. It starts at 98 %, so
# every curve reaches every target after its second evaluation (step 20 of 200): 95 % and 97 %
# fall inside the first interval (steps 10 to 20), where a linear crossing is not a measurement.
# 98 % to 98.8 % spread data parallelism's crossings over the run (about steps 30, 60 and 130 at
# batch 128), which it reaches and stays below in every seed
BAND = (0.98, 0.985, 0.988)


def training_band(fractions: Sequence[float] = BAND):
    """The band of targets on part four's stream task (``curves.task_band``)."""
    from course_utils.problems.classification import PART_FOUR_MLP
    from course_utils.results.curves import task_band

    return task_band(PART_FOUR_MLP, fractions)


def loss_at(curve: HeldoutCurve, step: float) -> float:
    """``curve``'s held-out loss at ``step``, linearly interpolated between its evaluations
    (``curves.loss_at_step``).

    Examples:
        >>> loss_at(HeldoutCurve("dp", 64, ((10, 0.9), (20, 0.5), (30, 0.4))), 15)
        0.7
    """
    return loss_at_step(curve, step)


def crossing_step(curve: HeldoutCurve, target: float) -> float | None:
    """The step at which ``curve``'s held-out loss first reaches ``target``, linearly
    interpolated between the last evaluation above it and the first at or below it (the first
    evaluation's step if that one already is; ``None``: never, in the steps run):
    ``curves.step_to``'s linear reading.

    Examples:
        >>> crossing_step(HeldoutCurve("dp", 64, ((10, 0.9), (20, 0.5), (30, 0.4))), 0.45)
        25.0
    """
    return step_to(curve, target)


def baseline_row() -> str:
    """The row the target and each scheme's own work are read against: the registry's baseline
    of ``training.json`` (``SavedRuns.curves``; read when called, so that this module imports no
    JAX)."""
    from course_utils.training.strategies import saved_in

    (name,) = saved_in("training.json", "baseline")
    return name


def seed_curves(results: TrainingResults, strategy: str, batch_size: int
                ) -> dict[int, HeldoutCurve]:
    """``strategy``'s curves at ``batch_size``, by seed."""
    found = {c.seed: c for c in results.curves if (c.strategy, c.batch_size) == (strategy,
                                                                                 batch_size)}
    if not found:
        raise ValueError(f"no held-out curve of {strategy} at batch size {batch_size} in these "
                         "results; re-train it with scripts/retrain_curves.py")
    return dict(sorted(found.items()))


def own_work_s(results: TrainingResults, strategy: str) -> float:
    """The seconds a compression scheme's own work adds to a step: its step minus data
    parallelism's, both timed in one process (``own_work``); 0 for a strategy not timed so, or
    when the difference is not positive.

    Examples:
        >>> rows = (OwnWorkRow("data_parallel", 32, 0.02), OwnWorkRow("topk_ef", 32, 0.07))
        >>> results = TrainingResults(meta=None, cluster=None, flops_per_s=1e9, rows=(),
        ...                           curves=(), own_work=rows)
        >>> round(own_work_s(results, "topk_ef"), 3), own_work_s(results, "zero3")
        (0.05, 0.0)
    """
    times, base = {r.strategy: r.step_s for r in results.own_work}, baseline_row()
    if strategy not in times or base not in times:
        return 0.0
    return max(0.0, times[strategy] - times[base])


def median_compute_s(results: TrainingResults, strategy: str, batch_size: int) -> float:
    """The median over the run's link rates of ``strategy``'s compute alone at ``batch_size``:
    the compute does not depend on the link, and one rate's measurement alone moves by tens of
    per cent on this machine's shared cores.

    Examples:
        >>> rows = tuple(TrainingRow("data_parallel", r, 64, 1.0, c, 1.0 - c)
        ...              for r, c in (("50mbit", 0.02), ("1gbit", 0.05), ("10gbit", 0.03)))
        >>> results = TrainingResults(meta=None, cluster=None, flops_per_s=1e9, rows=rows,
        ...                           curves=())
        >>> median_compute_s(results, "data_parallel", 64)
        0.03
    """
    times = [r.compute_s for r in results.rows if (r.strategy, r.batch_size) == (strategy,
                                                                                 batch_size)]
    if not times:
        raise ValueError(f"no rows of {strategy} at batch size {batch_size} in these results")
    return statistics.median(times)


def part_four_traffic(strategy: str, hosts: int, devices: int):
    """The step model's ``Traffic`` of one optimizer step of a part-four row's ``strategy`` on
    hosts × devices: ``PART_FOUR_MLP``'s padded n with the settings of its row
    (``training.part_four.find_row``); a row the step model has no name for takes its
    registered strategy's (accumulation sends data parallelism's bytes)."""
    from course_utils.models.cost_model import Topology
    from course_utils.problems.classification import PART_FOUR_MLP, padded_size
    from course_utils.training.part_four import TOPK_FRACTION, find_row
    from course_utils.training.traffic import MODELLED, strategy_traffic

    row = find_row(strategy)
    n = padded_size(hosts * devices, PART_FOUR_MLP)
    return strategy_traffic(
        row.name if row.name in MODELLED else row.strategy, n, Topology(hosts, devices),
        topk=max(1, round(TOPK_FRACTION * n)),
        matrices=[s for _, s in PART_FOUR_MLP.layers if len(s) == 2],
        dense=sum(s[0] for _, s in PART_FOUR_MLP.layers if len(s) == 1),
        local_steps=row.local_steps)


def modelled_step_s(row: TrainingRow, hosts: int, devices: int, *, alpha_s: float = 0.0,
                    own_s: float = 0.0, compute_s: float | None = None) -> float:
    """The step model's seconds for ``row``: its compute (``compute_s``, by default the row's
    measured one), ``own_s`` of the scheme's own work, and its strategy's link bytes at the
    row's rate (``FRAME_SHARE`` of it carries data) with ``alpha_s`` per message step.

    Examples:
        >>> row = TrainingRow("data_parallel", "200mbit", 64, 0.3, 0.05, 0.25)
        >>> round(modelled_step_s(row, 2, 2), 3)  # 0.05 + 1.5 · 4.27 MiB / (25 MB/s · 0.956)
        0.331
    """
    from course_utils.models.links import payload_bytes_per_s
    from course_utils.models.step import step_time

    traffic = part_four_traffic(row.strategy, hosts, devices)
    rate = payload_bytes_per_s(row.link_rate)
    compute = row.compute_s if compute_s is None else compute_s
    return step_time(traffic, compute + own_s, alpha_s=alpha_s, bytes_per_s=rate).step_s


def saved_training_results() -> TrainingResults:
    """The saved full runs, ``course_utils/saved/training.json``: the medians over three runs of
    the full plan. Regenerate (as root, about 30 minutes a run, on a quiet machine): three times
    ``course cluster --measure training --plan full --link-rate 50mbit,200mbit,1gbit,10gbit
    --timeout 3000 --out build/training-K`` (K = 1, 2, 3), then ``python
    scripts/median_training_runs.py build/training-*/training.json >
    course_utils/saved/training.json``. Its held-out curves alone, by seed, without the cluster:
    ``python scripts/retrain_curves.py course_utils/saved/training.json --seeds 3`` (batch 128
    took 10 minutes on this machine's two shared cores)."""
    return load_saved(TrainingResults, "training.json",
                      "course cluster --measure training (three runs, then "
                      "scripts/median_training_runs.py)")
