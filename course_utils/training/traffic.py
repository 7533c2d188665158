"""The step model's traffic of a registered strategy: the bytes over one host's link and the
message steps of one optimizer step, read from its description (``StrategySpec.traffic``).
It sits above ``models``, which takes the ``Traffic`` and never reads the registry."""

from __future__ import annotations

from typing import Sequence

from course_utils.models.cost_model import Topology
from course_utils.models.link_traffic import Traffic, TrafficSettings
from course_utils.training.strategies import SPECS

__all__ = ["MODELLED", "strategy_traffic"]

# the strategies the step model times: those whose description gives their traffic
MODELLED = tuple(name for name, s in SPECS.items() if s.traffic is not None)


def strategy_traffic(strategy: str, n: int, topology: Topology, *,
                     matrices: Sequence[tuple[int, int]] = (), dense: int | None = None,
                     rank: int = 1,
                     topk: int = 0, index_bytes: int | None = None,
                     local_steps: int = 1) -> Traffic:
    """Bytes over one host's link and message steps of one optimizer step of ``strategy``.

    Args:
        strategy: one of ``MODELLED``.
        n: float32 values in the flat parameter vector (padded so it splits evenly).
        topology: hosts × devices.
        matrices: the weight matrices' shapes (``powersgd``).
        dense: values ``powersgd`` all-reduces whole, the biases (default: every value outside
            the matrices, padding included).
        rank: PowerSGD's rank r.
        topk: entries each device sends (``topk_ef``).
        index_bytes: bytes of one index (``topk_ef``); by default step 15's: u16 while n ≤ 2¹⁶,
            else int32.
        local_steps: H, the steps between two averagings (``local_sgd``).

    Examples:
        >>> flat = Topology(4, 1)  # each device its own host: a host's link = a device's sends
        >>> strategy_traffic("data_parallel", 10752, flat)  # 2 · 3/4 · 43008 bytes
        Traffic(link_bytes=64512.0, messages=6)
        >>> strategy_traffic("topk_ef", 10752, flat, topk=108).link_bytes  # 3 · 108 · (4 + 2)
        1944.0
    """
    if strategy not in MODELLED:
        raise ValueError(f"strategy must be one of {', '.join(MODELLED)}, got {strategy!r}")
    if index_bytes is None:
        index_bytes = 2 if n <= 2**16 else 4
    for name, value in (("n", n), ("rank", rank), ("local_steps", local_steps),
                        ("index_bytes", index_bytes)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive whole number, got {value!r}")
    settings = TrafficSettings(tuple(matrices), dense, rank, topk, index_bytes, local_steps)
    return SPECS[strategy].traffic(n, topology, settings)
