"""Part four's measurements (``course cluster --measure training``, ``training.json``): each
strategy's step time on the cluster at each link rate and batch size, and its held-out loss
curve, which does not depend on the link; time to a target loss is the steps a curve needs to
reach it times the measured step time.
"""

from __future__ import annotations

from dataclasses import dataclass


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


@dataclass(frozen=True)
class HeldoutCurve:
    """A strategy's held-out loss after each ``every``-th step, trained in one process."""

    strategy: str
    batch_size: int
    heldout_loss: tuple[tuple[int, float], ...]


@dataclass(frozen=True)
class TrainingMeta:
    """How the run was made: the cluster's shape, the plan, the versions, the cores and the
    machine's default TCP congestion control (the hosts used ``tcp``)."""

    hosts: int
    devices_per_host: int
    plan: str
    python: str
    jax: str
    jaxlib: str
    cores: int
    tcp: str
    default_tcp: str
    seconds: float


@dataclass(frozen=True)
class TrainingResults:
    """What ``training.json`` holds."""

    meta: TrainingMeta
    rows: tuple[TrainingRow, ...]
    curves: tuple[HeldoutCurve, ...]


def steps_to(curve: HeldoutCurve, target: float) -> int | None:
    """The first step at which ``curve``'s held-out loss is at or below ``target`` (``None``:
    never, in the steps run).

    Examples:
        >>> steps_to(HeldoutCurve("dp", 64, ((10, 0.9), (20, 0.5), (30, 0.4))), 0.5)
        20
    """
    return next((step for step, loss in curve.heldout_loss if loss <= target), None)


def time_to(results: TrainingResults, strategy: str, link_rate: str, batch_size: int,
            target: float) -> float | None:
    """Seconds for ``strategy`` to reach ``target`` at ``link_rate`` and ``batch_size``: its
    curve's steps to the target times its measured step time there (``None``: not reached)."""
    curve = next((c for c in results.curves
                  if (c.strategy, c.batch_size) == (strategy, batch_size)), None)
    row = next((r for r in results.rows
                if (r.strategy, r.link_rate, r.batch_size) == (strategy, link_rate, batch_size)),
               None)
    if curve is None or row is None:
        raise ValueError(f"no run of {strategy} at {link_rate} and batch size {batch_size} in "
                         "these results; run course cluster --measure training with them")
    steps = steps_to(curve, target)
    return None if steps is None else steps * row.step_s


def modelled_step_s(row: TrainingRow, hosts: int, devices: int, *, alpha_s: float = 0.0) -> float:
    """The step model's seconds for ``row``: its measured compute plus its strategy's link bytes
    at the row's rate (``FRAME_SHARE`` of it carries data) and ``alpha_s`` per message step.

    Examples:
        >>> row = TrainingRow("data_parallel", "200mbit", 64, 0.3, 0.05, 0.25)
        >>> round(modelled_step_s(row, 2, 2), 3)  # 0.05 + 1.5 · 4.27 MiB / (25 MB/s · 0.956)
        0.331
    """
    from course_utils.models.cost_model import Topology
    from course_utils.models.links import FRAME_SHARE, rate_bytes_per_s
    from course_utils.models.step import step_time, strategy_traffic
    from course_utils.problems.classification import PART_FOUR, padded_size
    from course_utils.training.part_four import LOCAL_STEPS, STEPS, TOPK_FRACTION

    n = padded_size(hosts * devices, PART_FOUR)
    model = {"accumulation": "data_parallel"}.get(row.strategy, row.strategy)
    if STEPS.get(row.strategy) is None:
        raise ValueError(f"no step model for {row.strategy!r}; use one of {', '.join(STEPS)}")
    traffic = strategy_traffic(
        model, n, Topology(hosts, devices), topk=max(1, round(TOPK_FRACTION * n)),
        matrices=[s for _, s in PART_FOUR.layers if len(s) == 2],
        dense=sum(s[0] for _, s in PART_FOUR.layers if len(s) == 1), local_steps=LOCAL_STEPS)
    rate = rate_bytes_per_s(row.link_rate) * FRAME_SHARE
    return step_time(traffic, row.compute_s, alpha_s=alpha_s, bytes_per_s=rate).step_s


def saved_training_results() -> TrainingResults:
    """The saved full run, ``course_utils/saved/training.json``. Regenerate (as root, about 30
    minutes): ``course cluster --measure training --plan full --link-rate
    50mbit,200mbit,1gbit,10gbit --timeout 3000 --out build/training``, then copy
    ``training.json``."""
    import json
    from importlib.resources import files

    from course_utils.results.records import from_json

    path = files("course_utils").joinpath("saved", "training.json")
    return from_json(TrainingResults, json.loads(path.read_text()), str(path))
