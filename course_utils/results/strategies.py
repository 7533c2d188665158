"""The strategies' saved runs (``course bench --strategies``) that notebooks 14–16 read, and the
figures drawn from them.

``run_plan(mesh)`` trains every run of ``PLAN`` (each strategy for ``PLAN_STEPS`` steps; local SGD
for twice as long, with H = 1, 4, 8, 16, on shards of one distribution and on skewed shards), each
step on a minibatch of ``BATCH_SIZE`` rows per device drawn from its shard (the same seed, so the
same batches, for every run), and keeps, per run (a ``StrategyRun``), the loss per step, the loss
on the held-out rows every ``HELDOUT_EVERY`` steps, the bytes per step, the memory per device and
the final loss. JSON appears only at the file's boundary, through ``results.records``.
The saved copy, ``course_utils/saved/strategies.json``, was made on ``DEVICES`` devices;
``tests/test_strategy_results.py`` keeps it in sync with the code.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from jax.sharding import Mesh

from course_utils.results.curves import CurvePlan, run_curves
from course_utils.results.meta import RunMeta, this_run
from course_utils.results.records import load_saved
from course_utils.training.run import Memory
from course_utils.training.strategies import SPECS, saved_in

PLAN_STEPS = 192  # a multiple of every H of the plan: local SGD has just averaged
DEVICES = 4
BATCH_SIZE = 64  # rows per device per step: 48 steps are one pass over the training rows
HELDOUT_EVERY = 16  # a multiple of every H: local SGD's held-out loss is the averaged model's


def _plan_run(name: str, options: dict) -> dict:
    """A run of the plan: ``train``'s options, ``steps_factor`` × ``PLAN_STEPS`` steps if given."""
    run = {"strategy": name, **options}
    if "steps_factor" in run:
        run["steps"] = run.pop("steps_factor") * PLAN_STEPS
    return run


# the run every other's bytes are read against, and the runs of each H (``SavedRuns.curves``)
(BASELINE,) = saved_in("strategies.json", "baseline")
(_EVERY_H,) = saved_in("strategies.json", "every_h")  # local SGD, synced every H steps
# every strategy's saved runs, as its description gives them (``SavedRuns.runs``)
PLAN = tuple(_plan_run(name, o) for name, s in SPECS.items() for o in s.saved.runs)


def run_label(run: dict) -> str:
    """A short name of a run: the strategy and whatever option differs from the default.

    Examples:
        >>> run_label({"strategy": "local_sgd", "local_steps": 8, "skewed": True})
        'local_sgd H=8 skewed'
        >>> run_label({"strategy": "topk_ef", "topk_fraction": 0.005})
        'topk_ef 0.5%'
    """
    label = run["strategy"]
    if "topk_fraction" in run:
        label += f" {run['topk_fraction']:.1%}".replace(".0%", "%")
    if "local_steps" in run:
        label += f" H={run['local_steps']}"
    if run.get("skewed"):
        label += " skewed"
    return label


@dataclass(frozen=True, kw_only=True)
class StrategyRun:
    """One saved run of the plan: its options, its curves and its memory per device.

    Attributes:
        strategy: the strategy trained.
        topk_fraction: the option, where the plan gives it (else ``None``).
        local_steps: the option, where the plan gives it.
        skewed: the option, where the plan gives it.
        label: ``run_label`` of its options.
        steps: steps trained.
        loss: the training loss at each step (of that step's minibatch).
        bytes_per_step: ring payload per device per step.
        memory: bytes per device of parameters, gradients and optimizer state.
        state_bytes_per_device: all of ``memory`` (``memory.total``).
        final_loss: the final parameters' loss on all the data.
        averaged_loss: local SGD: ``(step, loss)`` after each averaging; else ``None``.
        heldout_loss: ``(step, loss)`` on the held-out rows every ``HELDOUT_EVERY`` steps.
        cumulative_error: the relative error of the summed gradient after the last step
            (``None`` where no local gradient is formed).
    """

    strategy: str
    topk_fraction: float | None = None
    local_steps: int | None = None
    skewed: bool | None = None
    label: str
    steps: int
    loss: tuple[float, ...]
    bytes_per_step: float
    memory: Memory
    state_bytes_per_device: int
    final_loss: float
    averaged_loss: tuple[tuple[int, float], ...] | None
    heldout_loss: tuple[tuple[int, float], ...]
    cumulative_error: float | None


_OPTIONS = ("topk_fraction", "local_steps", "skewed")


@dataclass(frozen=True)
class StrategyResults:
    """Every run of a plan, trained on ``devices`` devices for ``steps`` steps (local SGD:
    twice as many), on minibatches of ``batch_size`` rows per device, the held-out loss read
    every ``heldout_every`` steps; how it was made (``meta``)."""

    meta: RunMeta
    devices: int
    steps: int
    batch_size: int
    heldout_every: int
    runs: tuple[StrategyRun, ...]


