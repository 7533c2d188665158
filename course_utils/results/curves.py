"""Held-out curves, one way: what to train (``CurvePlan``), the one runner (``run_curves``, in
this process, every seed, through ``training.train.train``) and the one family of readers of
"when does a curve reach a target".

A curve is its ``(step, loss)`` evaluations: ``heldout_loss`` of the one saved record of a curve
(``HeldoutCurve``) or of a saved run (``StrategyRun``), or the pairs themselves. The readers:

- ``loss_at_step``: the loss at a step, linear between evaluations.
- ``step_to``: the step a target is first reached, read one of three ways (``read=``):
  ``"linear"`` interpolates between the last evaluation above and the first at or below (a
  curve evaluated every step or on a stated grid; step 20's rule); ``"evaluated"`` is the first
  evaluation at or below (a curve that only changes at syncs, DiLoCo's synced parameters);
  ``"sync"`` is the last sync (``syncs``) at or before that evaluation (the merge it sees).
  ``stay=True``: first reaching *and staying* at or below (from the last evaluation above on).
  ``None``: never reached in the steps run.
- ``steps_to_band``: ``step_to`` of each target of a band (the band within the curve's
  evaluated losses, else one line naming the fix); ``seconds_to``: steps times a step time.
- ``Band`` (``task_band``): a band of targets by the share of the reducible loss gone, above the
  stream task's floor; ``band_lead``: each seed's lead of one curve over another at each target
  of a band (``BandLead``: where it holds in every seed, where it flips).

The older readers (``results.training.steps_to``, ``crossing_step``, ``loss_at``;
``results.streaming.steps_to_target``)
are these readers with today's reading as their option.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from course_utils.figures.builders import lead_figure_data  # noqa: F401 - read as cu.curves'
from course_utils.problems.stream import STREAM_HELDOUT_ROWS  # the sample every band is read on

Points = tuple[tuple[int, float], ...]
READS = ("linear", "evaluated", "sync")


@dataclass(frozen=True)
class HeldoutCurve:
    """One run's held-out loss ``(step, loss)``, trained in one process from ``seed``'s initial
    parameters and minibatch order: the one saved record of a curve (``training.json``,
    ``streaming.json``, ``diloco.json``). The fields a file's runs differ in beyond these are
    given where they do (else ``None``, left out of the file): H (``local_steps``; 1 for data
    parallelism), ``skewed`` shards, the inner learning rate ``lr``, and ``train_loss`` at the
    held-out's steps (for a strategy with an outer step, the synced parameters' loss on all
    the training rows; for data parallelism the mean of its minibatch losses over the steps
    since the last evaluation), the ``replicas`` of a run on another count than the file's,
    and ``warm_start``: the data-parallel steps a run started after (its steps count on from
    them).

    Attributes:
        strategy: the strategy (or part-four row) trained.
        batch_size: rows each device draws per (micro-)step.
        heldout_loss: ``(step, loss)`` on the held-out rows.
        seed: the seed of the start and the minibatches (the task's rows are the file's).
    """

    strategy: str
    batch_size: int
    heldout_loss: Points
    seed: int = 0
    local_steps: int | None = None
    skewed: bool | None = None
    lr: float | None = None
    train_loss: Points | None = None
    replicas: int | None = None
    warm_start: int | None = None


def points_of(curve) -> Points:
    """The ``(step, loss)`` evaluations of ``curve`` (a record with ``heldout_loss``, or pairs).

    Examples:
        >>> points_of([(10, 0.9), (20, 0.5)])
        ((10, 0.9), (20, 0.5))
        >>> points_of({"heldout_loss": [[10, 0.9]]})
        Traceback (most recent call last):
        ...
        ValueError: a curve is a record with heldout_loss or (step, loss) pairs, not a dict; \
