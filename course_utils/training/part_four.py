"""Part four's rows, as ``course cluster --measure training`` times them and the step model reads
them: each registered strategy's ``StrategySpec.part_four`` rows, with the strategy's name,
in the registry's order."""

from __future__ import annotations

from typing import NamedTuple

from course_utils.training.strategies import ACCUMULATION, LOCAL_STEPS, SPECS

__all__ = ["ACCUMULATION", "LOCAL_STEPS", "TOPK_FRACTION", "Row", "PART_FOUR_ROWS", "ROW",
           "SAME_CURVE", "COMPRESSED", "find_row"]

TOPK_FRACTION = 0.01  # entries each device sends under top-k, as in step 15


class Row(NamedTuple):
    """One strategy of part four.

    Attributes:
        name: the row's name in the saved runs (``training.json``).
        strategy: the registered strategy whose step it times.
        modelled: the registered strategy whose traffic the step model counts for the row
            (the row "zero3" times ``zero3_regather`` and is modelled as ``zero3``).
        accumulate: micro-steps per optimizer step.
        local_steps: H, for a strategy that syncs every H steps.
        curve: the ``train`` strategy that makes the same updates, when its own step runs on
            a mesh ``train`` does not take (HSDP's are data parallelism's); else ``None``.
    """

    name: str
    strategy: str
    modelled: str
    accumulate: int = 1
    local_steps: int = 1
    curve: str | None = None

    @property
    def trained(self) -> str:
        """The strategy ``train`` runs for the row's held-out curve."""
        return self.curve or self.strategy


PART_FOUR_ROWS = tuple(Row(r.row or s.name, s.name, r.modelled or s.name, r.accumulate,
                           r.local_steps, r.curve) for s in SPECS.values() for r in s.part_four)
ROW = {r.name: r for r in PART_FOUR_ROWS}
# the same updates, the same curve
SAME_CURVE = {r.name: r.curve for r in PART_FOUR_ROWS if r.curve}
# the schemes that send fewer bytes (their descriptions' ``compresses``)
COMPRESSED = tuple(r.name for r in PART_FOUR_ROWS if SPECS[r.strategy].compresses)


def find_row(name: str) -> Row:
    """Part four's row ``name``.

    Examples:
        >>> find_row("accumulation").accumulate, find_row("hsdp").trained
        (4, 'data_parallel')
        >>> find_row("zero3").strategy, find_row("zero3").modelled
        ('zero3_regather', 'zero3')
        >>> find_row("ddp")
        Traceback (most recent call last):
        ...
        ValueError: no part-four row 'ddp'; choose one of data_parallel, accumulation, zero3, \
hsdp, bf16, int8, topk_ef, powersgd, local_sgd
    """
    if name not in ROW:
        raise ValueError(f"no part-four row {name!r}; choose one of {', '.join(ROW)}")
    return ROW[name]
