"""What one optimizer step sends over a host's link (``Traffic``), and the terms a strategy's
traffic is summed from: a ring collective, an all-to-all, the step model's settings."""

from __future__ import annotations

from typing import NamedTuple, Sequence

from course_utils.models.cost_model import Topology, link_bytes_sent, message_steps

F32 = 4  # bytes per float32 value


class Traffic(NamedTuple):
    """What one optimizer step sends over one host's link: bytes and message steps (on average
    per step for a strategy that communicates once every ``local_steps`` steps)."""

    link_bytes: float
    messages: float


class TrafficSettings(NamedTuple):
    """The settings a strategy's traffic may read (``training.traffic.strategy_traffic``'s options).

    Attributes:
        matrices: the weight matrices' shapes (PowerSGD).
        dense: values PowerSGD all-reduces whole (``None``: every value outside the matrices).
        rank: PowerSGD's rank r.
        topk: entries each device sends (top-k).
        index_bytes: bytes of one index (top-k).
        local_steps: H, the steps between two syncs.
    """

    matrices: Sequence[tuple[int, int]]
    dense: int | None
    rank: int
    topk: int
    index_bytes: int
    local_steps: int


def ring_traffic(collective: str, nbytes: float, topology: Topology) -> Traffic:
    """One ring ``collective`` of ``nbytes`` over hosts × devices."""
    return Traffic(link_bytes_sent(collective, "ring", nbytes, topology),
                   message_steps(collective, "ring", topology))


def total_traffic(*parts: Traffic) -> Traffic:
    """The traffic of ``parts`` run one after the other."""
    return Traffic(sum(t.link_bytes for t in parts), sum(t.messages for t in parts))


def all_to_all_traffic(nbytes: float, topology: Topology) -> Traffic:
    """Each rank sends 1/p of ``nbytes`` to every other rank, directly: a host's D ranks each send
    to the D(H − 1) ranks on other hosts, D(H − 1)/H · ``nbytes`` over its link, in p − 1
    messages."""
    h, d = topology.hosts, topology.devices
    return Traffic(d * (h - 1) / h * nbytes, topology.ranks - 1)
