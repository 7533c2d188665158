"""Part five's saved sweep (``diloco.json``, written by ``scripts/diloco_sweep.py``): the inner
learning rate's protocol runs, then data parallelism, local SGD, DiLoCo and two ablations of
DiLoCo's outer optimizer (all with AdamW inside) at several H, on i.i.d. and skewed streams,
from several seeds, and DiLoCo from a data-parallel warm start and on 1 and 4 replicas:
held-out loss at the syncs against inner steps (and training loss beside it), bytes one device
sends across the replicas per inner step, and memory per device by part. Every verdict reads a
band of targets (``BAND``, ``sweep_band``; ``curves.band_lead``), data parallelism here the
AdamW one (``dp_adamw``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from course_utils.problems.classification import PART_THREE_MLP
from course_utils.results.curves import Band, HeldoutCurve, task_band
from course_utils.results.meta import RunMeta
from course_utils.results.records import load, saved_path
from course_utils.training.strategies import SAVED_PLANS, saved_in

COMMAND = "python scripts/diloco_sweep.py"
SAVED = "diloco.json"
(DP,) = saved_in(SAVED, "baseline")  # the baseline every comparison divides by
# the strategies of H inner steps, then an outer step: the two compared, then the ablations
# of DiLoCo's outer optimizer (without its momentum; its momentum at a steady step of 1)
COMPARED = saved_in(SAVED, "compared")
ABLATIONS = saved_in(SAVED, "ablation")
EVERY_H = COMPARED + ABLATIONS

# the protocol that fixed the hyperparameters before anything was compared (also in the file)
PROTOCOL = (
    "Fixed before measuring, none tuned to make one method win. The task: the stream (fresh "
    "rows of part three's mixture every step, the same rows for every strategy at a step; the "
    "held-out loss on one fixed sample of 8,192 rows; skewed: each device draws only its share "
    "of the classes). Inner optimizer: AdamW with the DiLoCo paper's weight decay 0.1 and "
    "shape of schedule (a linear warm-up over the first 5 % of the run, then a cosine decay to "
    "a tenth of the peak at its end), the same for every strategy. Its peak learning rate: for "
    "each rate of the grid lr_grid, data parallelism (i.i.d.) is trained from each of the "
    "sweep's seeds and each run's lowest held-out loss is taken; the rate with the lowest "
    "seed-mean wins; a rate whose seeds' range (lowest to highest) overlaps the winner's is a "
    "tie, and of the tied rates the largest is kept, so the choice never slows data "
    "parallelism, the baseline, in favour of the methods that amplify its step. The sweep stops "
    "if that rate is not ADAMW_LR. Outer optimizer: the DiLoCo paper's SGD with Nesterov "
    "momentum, learning rate 0.7, momentum 0.9, transplanted from the paper's setting (H = 500, "
    "8 replicas, a language model) and not validated here; local SGD's outer step is the "
    "average (learning rate 1, no momentum). Two ablations of the outer optimizer, fixed with "
    "it: outer SGD at learning rate 0.7 without momentum, and outer Nesterov at learning rate "
    "0.1 = 1 - momentum, momentum 0.9 (plain averaging's steady step, lr / (1 - momentum) = 1). "
    "H: 8, 32 and 128, every one with at least 8 syncs. DiLoCo from scratch and from a "
    "data-parallel warm start (the paper's main setting: warm_start steps of data parallelism, "
    "then DiLoCo with fresh AdamW moments, the schedule going on). The attribution: DiLoCo at "
    "H = attribution_h on 1 replica (the outer Nesterov step with nothing sent) and on 4, "
    "beside the sweep's 2, all on the same 4 devices and rows.")


# the band of targets every verdict of step 21 reads: these shares of the reducible loss
# (log of the class count − the floor) gone
BAND = (0.5, 0.6, 0.7, 0.8, 0.9, 0.92, 0.94, 0.96, 0.98)


@dataclass(frozen=True)
class SweepPlan:
    """What the sweep trains: every run on ``devices`` logical CPU devices as ``replicas``
    replicas (``replica_mesh``), part three's model, ``batch_size`` rows per device per inner
    step (``rows_per_step`` over all devices), ``steps`` inner steps, the task's rows of
    ``data_seed``; the learning-rate protocol's ``lr_grid`` (data parallelism, i.i.d. shards,
    from each of ``seeds``), then each H of ``local_steps`` from each of ``seeds``;
    ``heldout_every``:
    data parallelism's evaluation interval (the others are evaluated at their syncs);
    ``warm_start``: the data-parallel steps DiLoCo's warm-started runs begin after;
    ``attribution_h`` and ``attribution_replicas``: DiLoCo's runs on other replica counts."""

    devices: int
    replicas: int
    batch_size: int
    steps: int
    data_seed: int
    lr_grid: tuple[float, ...]
    local_steps: tuple[int, ...]
    seeds: tuple[int, ...]
    heldout_every: int
    warm_start: int
    attribution_h: int
    attribution_replicas: tuple[int, ...]

    @property
    def rows_per_step(self) -> int:
        """Rows one inner step sees over all devices (every replica's)."""
        return self.batch_size * self.devices


