"""Part four's training step timed on an accelerator (``accelerator_step.json``, made by
``scripts/time_step_on_accelerator.py`` on a TPU chip): how fast a chip computes the step the
cluster's hosts compute, for steps 18 and 22 to set beside their links."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from course_utils.results.meta import RunMeta
from course_utils.results.records import load_saved


@dataclass(frozen=True)
class StepTiming:
    """One batch size: the step's FLOPs (``models.step.mlp_flops``) and, per repeat, the median
    milliseconds of a step blocked on its result (``blocked_ms``) and the milliseconds per step
    of steps dispatched back to back, blocked once at the end (``back_to_back_ms``)."""

    rows: int
    flops: float
    blocked_ms: tuple[float, ...]
    back_to_back_ms: tuple[float, ...]

    @property
    def blocked(self) -> float:
        """The median over the repeats of ``blocked_ms``."""
        return statistics.median(self.blocked_ms)

    @property
    def back_to_back(self) -> float:
        """The median over the repeats of ``back_to_back_ms``."""
        return statistics.median(self.back_to_back_ms)

    @property
    def flops_per_s(self) -> float:
        """The FLOP rate of steps dispatched back to back."""
        return self.flops / (self.back_to_back * 1e-3)


@dataclass(frozen=True)
class AcceleratorRun:
    """Timings on one device of ``device_kind`` (``platform``: ``tpu``, ``gpu``, ``cpu``), with
    ``libtpu``'s version where there is one, ``steps`` steps per repeat, at the default matmul
    precision of JAX on that platform (``precision``)."""

    meta: RunMeta
    device_kind: str
    platform: str
    precision: str
    steps: int
    timings: tuple[StepTiming, ...]
    libtpu: str | None = None


def load_accelerator_step() -> AcceleratorRun:
    """The saved timing of part four's step on a TPU v5e chip."""
    return load_saved(AcceleratorRun, "accelerator_step.json",
                      "python scripts/time_step_on_accelerator.py")
