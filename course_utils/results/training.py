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
