"""Compiled programs kept as evidence (``tpu_compiled.json``): step 19's one-program backward
pass compiled ahead of time for a TPU topology by ``scripts/compile_for_tpu.py``, each program's
optimized entry computation with the chip, the topology and the software it was compiled with."""

from __future__ import annotations

from dataclasses import dataclass

from course_utils.results.meta import RunMeta
from course_utils.results.records import load_saved


@dataclass(frozen=True)
class CompiledProgram:
    """One tower's backward pass in one program: ``layers`` layers of ``width`` (a layer's
    gradient is ``4 · width²`` bytes), ``rows_per_host`` rows on each device, and the optimized
    HLO of its entry computation, in its schedule's order (metadata dropped)."""

    layers: int
    width: int
    rows_per_host: int
    entry: str

    @property
    def layer_bytes(self) -> int:
        return 4 * self.width * self.width


@dataclass(frozen=True)
class CompiledRun:
    """Programs compiled on ``compiled_on`` (a chip's device kind) for ``topology`` (of
    ``devices`` devices, the backward pass's ``host`` axis)."""

    meta: RunMeta
    compiled_on: str
    topology: str
    devices: int
    programs: tuple[CompiledProgram, ...]


def load_tpu_compiled() -> CompiledRun:
    """The saved TPU compile of step 19's one-program backward pass."""
    return load_saved(CompiledRun, "tpu_compiled.json", "python scripts/compile_for_tpu.py")