_SAVED = SAVED_PLANS[SAVED]  # the registry's plan of the file; here, on 4 devices as 2 replicas
PLAN = SweepPlan(devices=4, replicas=2, batch_size=_SAVED.replica_rows * 2 // 4,
                 steps=_SAVED.steps, data_seed=_SAVED.data_seed,
                 lr_grid=(1e-4, 3e-4, 1e-3, 3e-3, 1e-2), local_steps=_SAVED.local_steps,
                 seeds=_SAVED.seeds, heldout_every=_SAVED.heldout_every,
                 warm_start=_SAVED.steps // 4, attribution_h=32, attribution_replicas=(1, 4))


@dataclass(frozen=True)
class SweepCost:
    """What one strategy at one H sends and holds, read from its compiled programs and its
    state's shards: bytes one device sends across the replicas per inner step, all bytes
    it sends per inner step, and the bytes one device holds of each part of the state."""

    strategy: str
    local_steps: int
    bytes_across_replicas: float
    bytes_per_step: float
    memory: dict[str, int]


@dataclass(frozen=True)
class DilocoResults:
    """What ``diloco.json`` holds: how it was made, the protocol (in words), the plan, the
    hyperparameters it fixed, and the runs: the protocol's (data parallelism, i.i.d. shards,
    each ``lr`` of the grid from each seed) and the sweep's (each strategy, H and shards from
    each seed), each a ``HeldoutCurve`` with its ``train_loss``: data parallelism's every
    ``heldout_every`` steps, the others' at each sync (of the parameters at the sync)."""

    meta: RunMeta
    protocol: str
    plan: SweepPlan
    adamw_lr: float
    outer_lr: float
    outer_momentum: float
    lr_runs: tuple[HeldoutCurve, ...]
    curves: tuple[HeldoutCurve, ...]
    costs: tuple[SweepCost, ...]


def saved_diloco_results() -> DilocoResults:
    """The saved sweep, ``course_utils/saved/diloco.json``. Regenerate (about 10 minutes alone on
    this machine's two shared cores, 24 beside other jobs): ``python scripts/diloco_sweep.py``."""
    return load(DilocoResults, saved_path(SAVED), f"regenerate it with {COMMAND}")


@dataclass(frozen=True)
class LrScore:
    """One learning rate of the protocol: each seed's lowest held-out loss over its run, by
    seed, and their mean and range."""

    lr: float
    lowest: dict[int, float]

    @property
    def mean(self) -> float:
        return float(np.mean(list(self.lowest.values())))

    @property
    def range(self) -> tuple[float, float]:
        return min(self.lowest.values()), max(self.lowest.values())


@dataclass(frozen=True)
class LrPick:
    """What the protocol decided: every rate's score (in the grid's order), the rate of the
    lowest seed-mean (``winner``), the rates whose seeds' range overlaps the winner's
    (``tied``, the winner among them) and the rate kept, the largest tied (``picked``)."""

    scores: tuple[LrScore, ...]
    winner: float
    tied: tuple[float, ...]
    picked: float


def lowest_heldout(curve: HeldoutCurve) -> tuple[int, float]:
    """The run's lowest held-out loss and the (first) step it was reached at.

    Examples:
        >>> lowest_heldout(HeldoutCurve(DP, 16, ((16, 0.5), (32, 0.4), (48, 0.45)), lr=1e-3))
        (32, 0.4)
    """
    return min(curve.heldout_loss, key=lambda point: point[1])


def pick_lr(lr_runs: tuple[HeldoutCurve, ...]) -> LrPick:
    """The protocol's inner learning rate (``PROTOCOL``): of each rate, every seed's lowest
    held-out loss over its run; the lowest seed-mean wins; a rate whose seeds' range overlaps
    the winner's ties with it, and of the tied rates the largest is picked.

    Examples:
        >>> def runs(lr, lows):
        ...     return [HeldoutCurve(DP, 16, ((16, 1.0), (32, low)), seed, lr=lr)
        ...             for seed, low in enumerate(lows)]
        >>> pick = pick_lr(tuple(runs(1e-4, [0.50, 0.52]) + runs(3e-4, [0.40, 0.44])
        ...                      + runs(1e-3, [0.42, 0.45]) + runs(3e-3, [0.46, 0.47])))
        >>> pick.winner, pick.tied, pick.picked  # 1e-3's range overlaps 3e-4's; 3e-3's does not
        (0.0003, (0.0003, 0.001), 0.001)
        >>> [round(s.mean, 3) for s in pick.scores]
        [0.51, 0.42, 0.435, 0.465]
        >>> pick_lr(())
        Traceback (most recent call last):
        ...
        ValueError: no learning-rate runs to pick from; run python scripts/diloco_sweep.py
    """
    if not lr_runs:
        raise ValueError(f"no learning-rate runs to pick from; run {COMMAND}")
    lowest: dict[float, dict[int, float]] = {}
    for run in lr_runs:
        lowest.setdefault(run.lr, {})[run.seed] = lowest_heldout(run)[1]
    scores = tuple(LrScore(lr, seeds) for lr, seeds in lowest.items())
    best = min(scores, key=lambda s: s.mean)
    low, high = best.range
    tied = tuple(s.lr for s in scores if s.range[0] <= high and s.range[1] >= low)
    return LrPick(scores, best.lr, tied, max(tied))


def sweep_curves(results: DilocoResults, strategy: str, local_steps: int, skewed: bool, *,
                 replicas: int | None = None, warm_start: int | None = None
                 ) -> dict[int, HeldoutCurve]:
    """``strategy``'s curves at H = ``local_steps`` on the shards ``skewed`` says, by seed: on
    the plan's replicas (``replicas`` another count's) from scratch (``warm_start``: after that
    many data-parallel steps)."""
    found = {c.seed: c for c in results.curves
             if (c.strategy, c.local_steps, c.skewed, c.replicas, c.warm_start) == (
                 strategy, local_steps, skewed, replicas, warm_start)}
    if not found:
        runs = ", ".join(sorted({f"{c.strategy} H={c.local_steps}" for c in results.curves}))
        extra = "".join(f", {k}={v}" for k, v in (("replicas", replicas),
                                                  ("warm_start", warm_start)) if v is not None)
        raise ValueError(f"no run of {strategy} at H={local_steps}, skewed={skewed}{extra} in "
                         f"the sweep; it has {runs}")
    return found


def sweep_band(fractions: Sequence[float] = BAND) -> Band:
    """The band of targets on the sweep's task (part three's mixture on the stream): ``BAND``'s
    shares of the reducible loss gone (``curves.task_band``)."""
    return task_band(PART_THREE_MLP, fractions)


def sweep_cost(results: DilocoResults, strategy: str, local_steps: int) -> SweepCost:
    """What ``strategy`` at H = ``local_steps`` sends and holds."""
    found = [c for c in results.costs if (c.strategy, c.local_steps) == (strategy, local_steps)]
    if not found:
        raise ValueError(f"no cost of {strategy} at H={local_steps} in the sweep")
    return found[0]


def fit_figure_data(results: DilocoResults, floor: float) -> dict:
    """One panel: data parallelism's training loss (the mean of its minibatch losses since the
    last evaluation: fresh rows of the stream) and its held-out loss against the inner steps,
    seed means with their range, and the task's ``floor``. On a task that cannot be overfit the
    two lie on each other."""
    curves = list(sweep_curves(results, DP, 1, False).values())
    steps = [s for s, _ in curves[0].heldout_loss]
    series = []
    for label, field in (("training loss (fresh rows)", "train_loss"),
                         ("held-out loss", "heldout_loss")):
        losses = np.array([[loss for _, loss in getattr(c, field)] for c in curves])
        series.append({"label": label, "y": losses.mean(0).tolist(),
                       "low": losses.min(0).tolist(), "high": losses.max(0).tolist()})
    return {"panels": [{"kind": "line", "title": "Data parallelism on the stream", "x": steps,
                        "series": series, "xlabel": "inner steps", "ylabel": "loss",
                        "yscale": "log", "hline": floor}]}
