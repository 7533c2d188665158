"""What crosses a host's link: the models that ``course cluster`` measurements are read against.

Hosts joined by one shaped link each (step 17): p = hosts · devices ranks in a ring ordered host
by host. A ring step moves one chunk of N/p across every host boundary, so each host's outgoing
link carries ``steps · N/p`` bytes: 2(p−1)/p · N for an all-reduce, (p−1)/p · N for a
reduce-scatter or an all-gather (N: the whole vector, per device). The two-level all-reduce
(step 13) sends only its middle phase across: each of the D devices of a host all-reduces N/D over
the hosts, 2(H−1)/H · N/D, and the D devices share the host's one link: 2(H−1)/H · N in all.
Time = link bytes / rate (the latency of each message and the work inside a host are left out).
Both read ``cost_model``'s table (``link_bytes_sent``).

What gloo runs (XLA's CPU collectives over gloo): all-reduce and all-gather are rings, as above;
reduce-scatter is recursive halving, whose bytes over a host's link equal the ring's for 2 hosts ×
2 devices but not in general (3/4 · N rather than 7/8 · N for 2 × 4; ``course cluster`` counts the
bytes on host 0's link and finds both). The model below is the ring's.
``tc``'s rate counts whole Ethernet frames, so TCP's payload gets at most about 1448/1514 ≈ 96 %
of it (``FRAME_SHARE``). A link idle long enough to fill tbf's bucket (its burst) sends that many
bytes at the speed of the machine, not the rate: every measurement's bucket is a few
milliseconds of the link's bytes (``bucket_bytes``), and a message that fits in it is not
limited by the link (``link_limits``).
"""

from __future__ import annotations

import re
from typing import Sequence

from course_utils.models.cost_model import COLLECTIVES, Topology, link_bytes_sent
from course_utils.models.fit import Fit, fit_alpha_beta

KINDS = (*COLLECTIVES, "hierarchical")
_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")


def check_rate(rate: str) -> str:
    """``rate`` if ``tc`` understands it (``200mbit``, ``1gbit``…) and it is above 0, else a
    one-line ``ValueError``.

    Examples:
        >>> check_rate("50mbit")
        '50mbit'
        >>> check_rate("0mbit")
        Traceback (most recent call last):
        ...
        ValueError: --link-rate must be above 0, got '0mbit'; give one like 10mbit or 1gbit
    """
    match = _RATE.match(rate) if isinstance(rate, str) else None
    if match is None:
        raise ValueError(f"--link-rate must look like 200mbit or 1gbit, got {rate!r}")
    if float(match.group(1)) <= 0:
        raise ValueError(f"--link-rate must be above 0, got {rate!r}; give one like 10mbit or "
                         "1gbit")
    return rate


MAX_DELAY_MS = 1000.0  # a one-way delay longer than a second is a typo, not a link


def check_delay(delay: str) -> float:
    """A one-way delay in milliseconds (``25``, ``25ms`` or ``0.5``) if it is above 0 and at most
    ``MAX_DELAY_MS``, else a one-line ``ValueError``.

    Examples:
        >>> check_delay("25"), check_delay("0.5ms")
        (25.0, 0.5)
        >>> check_delay("-5")
        Traceback (most recent call last):
        ...
        ValueError: --delay must be above 0 ms and at most 1000 ms, got '-5'
    """
    text = delay.strip().removesuffix("ms") if isinstance(delay, str) else ""
    try:
        ms = float(text)
    except ValueError:
        raise ValueError(f"--delay must be a one-way delay in milliseconds like 25 or 0.5ms, "
                         f"got {delay!r}") from None
    if not 0 < ms <= MAX_DELAY_MS:
        raise ValueError(f"--delay must be above 0 ms and at most {MAX_DELAY_MS:.0f} ms, "
                         f"got {delay!r}")
    return ms


# tbf's bucket, one rule for every measurement: the bytes the link carries in ``BUCKET_MS``
# milliseconds, at least one full Ethernet frame (``FRAME_BYTES``). A bucket is credit: after an
# idle gap a message up to its size leaves at the machine's speed, not the link's, so it is kept
# to a few milliseconds of bytes; ``course cluster --measure links`` checks that tbf still holds
# the configured rate with it, rate by rate.
BUCKET_MS = 2.0
FRAME_BYTES = 1514  # 1500 bytes of IP packet and the 14-byte Ethernet header tc counts