read the saved file with its saved_… reader
    """
    points = getattr(curve, "heldout_loss", curve)
    if isinstance(points, (str, dict)) or not all(
            isinstance(p, (tuple, list)) and len(p) == 2 for p in points):
        raise ValueError(f"a curve is a record with heldout_loss or (step, loss) pairs, not a "
                         f"{type(curve).__name__}; read the saved file with its saved_… reader")
    return tuple((step, loss) for step, loss in points)


def loss_at_step(curve, step: float) -> float:
    """``curve``'s loss at ``step``, linearly interpolated between its evaluations.

    Examples:
        >>> loss_at_step(((10, 0.9), (20, 0.5), (30, 0.4)), 15)
        0.7
    """
    steps, losses = zip(*points_of(curve))
    if not steps[0] <= step <= steps[-1]:
        raise ValueError(f"step {step} is outside the curve's evaluations, {steps[0]} to "
                         f"{steps[-1]}")
    return float(np.interp(step, steps, losses))


def step_to(curve, target: float, *, read: str = "linear", stay: bool = False,
            syncs: Sequence[int] = ()) -> float | None:
    """The step at which ``curve`` first reaches ``target`` (``stay``: and stays at or below it
    to the end of the run), read as ``read`` says (the module's docstring); ``None``: never.

    Examples:
        >>> curve = ((10, 0.9), (20, 0.5), (30, 0.6), (40, 0.4))
        >>> step_to(curve, 0.5), step_to(curve, 0.5, read="evaluated")
        (20.0, 20)
        >>> step_to(curve, 0.5, stay=True), step_to(curve, 0.5, read="evaluated", stay=True)
        (35.0, 40)
        >>> step_to(curve, 0.5, read="sync", syncs=(8, 16, 24)), step_to(curve, 0.1)
        (16, None)
    """
    if read not in READS:
        raise ValueError(f"read={read!r}: give one of {', '.join(READS)}")
    if read == "sync" and not syncs:
        raise ValueError("read='sync' reads the curve at its syncs: give their steps (syncs=)")
    points = points_of(curve)
    first = 0
    if stay:  # after the last evaluation above the target
        above = [i for i, (_, loss) in enumerate(points) if loss > target]
        first = above[-1] + 1 if above else 0
    found = next((i for i in range(first, len(points)) if points[i][1] <= target), None)
    if found is None:
        return None
    step, loss = points[found]
    if read == "evaluated":
        return step
    if read == "sync":
        return max((s for s in syncs if s <= step), default=0)
    if found == 0:
        return float(step)
    s0, l0 = points[found - 1]
    return s0 + (step - s0) * (l0 - target) / (l0 - loss)


def largest_climb(curve) -> float:
    """How far the curve's loss ever rises above its lowest so far (0: it never rises): a rise in
    the middle of a run that the end minus the lowest would hide.

    Examples:
        >>> round(largest_climb(((1, 1.0), (2, 0.5), (3, 0.8), (4, 0.4))), 6)
        0.3
    """
    low, climb = float("inf"), 0.0
    for _, loss in points_of(curve):
        low = min(low, loss)
        climb = max(climb, loss - low)
    return climb


def steps_to_band(curve, targets: Sequence[float], **read) -> dict[float, float | None]:
    """``step_to`` (with ``read``'s options) of each target of a band, which lies within the
    curve's evaluated losses.

    Examples:
        >>> steps_to_band(((10, 1.0), (20, 0.5)), (0.75, 0.6))
        {0.75: 15.0, 0.6: 18.0}
        >>> steps_to_band(((10, 1.0), (20, 0.5)), (0.4, 0.3))
        Traceback (most recent call last):
        ...
        ValueError: targets 0.3 to 0.4 lie outside the curve's losses, 0.5 to 1; give a band \
within them
    """
    losses = [loss for _, loss in points_of(curve)]
    low, high = min(targets), max(targets)
    if low < min(losses) or high > max(losses):
        raise ValueError(f"targets {low:g} to {high:g} lie outside the curve's losses, "
                         f"{min(losses):g} to {max(losses):g}; give a band within them")
    return {t: step_to(curve, t, **read) for t in targets}


def seconds_to(curve, target: float, step_s: float, **read) -> float | None:
    """Seconds to ``target``: ``step_to`` (with ``read``'s options) times ``step_s``."""
    step = step_to(curve, target, **read)
    return None if step is None else step * step_s


@dataclass(frozen=True)
class CurvePlan:
    """One strategy trained from each of ``seeds`` with ``train``'s keyword ``options`` (steps,
    batch size, held-out interval, H, model, …)."""

    strategy: str
    seeds: tuple[int, ...]
    options: dict = field(default_factory=dict)


def run_curves(mesh, plans: Sequence[CurvePlan],
               on_run: Callable[[CurvePlan, int], None] | None = None
               ) -> Iterator[tuple[CurvePlan, int, object]]:
    """Each plan's strategy trained on ``mesh`` in this process from every seed:
    ``(plan, seed, TrainingRun)`` in the plans' order; ``on_run(plan, seed)`` before each."""
    from course_utils.training.strategies import spec
    from course_utils.training.train import train

    for plan in plans:
        spec(plan.strategy)  # an unknown strategy: one line, before anything trains
    for plan in plans:
        for seed in plan.seeds:
            if on_run is not None:
                on_run(plan, seed)
            yield plan, seed, train(mesh, plan.strategy, seed=seed, **plan.options)


def reducible_band(start: float, floor: float,
                   fractions: Sequence[float] = (0.5, 0.6, 0.7, 0.8, 0.9)) -> tuple[float, ...]:
    """The losses at which each of ``fractions`` of the reducible loss (``start`` − ``floor``:
    what any model can still learn) is gone: a band of targets, easiest first.

    Examples:
        >>> [round(t, 6) for t in reducible_band(2.0, 0.5, (0.5, 0.9))]
        [1.25, 0.65]
        >>> reducible_band(0.5, 2.0)
        Traceback (most recent call last):
        ...
        ValueError: the start (0.5) must lie above the floor (2): nothing is left to learn
    """
    if not start > floor:
        raise ValueError(f"the start ({start:g}) must lie above the floor ({floor:g}): nothing "
                         "is left to learn")
    if not all(0 < f < 1 for f in fractions):
        raise ValueError(f"fractions must lie strictly between 0 and 1, got {tuple(fractions)}")
    return tuple(start - f * (start - floor) for f in fractions)


@dataclass(frozen=True)
class Band:
    """A band of targets on a task whose floor is known: the loss of a model that has learned
    nothing (``start``: log of the class count, a uniform guess), the floor no model passes
    (the mixture's Bayes loss, ``problems.stream.bayes_loss``, with its standard error), and
    the ``fractions`` of the reducible loss (start − floor) gone at each target; the held-out
    sample's rows and the standard error of a loss near the floor on them."""

    start: float
    floor: float
    floor_error: float
    fractions: tuple[float, ...]
    heldout_rows: int = 0
    heldout_error: float = 0.0

    @property
    def targets(self) -> tuple[float, ...]:
        """The target losses, easiest first (``reducible_band``)."""
        return reducible_band(self.start, self.floor, self.fractions)

    def fraction_of(self, target: float) -> float:
        """The share of the reducible loss gone at ``target``.

        Examples:
            >>> round(Band(2.0, 0.5, 0.0, (0.5,)).fraction_of(0.65), 6)
            0.9
        """
        return (self.start - target) / (self.start - self.floor)


def task_band(mlp, fractions: Sequence[float]) -> Band:
    """The stream task's band for ``mlp``'s mixture (``problems.stream``): its floor estimated
    once (about a second), the start log(classes).

    Examples:
        >>> from course_utils.problems.classification import PART_THREE_MLP
        >>> band = task_band(PART_THREE_MLP, (0.5, 0.9))
        >>> round(band.start, 3), 0.31 < band.floor < 0.33, len(band.targets)
        (2.079, True, 2)
    """
    from course_utils.problems.stream import FLOOR_ROWS, bayes_loss

    reducible_band(1.0, 0.0, fractions)  # bad fractions: one line, before the estimate
    floor, error = bayes_loss(mlp)
    per_row = error * math.sqrt(FLOOR_ROWS)  # the spread of a near-floor model's row losses
    return Band(float(np.log(mlp.classes)), floor, error, tuple(fractions), STREAM_HELDOUT_ROWS,
                per_row / math.sqrt(STREAM_HELDOUT_ROWS))


@dataclass(frozen=True)
class BandLead:
    """How much sooner curve A reaches each target of a band than curve B, seed by seed
    (each seed paired with itself): ``leads[target]`` holds B's time ÷ A's time per seed (above
    1: A first; ``inf``: only A reaches it, 0: only B; ``None``: neither, in the steps run)."""

    targets: tuple[float, ...]
    leads: dict[float, tuple[float | None, ...]]

    def holds(self) -> tuple[float, ...]:
        """The targets at which A is first in every seed."""
        return tuple(t for t in self.targets if all(r is not None and r > 1
                                                     for r in self.leads[t]))

    def flips(self) -> tuple[float, ...]:
        """The targets at which A is not first in every seed (B first, a tie or never)."""
        return tuple(t for t in self.targets if t not in self.holds())

    def trails(self) -> tuple[float, ...]:
        """The targets at which B is first in every seed (A's lead below 1 in each)."""
        return tuple(t for t in self.targets if all(r is not None and r < 1
                                                     for r in self.leads[t]))


def describe_lead(lead: BandLead, band: Band, a: str = "A", b: str = "B") -> str:
    """``lead`` over ``band`` in one line: runs of neighbouring targets by who is first in
    every seed (``a``, ``b``; neither reaches it in any seed; else split), each with its shares
    of the reducible loss and the seeds' range of the lead (B's time ÷ A's; ``never``: a run
    that does not reach a target).

    Examples:
        >>> band = Band(2.0, 0.0, 0.0, (0.5, 0.6, 0.7))
        >>> lead = BandLead(band.targets, dict(zip(band.targets, [(1.5, 1.2), (1.1, 0.9),
        ...                                                       (0.8, 0.5)])))
        >>> describe_lead(lead, band, "D", "P")
        'D first at 50 % (1.20–1.50×); split at 60 % (0.90–1.10×); P first at 70 % (0.50–0.80×)'
    """
    holds, trails = set(lead.holds()), set(lead.trails())
    groups: list[tuple[str, list[float]]] = []
    for target in band.targets:
        who = (f"{a} first" if target in holds else f"{b} first" if target in trails else
               "neither reaches it" if all(r is None for r in lead.leads[target]) else "split")
        if groups and groups[-1][0] == who:
            groups[-1][1].append(target)
        else:
            groups.append((who, [target]))
    parts = []
    for who, targets in groups:
        shares = [f"{round(100 * band.fraction_of(t), 1):g}" for t in targets]
        where = f"{shares[0]} %" if len(shares) == 1 else f"{shares[0]}–{shares[-1]} %"
        values = [r for t in targets for r in lead.leads[t]]
        finite = [r for r in values if r is not None and 0 < r < float("inf")]
        span = f"{min(finite):.2f}–{max(finite):.2f}×" if finite else ""
        never = "some never" if len(finite) < len(values) else ""
        parts.append(f"{who} at {where} ({', '.join(x for x in (span, never) if x)})")
    return "; ".join(parts)


def band_lead(a: Sequence, b: Sequence, targets: Sequence[float], *, step_s_a: float = 1.0,
              step_s_b: float = 1.0, **read) -> BandLead:
    """``BandLead`` of the curves ``a`` over ``b`` (one per seed, in the same seed order) at each
    target, their times ``seconds_to`` with each one's step time and ``step_to``'s ``read``
    options (``stay=True``: first reaching and staying).

    Examples:
        >>> fast = [((10, 1.0), (20, 0.5), (30, 0.3)), ((10, 1.0), (20, 0.6), (30, 0.3))]
        >>> slow = [((10, 1.0), (20, 0.8), (30, 0.4)), ((10, 1.0), (20, 0.5), (30, 0.5))]
        >>> lead = band_lead(fast, slow, (0.7, 0.45), read="evaluated")
        >>> lead.leads
        {0.7: (1.5, 1.0), 0.45: (1.0, inf)}
        >>> lead.holds(), lead.flips()
        ((), (0.7, 0.45))
    """
    if len(a) != len(b) or not a:
        raise ValueError(f"pair the seeds: {len(a)} curves against {len(b)}; give one curve per "
                         "seed on each side, in the same seed order")
    leads = {}
    for target in targets:
        pairs = [(seconds_to(x, target, step_s_a, **read), seconds_to(y, target, step_s_b, **read))
                 for x, y in zip(a, b)]
        leads[target] = tuple(_ratio(ta, tb) for ta, tb in pairs)
    return BandLead(tuple(targets), leads)


def _ratio(ta: float | None, tb: float | None) -> float | None:
    """B's time ÷ A's: ``inf`` where only A reaches the target, 0 where only B, ``None`` where
    neither; both at step 0 is a tie."""
    if ta is None or tb is None:
        return None if ta is None and tb is None else (0.0 if ta is None else float("inf"))
    if ta == 0:
        return 1.0 if tb == 0 else float("inf")
    return tb / ta

