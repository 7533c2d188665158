"""The delay line where the kernel has no ``netem``: one TUN device per host and this relay, a
process in the machine's own namespace that holds every packet for the one-way delay.

``python -m course_utils.tools.cluster.relay --prefix d03 --hosts 4 --delay-ms 25 --mtu 9000``
creates the TUN devices ``d03t0``, ``d03t1``, … (IPv4 packets, no extra header), prints
``ready`` and relays until it is killed. ``netns.Cluster`` moves device ``i`` into host ``i``'s
namespace as its ``eth0``, with address 10.77.0.(i+1); every packet a host sends to another host
leaves through that device, and the relay reads it, keeps it ``--delay-ms`` milliseconds, and
writes it to the destination host's device, where the host receives it. The delay is applied
once per direction; the rate is the ``tbf`` on each host's device, as on the veth links.

The devices belong to the relay's open files: they disappear when it exits, however it exits.
It asks the kernel to kill it when its parent dies (``PR_SET_PDEATHSIG``), so a killed
``course cluster`` leaves no relay and no device; ``netns.teardown`` also kills it by the pid it
writes to ``pid_file(prefix)``.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import fcntl
import os
import select
import signal
import struct
import sys
import time
from collections import deque
from pathlib import Path

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000
PR_SET_PDEATHSIG = 1
READS_PER_TURN = 64  # packets read from one device before the others get a turn
RT_PRIORITY = 10  # SCHED_FIFO's priority for the relay (1–99; the kernel's own threads use 50)


def pid_file(prefix: str) -> Path:
    """Where the relay of the cluster named ``prefix`` writes its process id."""
    return Path(f"/run/course-cluster-{prefix}-relay.pid")


def device_name(prefix: str, host: int) -> str:
    """The TUN device of host ``host`` while it is still in the machine's namespace."""
    return f"{prefix}t{host}"


def destination(packet: bytes, subnet: bytes, hosts: int) -> int | None:
    """The host an IPv4 packet is addressed to (``subnet``.(i+1) is host ``i``), or ``None``
    for anything else (IPv6, another address): the relay drops those.

    Examples:
        >>> header = bytes([0x45]) + bytes(15)
        >>> destination(header + bytes([10, 77, 0, 2]), bytes([10, 77, 0]), 4)
        1
        >>> destination(header + bytes([10, 77, 0, 9]), bytes([10, 77, 0]), 4) is None
        True
    """
    if len(packet) < 20 or packet[0] >> 4 != 4 or packet[16:19] != subnet:
        return None
    host = packet[19] - 1
    return host if 0 <= host < hosts else None


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def relay(fds: list[int], delay_s: float, subnet: bytes) -> None:
    """Forever: read every packet the hosts send, write each to its destination ``delay_s``
    later (a packet the destination cannot take is dropped, as a full link drops it)."""
    held: deque[tuple[float, int, bytes]] = deque()  # one delay for all: arrival order is due order
    while True:
        timeout = None if not held else max(0.0, held[0][0] - time.monotonic())
        readable, _, _ = select.select(fds, [], [], timeout)
        for fd in readable:
            for _ in range(READS_PER_TURN):
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                host = destination(packet, subnet, len(fds))
                if host is not None:
                    held.append((time.monotonic() + delay_s, fds[host], packet))
        now = time.monotonic()
        while held and held[0][0] <= now:
            _, fd, packet = held.popleft()
            try:
                os.write(fd, packet)
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.ENOBUFS, errno.EIO):
                    raise


def die_with_parent(sig: int) -> bool:
    """Ask the kernel to send this process ``sig`` when its parent dies
    (``PR_SET_PDEATHSIG``); ``False`` if the parent had died already, before the request."""
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)
    return os.getppid() == parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course_utils.tools.cluster.relay")
    parser.add_argument("--prefix", required=True)
    parser.add_argument("--hosts", type=int, required=True)
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--subnet", default="10.77.0")
    args = parser.parse_args(argv)
    if not die_with_parent(signal.SIGKILL):
        return 1
    try:  # the wire waits for no one: a busy machine's other processes come after it
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(RT_PRIORITY))
    except (OSError, AttributeError):
        pass  # not allowed here: it relays at the normal priority, a little later
    fds = [_open_tun(device_name(args.prefix, i)) for i in range(args.hosts)]
    pid_file(args.prefix).write_text(f"{os.getpid()}\n")
    print("ready", flush=True)
    relay(fds, args.delay_ms / 1e3, bytes(int(x) for x in args.subnet.split(".")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
