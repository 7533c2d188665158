"""The delay line of ``course cluster --delay MS``: a one-way delay between any two hosts, applied
once per direction, beside each link's rate.

Two kinds (``LINES``), chosen once per command by ``choose_line``:
- ``netem``, where the kernel has it (most do): on each host's veth, ``netem`` holds every
  outgoing packet for the delay and a ``tbf`` under it sets the rate (``netem_commands``).
- ``tun``, where it does not (this course's CI machine): each host's ``eth0`` is a TUN device
  whose packets a relay in the machine's own namespace holds for the delay and hands to the
  destination host's device (``relay``), with the ``tbf`` on the TUN device
  (``tun_commands``). Its MTU is ``TUN_MTU``, an Ethernet link's.

Either way gloo's TCP rides the delayed path, each host's counter is its ``eth0``'s, and the
sockets may grow to ``socket_buffer_bytes`` so that TCP's window does not set the rate.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

from course_utils.models.links import rate_bytes_per_s

LINES = ("netem", "tun")
TUN = Path("/dev/net/tun")
TUN_MTU = 1500
# the highest rate measured at which every link of the relay held the rate within 5 % with all
# links busy at once (4 hosts, 25 ms, the median of 3 runs; course_utils/saved/links_delay.json,
# docs/benchmarks.md); a rate above it gets a warning
TUN_CEILING = "600mbit"
MIN_SOCKET_BUFFER = 6 * 2**20  # Linux's own largest default (tcp_rmem's third field)


def netem_commands(namespace: str, device: str, delay_ms: float, rate: str | None,
                   bucket: int | None) -> list[list[str]]:
    """The ``tc`` commands that give ``device`` in ``namespace`` a one-way delay with ``netem``
    and, under it, the rate with ``tbf`` (the layout of netem's own documentation); netem's
    queue holds at least twice the packets in flight at the rate.

    Examples:
        >>> for c in netem_commands("d03h0", "eth0", 25.0, "200mbit", 50000):
        ...     print(" ".join(c[4:]))
        tc qdisc add dev eth0 root handle 1: netem delay 25.0ms limit 2000
        tc qdisc add dev eth0 parent 1:1 handle 10: tbf rate 200mbit burst 50000 latency 500ms
    """
    inside = ["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device]
    in_flight = 2 * (rate_bytes_per_s(rate) if rate else 1.25e9) * delay_ms / 1e3 / TUN_MTU
    commands = [[*inside, "root", "handle", "1:", "netem", "delay", f"{delay_ms}ms", "limit",
                 str(max(1000, math.ceil(in_flight)) + 1000)]]
    if rate is not None:
        commands.append([*inside, "parent", "1:1", "handle", "10:", "tbf", "rate", rate,
                         "burst", str(bucket), "latency", "500ms"])
    return commands


def socket_buffer_bytes(rate: str | None, delay_ms: float) -> int:
    """The largest send and receive buffer a host's TCP may grow to: at least twice the
    bandwidth-delay product of the round trip (the unshaped links counted at 10 Gbit/s).

    Examples:
        >>> socket_buffer_bytes("200mbit", 50.0), socket_buffer_bytes("1gbit", 50.0)
        (6291456, 25000000)
    """
    bytes_per_s = rate_bytes_per_s(rate) if rate else 1.25e9
    return max(MIN_SOCKET_BUFFER, math.ceil(2 * bytes_per_s * 2 * delay_ms / 1e3))


def sysctl_commands(namespace: str, buffer_bytes: int) -> list[list[str]]:
    """Let TCP's autotuning in ``namespace`` grow both buffers to ``buffer_bytes``."""
    return [["ip", "netns", "exec", namespace, "sysctl", "-q", "-w",
             f"net.ipv4.tcp_{side}mem=4096 131072 {buffer_bytes}"] for side in ("r", "w")]


def tun_commands(device: str, namespace: str, address: str, subnet: str) -> list[list[str]]:
    """The ``ip`` commands that make the relay's TUN ``device`` host ``namespace``'s ``eth0``
    with ``address``, reaching the other hosts of ``subnet``.0/24 through it."""
    return [["ip", "link", "set", device, "netns", namespace],
            ["ip", "-n", namespace, "link", "set", device, "name", "eth0"],
            ["ip", "-n", namespace, "link", "set", "eth0", "mtu", str(TUN_MTU), "txqueuelen",
             "1000"],
            ["ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0"],
            ["ip", "-n", namespace, "link", "set", "lo", "up"],
            ["ip", "-n", namespace, "link", "set", "eth0", "up"]]


def has_netem(probe_namespace: str) -> bool:
    """Whether this kernel can add a ``netem`` qdisc: tried on the loopback of a namespace made
    for the probe and removed at once."""
    subprocess.run(["ip", "netns", "add", probe_namespace], capture_output=True)
    try:
        done = subprocess.run(["ip", "netns", "exec", probe_namespace, "tc", "qdisc", "add",
                               "dev", "lo", "root", "netem", "delay", "1ms"],
                              capture_output=True)
        return done.returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", probe_namespace], capture_output=True)


def choose_line(probe_namespace: str, tun: Path | None = None) -> str:
    """``"netem"`` where the kernel has it, else ``"tun"`` where ``tun`` (``TUN``) exists;
    otherwise a one-line ``ValueError`` that says what to do."""
    tun = TUN if tun is None else tun
    if has_netem(probe_namespace):
        return "netem"
    if tun.exists():
        return "tun"
    raise ValueError("--delay needs the netem qdisc (Debian: the kernel's sch_netem module) or "
                     f"{tun} for the relay; this machine has neither")