def bucket_bytes(rate: str) -> int:
    """The bytes tbf's bucket holds on a link shaped to ``rate``: ``BUCKET_MS`` milliseconds of
    the link's bytes, at least one full frame.

    Examples:
        >>> bucket_bytes("1mbit"), bucket_bytes("10mbit"), bucket_bytes("200mbit")
        (1514, 2500, 50000)
    """
    return max(FRAME_BYTES, round(rate_bytes_per_s(rate) * BUCKET_MS / 1e3))


def link_limits(message_bytes: float, rate: str) -> bool:
    """Whether the link's rate sets the time of a message of ``message_bytes``: it does not fit
    in tbf's bucket (``bucket_bytes``), so after an idle gap it cannot all leave on credit. It
    judges the size only: a message that fits may still wait for the link if the link was busy
    just before it.

    Examples:
        >>> link_limits(262_144, "50mbit"), link_limits(262_144, "10gbit")
        (True, False)
    """
    return message_bytes > bucket_bytes(rate)


def rate_bytes_per_s(rate: str) -> float:
    """A ``tc`` rate in bytes per second (tc's units: 1mbit = 10^6 bit/s).

    Examples:
        >>> rate_bytes_per_s("200mbit")
        25000000.0
    """
    number, unit = _RATE.match(check_rate(rate)).groups()
    return float(number) * {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}[unit] / 8


def payload_bytes_per_s(rate: str) -> float:
    """The bytes per second TCP's payload gets on a link shaped to ``rate``: ``FRAME_SHARE`` of
    it (tbf charges every frame's headers).

    Examples:
        >>> round(payload_bytes_per_s("200mbit"))
        23910172
    """
    return rate_bytes_per_s(rate) * FRAME_SHARE


def rate_label(rate: str) -> str:
    """A ``tc`` rate as a reader writes it, in the unit of the figures' axes.

    Examples:
        >>> rate_label("50mbit"), rate_label("1gbit"), rate_label("800kbit")
        ('50 Mbit/s', '1 Gbit/s', '800 kbit/s')
    """
    number, unit = _RATE.match(check_rate(rate)).groups()
    return f"{number} {unit[:-3].upper() if unit in ('mbit', 'gbit') else unit[:-3]}bit/s"


def link_bytes(kind: str, nbytes: float, hosts: int, devices: int) -> float:
    """Bytes one host sends over its link for one collective over a vector of ``nbytes``: the
    ring's (``cost_model.link_bytes_sent``), the two-level schedule's for ``"hierarchical"``.

    Examples:
        >>> [link_bytes(k, 1024, 2, 2) for k in KINDS]
        [1536.0, 768.0, 768.0, 1024.0]
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    collective, algorithm = ("all_reduce", "two_level") if kind == "hierarchical" else (
        kind, "ring")
    return link_bytes_sent(collective, algorithm, nbytes, Topology(hosts, devices))


def link_time_s(kind: str, nbytes: float, hosts: int, devices: int, bytes_per_s: float) -> float:
    """Modelled seconds: the link bytes at the link's rate (α = 0, the work inside a host left
    out).

    Examples:
        >>> link_time_s("all_reduce", 4 * 2**20, 2, 2, 25e6)  # 4 MiB, 200 Mbit/s
        0.25165824
    """
    return link_bytes(kind, nbytes, hosts, devices) / bytes_per_s


# TCP payload per full Ethernet frame (1448 of 1514 bytes): the share of tc's rate left for data
FRAME_SHARE = 1448 / 1514

# sizes below this are dominated by fixed costs and the shaper's burst: the fit leaves them out
FIT_FROM_BYTES = 2**20


def fitted_link_rate(kind: str, sizes: Sequence[float], times_s: Sequence[float], hosts: int,
                     devices: int, counted_bytes: Sequence[float] | None = None) -> Fit:
    """Fit T = α + (link bytes)/B to the measured times of sizes ≥ ``FIT_FROM_BYTES``; B is the
    rate the link delivered.

    The link bytes are the ring model's (``link_bytes``), or ``counted_bytes`` (one per size:
    what the host's link counter saw per call) when given.
    """
    crossing = (counted_bytes if counted_bytes is not None
                else [link_bytes(kind, s, hosts, devices) for s in sizes])
    kept = [(c, t) for s, c, t in zip(sizes, crossing, times_s) if s >= FIT_FROM_BYTES]
    return fit_alpha_beta([c for c, _ in kept], [t for _, t in kept])
