"""Part four's rows, as ``course cluster --measure training`` times them and the step model reads
them: each row's name, the registered strategy it runs (``strategies.SPECS``), and its settings."""

from __future__ import annotations

from typing import NamedTuple

from course_utils.training.strategies import SPECS

ACCUMULATION = 4  # micro-steps per optimizer step of "accumulation"
LOCAL_STEPS = 8  # H of "local_sgd": its parameters are averaged once every H steps
TOPK_FRACTION = 0.01  # entries each device sends under top-k, as in step 15


class Row(NamedTuple):
    """One strategy of part four.

    Attributes:
        name: the row's name in the saved runs (``training.json``).
        strategy: the registered strategy whose step it times.
        accumulate: micro-steps per optimizer step.
        local_steps: H, for a strategy that syncs every H steps.
        curve: the ``train`` strategy that makes the same updates, when its own step runs on
            a mesh ``train`` does not take (HSDP's are data parallelism's); else ``None``.
    """

    name: str
    strategy: str
    accumulate: int = 1
    local_steps: int = 1
    curve: str | None = None

    @property
    def trained(self) -> str:
        """The strategy ``train`` runs for the row's held-out curve."""
        return self.curve or self.strategy


# zero3: FSDP, the layers gathered again for the backward pass, as FSDP does when it frees them
# after the forward pass (``zero3_regather``; the step model's ``zero3`` counts those bytes)
ROWS = (Row("data_parallel", "data_parallel"),
        Row("accumulation", "data_parallel", accumulate=ACCUMULATION),
        Row("zero3", "zero3_regather"), Row("hsdp", "hsdp", curve="data_parallel"),
        Row("bf16", "bf16"), Row("int8", "int8"), Row("topk_ef", "topk_ef"),
        Row("powersgd", "powersgd"), Row("local_sgd", "local_sgd", local_steps=LOCAL_STEPS))
ROW = {r.name: r for r in ROWS}
SAME_CURVE = {r.name: r.curve for r in ROWS if r.curve}  # the same updates, the same curve
# the schemes that send fewer bytes (their descriptions' ``compresses``)
COMPRESSED = tuple(r.name for r in ROWS if SPECS[r.strategy].compresses)
# deprecated (one release): ``ROWS`` (``STEPS`` is the saved plan's steps,
# ``results.strategies.PLAN_STEPS``); each row's name → the ``train`` strategy of its curve
STEPS = {r.name: r.trained for r in ROWS}


def find_row(name: str) -> Row:
    """Part four's row ``name``.

    Examples:
        >>> find_row("accumulation").accumulate, find_row("hsdp").trained
        (4, 'data_parallel')
        >>> find_row("ddp")
        Traceback (most recent call last):
        ...
        ValueError: no part-four row 'ddp'; choose one of data_parallel, accumulation, zero3, \
hsdp, bf16, int8, topk_ef, powersgd, local_sgd
    """
    if name not in ROW:
        raise ValueError(f"no part-four row {name!r}; choose one of {', '.join(ROW)}")
    return ROW[name]
