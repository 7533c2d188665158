"""The records of the strategy registry (``training.strategies``): how a strategy's state is
placed (``Parts``), how its replicas agree (``Sync``), its saved runs and curves (``SavedRuns``,
``SavedPlan``), part four's rows that run it (``PartFour``), and the whole description
(``StrategySpec``). The entries themselves are data in ``training.strategies``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from course_utils.models.cost_model import Topology
from course_utils.models.link_traffic import Traffic, TrafficSettings
from course_utils.training.optimizers import MOMENTUM, Optimizer
from course_utils.training.state import Context, Strategy, TrainState, placed_init

__all__ = ["Parts", "Sync", "SavedRuns", "SavedPlan", "PartFour", "StrategySpec"]


class Parts(NamedTuple):
    """How ``init`` places the state: w, the optimizer's state and the kept gradient each as
    ``replicated``, ``sliced`` or ``own`` (``state.place``; no kept gradient if ``None``), the
    parts ``extra(w0, mesh, ctx)`` adds (a residual, an outer optimizer's state), w's order
    ``layout(n, p, mlp)`` (zero3's chunk of every layer per device), and on a two-axis mesh the
    ``axis`` the ``sliced`` and ``own`` forms run along (``Context.axis``; ``None``: the one
    axis). Which part of the memory per device each field counts as: ``state.MEMORY_PART``."""

    params: str
    optimizer: str
    gradient: str | None
    extra: Callable | None = None
    layout: Callable[[int, int, object], np.ndarray] | None = None
    axis: str | None = None


class Sync(NamedTuple):
    """How and when the replicas agree.

    Attributes:
        outer: ``None``: inside every step (the step's own collectives). Else the outer step
            ``outer(state, ctx) -> state``, one device's view, run every H steps (``train``'s
            ``local_steps``): local SGD's is the ``pmean`` of the parameters; an outer
            optimizer keeps its state in ``TrainState.outer``, placed by ``Parts.extra``
            (part five's: a ``diloco.OuterStep``, whose ``exchange`` is the body the cluster's
            sync runs too, on its stream device).
        axis: the mesh axis the replicas sync over (``None``: the data axis; ``"host"`` for
            HSDP's gradient and part five's syncs on a ``("host", "device")`` mesh).
        fragments: F, parameter fragments synced one at a time, one per outer step in turn:
            the outer step runs every H/F steps (1: all at once, every H; Streaming DiLoCo's
            is more; ``training.streaming``).
        dtype: what the sync sends (``quantize.FORMATS``: ``"float32"``, or ``"int8"`` and
            ``"int4"`` codes with a scale per block, summed in float32).
        stream: a device used as the communication stream (``None``: the compute devices;
            ``train`` runs an overlap in one process, by ``overlap`` and ``merge``, without one).
        overlap: τ, the inner steps between an outer step and the merge of its result
            (``merge``, run after the inner step τ later exactly; 0: merged in the outer step).
        mixing: α, the weight of the replica's own values when a fragment merges
            (``streaming.mix``; 0: replaced by the outer step's result, as DiLoCo).
        merge: ``merge(state, ctx) -> state``, one device's view: the result of the last
            outer step merged into the replicas' parameters, ``overlap`` steps after it
            (``None``: the outer step merges at once; part five's: ``diloco.Merge``).
    """

    outer: Callable[[TrainState, Context], TrainState] | None = None
    axis: str | None = None
    fragments: int = 1
    dtype: str = "float32"
    stream: str | None = None
    overlap: int = 0
    mixing: float = 0.0
    merge: Callable[[TrainState, Context], TrainState] | None = None


class SavedRuns(NamedTuple):
    """The strategy's runs in the saved plan (``results.strategies.PLAN``: ``train``'s options
    beyond ``strategy``; ``steps_factor`` times the plan's steps), its points on the closing
    figure (``(run label, point name)``), its memory bar (``(run label, bar name)``) and its
    role in each saved file of curves (``(file, role)``: the baseline, the compared, …;
    ``saved_in``; part five's files' numbers: ``SAVED_PLANS``)."""

    runs: tuple[dict, ...] = ({},)
    points: tuple[tuple[str, str], ...] = ()
    memory_bar: tuple[str, str] | None = None
    curves: tuple[tuple[str, str], ...] = ()


class SavedPlan(NamedTuple):
    """One of part five's saved curve files: every H of ``local_steps`` from each of ``seeds``,
    ``replica_rows`` rows per replica per inner step, ``steps`` inner steps, the held-out loss
    every ``heldout_every`` steps (data parallelism's; the others' at their syncs, where the
    file says so), the task's rows of ``data_seed``; its strategies: ``saved_in(file)``."""

    local_steps: tuple[int, ...]
    seeds: tuple[int, ...]
    replica_rows: int
    steps: int
    heldout_every: int
    data_seed: int = 0


class PartFour(NamedTuple):
    """A row of part four that runs the strategy (``training.part_four``: timed by ``course
    cluster --measure training``, read by the step model).

    Attributes:
        row: the row's name in the saved runs (``training.json``; ``None``: the strategy's).
        accumulate: micro-steps per optimizer step.
        local_steps: H, for a strategy that syncs every H steps.
        curve: the registered strategy ``train`` runs for the row's held-out curve, when the
            strategy's own step runs on a mesh ``train`` does not take (``None``: its own).
        modelled: the registered strategy whose traffic the step model counts for the row
            (``None``: its own).
    """

    row: str | None = None
    accumulate: int = 1
    local_steps: int = 1
    curve: str | None = None
    modelled: str | None = None


@dataclass(frozen=True)
class StrategySpec:
    """One strategy, whole.

    Attributes:
        name: what code calls it (``train(mesh, name, ...)``).
        label: as a reader says it (``figures.labels.human``).
        family: its family on the closing figure (one colour and legend entry).
        parts: how ``init`` places the state (``Parts``).
        step: ``step(state, x, y, ctx) -> (TrainState, StepInfo)``, one device's view.
        sync: how and when the replicas agree (``Sync``).
        optimizer: what the inner step applies (``optimizers.Optimizer``).
        accumulates: its step starts from a whole local gradient, which accumulation sums.
        compresses: it sends fewer bits per step than data parallelism (part four's schemes).
        traffic: the step model's bytes over a host's link, ``traffic(n, topology, settings)``
            (``training.traffic.strategy_traffic``); ``None``: not modelled.
        mesh_axes: the mesh it runs on (``None``: any one-axis mesh, ``data_mesh()``; else
            ``train`` takes a mesh of these axes, ``replica_mesh()``).
        saved: its runs in the saved plan and on its figures (``SavedRuns``).
        part_four: part four's rows that run it (``PartFour``).
        short_label: its name where a figure's legend adds the setting (``"local SGD H=8"``;
            ``figures.labels.short``; ``None``: the label).
    """

    name: str
    label: str
    family: str
    parts: Parts
    step: Callable
    sync: Sync = Sync()
    optimizer: Optimizer = MOMENTUM
    accumulates: bool = True
    compresses: bool = False
    traffic: Callable[[int, Topology, TrafficSettings], Traffic] | None = None
    mesh_axes: tuple[str, ...] | None = None
    saved: SavedRuns = field(default_factory=SavedRuns)
    part_four: tuple[PartFour, ...] = ()
    short_label: str | None = None

    def __post_init__(self):
        if self.short_label is None:
            object.__setattr__(self, "short_label", self.label)

    @property
    def init(self) -> Callable:
        """``init(params, mesh, ctx) -> TrainState``: the state placed as ``parts`` says."""
        return placed_init(self.parts.params, self.parts.optimizer, self.parts.gradient,
                           self.parts.extra, layout=self.parts.layout)

    @property
    def strategy(self) -> Strategy:
        """Its two functions, ``init`` and ``step``."""
        return Strategy(self.init, self.step)

    def flat(self, params, n: int, p: int, mlp) -> np.ndarray:
        """``params`` of its state (device 0's copy, or the slices in order) as the task's flat
        vector of length n: its layout put back in order."""
        w = np.asarray(params)[:n]
        return w if self.parts.layout is None else w[np.argsort(self.parts.layout(n, p, mlp))]
