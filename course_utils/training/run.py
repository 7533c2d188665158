"""The records a training run returns: ``TrainingRun`` and its ``Memory`` per device."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from course_utils.observe.ir import Collective


@dataclass(frozen=True)
class Memory:
    """Bytes one device holds of each part of a strategy's state, read from the shards.

    Examples:
        >>> m = Memory(parameters=4096, gradients=4096, optimizer=1024)
        >>> m.total, m.parts()
        (9216, {'parameters': 4096, 'gradients': 4096, 'optimizer': 1024})
    """

    parameters: int
    gradients: int
    optimizer: int  # momentum, error-feedback residuals, PowerSGD's warm start

    @property
    def total(self) -> int:
        """All three parts, in bytes."""
        return self.parameters + self.gradients + self.optimizer

    def parts(self) -> dict[str, int]:
        """``{part: bytes}`` in the order parameters, gradients, optimizer."""
        return {"parameters": self.parameters, "gradients": self.gradients,
                "optimizer": self.optimizer}


@dataclass(frozen=True)
class TrainingRun:
    """One run of ``train``.

    Attributes:
        strategy: the strategy's name.
        loss: the mean training loss at each step, before its update (for local SGD, the mean
            over devices of each device's own model on its own rows).
        bytes_per_step: ring payload per device, from the compiled programs (for local SGD the
            averaging program's payload times the number of averagings, divided by the steps).
        memory: bytes per device of the state's parts, read from its shards.
        gradient_error: per step, ‖g_used − g_exact‖ / ‖g_exact‖; ``None`` where no local
            gradient is formed (ZeRO-3, local SGD).
        cumulative_error: the same for the sums of both over the steps so far (error feedback
            keeps it small); ``None`` likewise.
        averaged_loss: local SGD, DiLoCo: ``(step, loss)`` of the parameters after each outer
            step (device 0's copy) on all the training rows; else ``None``.
        heldout_loss: ``(step, loss)`` of the parameters (device 0's copy; with an outer
            optimizer, those at the last sync) on the held-out rows every ``heldout_every``
            steps; ``None`` when not asked for.
        collectives: the step program's compiled collectives.
        params: the final flat parameters, device 0's copy.
        shards: the shard shape on each device of every array of the state, by field name
            (``params``, ``momentum``, ``gradient``, ...).
        bytes_across_replicas: on a mesh of replicas (``("host", "device")``), the bytes one
            device sends per inner step in the collectives that cross hosts (ring payload, from
            the compiled programs; the outer program's divided by the steps between two of
            its runs: H, or H/F for F fragments); ``None`` on a one-axis mesh.
        bytes_per_sync_across_replicas: likewise, what one run of the outer step sends across
            (one sync: the largest a strategy that syncs every H steps sends at once, 1/F of
            DiLoCo's for F fragments); ``None`` without an outer step or on a one-axis mesh.
        final_loss_of: computes ``final_loss`` (a property) when it is first read.
    """

    strategy: str
    loss: tuple[float, ...]
    bytes_per_step: float
    memory: Memory
    gradient_error: tuple[float, ...] | None
    cumulative_error: tuple[float, ...] | None
    averaged_loss: tuple[tuple[int, float], ...] | None
    heldout_loss: tuple[tuple[int, float], ...] | None
    collectives: tuple[Collective, ...]
    params: np.ndarray
    shards: Mapping[str, list[tuple[int, ...]]]
    bytes_across_replicas: float | None = None
    bytes_per_sync_across_replicas: float | None = None
    final_loss_of: Callable[[], float] = field(kw_only=True, repr=False, compare=False)

    @cached_property
    def final_loss(self) -> float:
        """The mean loss of the final parameters (device 0's copy) on all the training rows
        (on a stream, its held-out sample): computed when first read, since on part four's MLP
        it is a forward pass over every row."""
        return self.final_loss_of()