def run_plan(mesh: Mesh, plan: Sequence[dict] = PLAN, steps: int = PLAN_STEPS,
             on_run: Callable[[str], None] | None = None) -> StrategyResults:
    """Train every run of ``plan`` on ``mesh`` (seed 0, ``curves.run_curves``); ``on_run(label)``
    is called before each."""
    started, runs = time.monotonic(), []
    plans = [CurvePlan(options["strategy"], (0,), {
        "steps": steps, "batch_size": BATCH_SIZE, "heldout_every": HELDOUT_EVERY,
        **{k: v for k, v in options.items() if k != "strategy"}}) for options in plan]

    def label(p: CurvePlan) -> str:
        return run_label({"strategy": p.strategy, **p.options})

    for curve_plan, _, run in run_curves(mesh, plans, on_run=None if on_run is None else (
            lambda p, seed: on_run(label(p)))):
        options = curve_plan.options
        runs.append(StrategyRun(
            strategy=run.strategy, **{k: options[k] for k in _OPTIONS if k in options},
            label=label(curve_plan), steps=options["steps"], loss=tuple(run.loss),
            bytes_per_step=run.bytes_per_step, memory=run.memory,
            state_bytes_per_device=run.memory.total, final_loss=run.final_loss,
            averaged_loss=_curve(run.averaged_loss), heldout_loss=_curve(run.heldout_loss),
            cumulative_error=(run.cumulative_error or [None])[-1]))
    meta = this_run("course bench --strategies", time.monotonic() - started)
    return StrategyResults(meta, mesh.size, steps, BATCH_SIZE, HELDOUT_EVERY, tuple(runs))


def _curve(points) -> tuple[tuple[int, float], ...] | None:
    """``(step, loss)`` pairs as a record holds them."""
    return None if points is None else tuple((step, loss) for step, loss in points)


def saved_strategy_results() -> StrategyResults:
    """The saved run (``course_utils/saved/strategies.json``). Regenerate:
    ``course bench --strategies --out build/bench && cp build/bench/strategies.json
    course_utils/saved/strategies.json``.

    Raises:
        ValueError: the file is missing or not this version's (names the file and the field).
    """
    return load_saved(StrategyResults, "strategies.json", "course bench --strategies")


def find_run(results: StrategyResults, label: str) -> StrategyRun:
    """The run called ``label`` (see ``run_label``) in ``results``."""
    for run in results.runs:
        if run.label == label:
            return run
    names = ", ".join(r.label for r in results.runs)
    raise KeyError(f"no run {label!r}; the runs are: {names}")


def sent_bytes(run: StrategyRun) -> list[float]:
    """Bytes each device has sent by the end of each step of ``run`` (steps × bytes per step)."""
    return [run.bytes_per_step * (t + 1) for t in range(len(run.loss))]


def heldout_at(run: StrategyRun, step: int) -> float:
    """The loss of ``run``'s model on the held-out rows after ``step`` steps (a multiple of the
    plan's ``HELDOUT_EVERY``)."""
    curve = dict(run.heldout_loss)
    if step not in curve:
        raise ValueError(f"{run.label} has no held-out loss at step {step}; it has one every "
                         f"{run.heldout_loss[0][0]} steps up to {run.heldout_loss[-1][0]}")
    return curve[step]


def data_loss_at(run: StrategyRun, step: int) -> float:
    """The loss of ``run``'s model on all the data after ``step`` steps: the final loss of a run
    of ``step`` steps, the averaged parameters' loss for local SGD."""
    if run.averaged_loss:
        return dict(run.averaged_loss)[step]
    if run.steps != step:
        raise ValueError(f"{run.label} ran {run.steps} steps, not {step}")
    return run.final_loss


# the closing figure's points, a family (one colour and legend entry) at a time: (label, name),
# in the registry's order (``SavedRuns.points``)
TRADEOFF_FAMILIES = tuple(
    (family, tuple(p for s in SPECS.values() if s.family == family for p in s.saved.points))
    for family in dict.fromkeys(s.family for s in SPECS.values() if s.saved.points))
# one bar per scheme (``SavedRuns.memory_bar``; local SGD holds what data parallelism holds)
MEMORY_RUNS = tuple(s.saved.memory_bar for s in SPECS.values() if s.saved.memory_bar)


