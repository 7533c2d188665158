"""A training step's time as compute + communication (part four's one model).

Per optimizer step, a strategy moves ``Traffic.link_bytes`` over each host's link in
``Traffic.messages`` message steps; at a link of ``bytes_per_s`` with a latency ``alpha_s`` per
message that takes ``messages · α + link_bytes / rate``. The compute is the step's FLOPs at the
machine's rate: a dense layer of ``fan_in × fan_out`` weights costs 2 · rows · fan_in · fan_out
FLOPs forward and twice that backward, 6 · rows · weights (Kaplan et al., 2020, "Scaling Laws for
Neural Language Models", section 2.1), except the first, whose input gradient is never formed
(4 · rows · weights). Without overlap (step 19) the two add up.

Each strategy's bytes follow from the collectives it runs (``cost_model``'s table, rings over
hosts × devices ranks numbered host by host), for a flat parameter vector of ``n`` float32 values:
the ``traffic`` of its description (``training.strategies.SPECS``), which
``training.traffic.strategy_traffic`` reads; this module takes the ``Traffic`` it returns.

Gradient accumulation (``accumulation`` micro-batches per optimizer step) keeps the bytes of one
step and multiplies its compute.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

from course_utils.models.link_traffic import F32, Traffic

__all__ = ["F32", "StepTime", "Traffic", "balanced_rows", "break_even_bits", "mlp_flops",
           "step_time"]

class StepTime(NamedTuple):
    """Seconds of one optimizer step: compute, communication, and the step (their sum)."""

    compute_s: float
    communication_s: float
    step_s: float


def mlp_flops(rows: int, matrices: Sequence[tuple[int, int]], *,
              input_gradient: bool = False) -> float:
    """FLOPs of one forward and backward pass over ``rows`` rows of dense layers ``matrices``:
    2 per weight and row forward, 2 for the weights' gradient and 2 for the input's gradient,
    which the first layer skips (its input is the data) unless ``input_gradient``: 6 per weight
    (Kaplan et al., 2020, section 2.1, for a deep network) but 4 for the first layer's.

    Examples:
        >>> mlp_flops(128, [(32, 256), (256, 8)])  # 128 · (4 · 8192 + 6 · 2048)
        5767168.0
        >>> mlp_flops(128, [(32, 256), (256, 8)], input_gradient=True)  # 6 · 128 · 10240
        7864320.0
    """
    if not isinstance(rows, int) or rows < 1:
        raise ValueError(f"rows must be a positive whole number, got {rows!r}")
    per_weight = [6.0 if input_gradient or i else 4.0 for i in range(len(matrices))]
    return rows * sum(f * a * b for f, (a, b) in zip(per_weight, matrices))


def step_time(traffic: Traffic, compute_s: float, *, alpha_s: float, bytes_per_s: float,
              accumulation: int = 1) -> StepTime:
    """One optimizer step: ``accumulation`` micro-batches of ``compute_s`` each, then the
    strategy's communication, ``messages · α + link_bytes / rate``, one after the other.

    Examples:
        >>> t = step_time(Traffic(25e6, 2), 0.1, alpha_s=0.001, bytes_per_s=25e6, accumulation=4)
        >>> [round(s, 6) for s in t]  # compute, communication, step
        [0.4, 1.002, 1.402]
    """
    if compute_s < 0 or alpha_s < 0 or bytes_per_s <= 0:
        raise ValueError("need compute_s >= 0, alpha_s >= 0 and bytes_per_s > 0; got "
                         f"{compute_s}, {alpha_s}, {bytes_per_s}")
    if not isinstance(accumulation, int) or accumulation < 1:
        raise ValueError(f"accumulation must be a positive whole number, got {accumulation!r}")
    compute = accumulation * compute_s
    communication = traffic.messages * alpha_s + traffic.link_bytes / bytes_per_s
    return StepTime(compute, communication, compute + communication)


def balanced_rows(traffic: Traffic, matrices: Sequence[tuple[int, int]], *, flops_per_s: float,
                  alpha_s: float, bytes_per_s: float, input_gradient: bool = False) -> float:
    """Rows per device per step at which the compute takes as long as the communication: above
    it the step is compute-bound. The compute grows with the rows and the bytes do not.

    Examples:
        >>> balanced_rows(Traffic(1e6, 0), [(1000, 1000)], flops_per_s=4e9, alpha_s=0,
        ...               bytes_per_s=1e6)  # 1 s of communication; 4e6 FLOPs per row
        1000.0
    """
    if flops_per_s <= 0:
        raise ValueError(f"flops_per_s must be > 0, got {flops_per_s}")
    communication = step_time(traffic, 0.0, alpha_s=alpha_s, bytes_per_s=bytes_per_s)
    return communication.communication_s * flops_per_s / mlp_flops(
        1, matrices, input_gradient=input_gradient)


def break_even_bits(dp_steps: float, dp_bytes: float, scheme_steps: float, scheme_bytes: float,
                    compute_s: float, own_s: float) -> float:
    """The link rate (bit/s) at which a scheme and data parallelism reach a target at the same
    time; below it the scheme is sooner. Each takes its steps to the target of ``compute_s``
    (plus the scheme's ``own_s``) and its link bytes over the rate, one after the other:
    ``math.inf`` when the scheme is sooner at every rate, 0 when at none.

    Examples:
        >>> round(break_even_bits(100, 6e6, 100, 1e6, 0.05, 0.01))  # 5e6 bytes saved per 0.01 s
        4000000000
        >>> break_even_bits(100, 6e6, 100, 1e6, 0.05, 0.0), break_even_bits(100, 6e6, 100, 7e6,
        ...                                                                  0.05, 0.01)
        (inf, 0.0)
    """
    for name, value in (("dp_steps", dp_steps), ("scheme_steps", scheme_steps)):
        if value <= 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    if min(dp_bytes, scheme_bytes, compute_s, own_s) < 0:
        raise ValueError("bytes and seconds must be >= 0")
    saved = dp_steps * dp_bytes - scheme_steps * scheme_bytes  # bytes fewer to the target
    extra = scheme_steps * (compute_s + own_s) - dp_steps * compute_s  # seconds more computing
    if saved > 0:
        return math.inf if extra <= 0 else 8 * saved / extra
    if extra >= 0:
        return 0.0
    raise ValueError("the scheme sends more bytes to the target but computes for less time: it "
                     "is sooner above a rate, not below one")