def tradeoff_figure_data(results: StrategyResults) -> dict:
    """Every scheme on one picture: the held-out loss after ``results.steps`` steps against the
    bytes per step (a fraction of data parallelism's), each point named, one colour per family
    (ZeRO-1/2/3 send DP's bytes and, on the same batches, reach DP's loss: one point); and the
    memory per device of every scheme."""
    steps, base = results.steps, find_run(results, BASELINE).bytes_per_step
    series, fractions = [], []
    for family, members in TRADEOFF_FAMILIES:
        runs = [find_run(results, label) for label, _ in members]
        x = [r.bytes_per_step / base for r in runs]
        fractions += x
        series.append({"label": family, "x": x, "y": [heldout_at(r, steps) for r in runs],
                       "point_labels": [name for _, name in members]})
    memory = [(find_run(results, label), name) for label, name in MEMORY_RUNS]
    return {"panels": [
        {"kind": "line", "x": _fraction_ticks(fractions), "xscale": "log", "series": series,
         "title": f"held-out loss after {steps} steps ({results.devices} devices)",
         "xlabel": "bytes per step / data parallelism's", "ylabel": "held-out loss"},
        {"kind": "bar", "labels": [name for _, name in memory],
         "series": [{"label": "parameters + gradient + optimizer state",
                     "y": [round(r.memory.total / 1024, 1) for r, _ in memory]}],
         "title": f"memory per device ({results.devices} devices)", "ylabel": "KiB"},
    ]}


def _heldout_series(run: StrategyRun, label: str, *, by_bytes: bool) -> dict:
    """A run's held-out loss against its steps, or against the bytes sent so far."""
    steps, losses = zip(*run.heldout_loss)
    x = [s * run.bytes_per_step for s in steps] if by_bytes else list(steps)
    return {"label": label, "x": x, "y": list(losses)}


def _fraction_ticks(fractions: Sequence[float]) -> list[float]:
    """Powers of 2 within the span of ``fractions`` (ticks of a log axis of fractions of data
    parallelism's bytes; 1, data parallelism itself, among them when in the span).

    Examples:
        >>> _fraction_ticks([0.018, 0.25, 1.0, 1.5])
        [0.03125, 0.0625, 0.125, 0.25, 0.5, 1.0]
    """
    import math

    low, high = math.ceil(math.log2(min(fractions))), math.floor(math.log2(max(fractions)))
    return [2.0**k for k in range(low, high + 1)]


def _byte_ticks(series: Sequence[dict]) -> list[int]:
    """Powers of 4 that span the bytes of ``series`` (ticks of a log₂ axis of bytes)."""
    sent = [x for s in series for x in s["x"]]
    return [2**e for e in range(int(min(sent)).bit_length() - 1, int(max(sent)).bit_length(), 2)]


def heldout_figure_data(results: StrategyResults, labels: Sequence[str],
                        steps_only_without: Sequence[str] = (), from_step: int = 0) -> dict:
    """Two panels of the saved runs ``labels``: the held-out loss per step from ``from_step`` on
    (so the end, where the schemes differ, is not squeezed under the first steps' scale; without
    the runs in ``steps_only_without``, whose curves would hide under others), and against the
    bytes each device has sent so far, the whole run."""
    runs = {label: find_run(results, label) for label in labels}
    per_step = []
    for k, r in runs.items():
        if k not in steps_only_without:
            s = _heldout_series(r, k, by_bytes=False)
            keep = [i for i, step in enumerate(s["x"]) if step >= from_step]
            if not keep:
                raise ValueError(f"from_step={from_step} is past the last held-out point "
                                 f"({s['x'][-1]}); pass a smaller step")
            per_step.append({**s, "x": [s["x"][i] for i in keep], "y": [s["y"][i] for i in keep]})
    per_byte = [_heldout_series(r, k, by_bytes=True) for k, r in runs.items()]
    span = f"from step {from_step}, " if from_step else ""
    return {"panels": [
        {"kind": "line", "title": f"held-out loss per step ({span}{results.devices} devices, "
         "saved)", "x": per_step[0]["x"], "xlabel": "step", "ylabel": "held-out loss",
         "series": per_step},
        {"kind": "line", "title": "held-out loss against bytes sent", "x": _byte_ticks(per_byte),
         "xscale": "log", "xunit": "bytes", "xlabel": "bytes sent per device so far",
         "ylabel": "held-out loss", "series": per_byte},
    ]}


def local_sgd_figure_data(results: StrategyResults, hs: Sequence[int]) -> dict:
    """Local SGD with each H against data parallelism, held-out loss against the bytes sent:
    one panel on shards of one distribution, one on skewed shards."""
    dp = _heldout_series(find_run(results, BASELINE),
                         "DP, shuffled shards (left: under H = 1)", by_bytes=True)
    panels = []
    for tail, title in (("", "shards of one distribution"), (" skewed", "skewed shards")):
        series = [dp] + [_heldout_series(find_run(results, run_label(
            {"strategy": _EVERY_H, "local_steps": h, "skewed": bool(tail)})), f"H = {h}",
            by_bytes=True) for h in hs]
        panels.append({"kind": "line", "title": title, "xscale": "log", "xunit": "bytes",
                       "x": _byte_ticks(series), "series": series,
                       "xlabel": "bytes sent per device so far",
                       "ylabel": "held-out loss, averaged model"})
    return {"panels": panels}
