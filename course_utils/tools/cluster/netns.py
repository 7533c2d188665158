"""Hosts on one machine: network namespaces joined by a bridge, each host's link rate-limited.

``Cluster(hosts, rate)`` is a context manager. On entry it creates one namespace per host
(``d03h0``, ``d03h1``, …) and a switch namespace (``d03sw``) holding a bridge; each host has one
veth link ``eth0`` into the bridge, with a private address 10.77.0.(i+1)/24 that exists only
inside these namespaces, and its outgoing traffic shaped by ``tc … tbf rate RATE``. TCP between
hosts uses the congestion control named for the cluster (``reno`` unless told otherwise: see
``Cluster``), set on the route to the other hosts. It writes
``/etc/netns/d03hI/hosts`` mapping this machine's hostname to the host's address (``ip netns
exec`` bind-mounts it over ``/etc/hosts``, so a JAX process finds its own address through the
public API alone). On exit, on an error and on Ctrl-C, ``teardown()`` kills whatever still runs in
the namespaces and removes every namespace, link and file with the prefix; if the parent process
is killed, a guard process it started (``guard``) does it.

With a one-way delay (``Cluster(…, delay_ms=25, line=…)``, ``delay``), the packets between hosts
are held for it: by ``netem`` on each veth, or by a relay process between TUN devices that are
the hosts' ``eth0`` (``relay``; ``teardown`` kills it too).

Needs root (``CAP_NET_ADMIN``) and the ``ip``, ``tc`` and ``setpriv`` programs. A host's
processes start through ``host_command``, with every capability dropped.
"""

from __future__ import annotations

import fcntl
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from course_utils.models.links import bucket_bytes, check_rate
from course_utils.tools.cluster import delay
from course_utils.tools.cluster.relay import pid_file
from course_utils.tools.errors import CourseError

PREFIX = "d03"
# held while a cluster exists: a second `course cluster` refuses instead of removing the first's
LOCK = Path("/run/course-cluster-d03.lock")
SUBNET = "10.77.0"
NETNS_ETC = Path("/etc/netns")
# TCP congestion controls a cluster's links may use (the kernel must offer the one chosen)
CONGESTION_CONTROLS = ("reno", "cubic", "bbr")
AVAILABLE_CONTROLS = Path("/proc/sys/net/ipv4/tcp_available_congestion_control")
DEFAULT_CONTROL = Path("/proc/sys/net/ipv4/tcp_congestion_control")


def _ip(*args: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise CourseError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout


def check_can_run() -> str | None:
    """``None`` if this process can create namespaces, else one line saying what to do."""
    if os.geteuid() != 0:
        return ("needs root to create network namespaces: run it as root "
                "(e.g. sudo .venv/bin/course cluster …) or read the saved results in step 17")
    for program, package in (("ip", "iproute2"), ("tc", "iproute2"), ("setpriv", "util-linux")):
        if shutil.which(program) is None:
            return f"needs the {program!r} program (Debian: apt install {package})"
    return None


@dataclass(frozen=True)
class Host:
    """One host: its namespace and its address."""

    namespace: str
    address: str


def host_command(host: Host, argv: list[str]) -> list[str]:
    """``argv`` run inside ``host``'s namespace with no capabilities (``setpriv``): the process
    keeps root's user id, so it reads the Python interpreter wherever that is installed (here, in
    root's home, closed to other users), but it cannot change links, namespaces or mounts, nor
    gain capabilities through exec. It still owns root's files: this is not a sandbox, only the
    network and system privileges taken away from code that needs none of them."""
    return ["ip", "netns", "exec", host.namespace,
            "setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", *argv]


def names(prefix: str = PREFIX) -> list[str]:
    """The namespaces that exist with ``prefix``."""
    listed = _ip("netns", "list", check=False).split("\n")
    return [line.split()[0] for line in listed if line.startswith(prefix)]


def _links(prefix: str) -> list[str]:
    """The links of the root namespace named with ``prefix``."""
    return re.findall(rf"^\d+: ({prefix}[^:@]*)", _ip("-o", "link", check=False), re.MULTILINE)


def _folders(prefix: str) -> list[Path]:
    """The /etc/netns folders named with ``prefix``."""
    return list(NETNS_ETC.glob(f"{prefix}*")) if NETNS_ETC.is_dir() else []


def _relay_pid(prefix: str) -> int | None:
    """The process id of the running relay of ``prefix``'s delay line, if one runs."""
    try:
        pid = int(pid_file(prefix).read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"cluster.relay" in cmdline else None


def leftovers(prefix: str = PREFIX) -> list[str]:
    """Everything with ``prefix`` that exists: namespaces, root links, /etc/netns folders, a
    delay line's relay."""
    relay = _relay_pid(prefix)
    return (names(prefix) + _links(prefix) + [str(f) for f in _folders(prefix)]
            + ([f"relay process {relay}"] if relay else []))


def teardown(prefix: str = PREFIX) -> None:
    """Kill the processes in, and delete, every namespace, link and hosts folder of ``prefix``;
    Ctrl-C and SIGTERM wait until it is done."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        _remove(prefix)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def _remove(prefix: str) -> None:
    relay = _relay_pid(prefix)
    if relay:  # its TUN devices go with it
        os.kill(relay, signal.SIGKILL)
        _wait_gone(relay)
    pid_file(prefix).unlink(missing_ok=True)
    for namespace in names(prefix):
        for pid in _ip("netns", "pids", namespace, check=False).split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        _ip("netns", "del", namespace, check=False)
    for link in _links(prefix):
        _ip("link", "del", link, check=False)
    for folder in _folders(prefix):
        shutil.rmtree(folder, ignore_errors=True)


def _wait_gone(pid: int, seconds: float = 10.0) -> None:
    """Wait until process ``pid`` no longer exists (a killed process may take a moment)."""
    deadline = time.monotonic() + seconds
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        try:  # our own child: reap it
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            pass
        time.sleep(0.01)


def check_congestion_control(name: str) -> str:
    """``name`` if it is one of ``CONGESTION_CONTROLS`` and this kernel offers it, else a
    ``ValueError`` that says what to use."""
    if name not in CONGESTION_CONTROLS:
        raise ValueError(f"--tcp must be one of {', '.join(CONGESTION_CONTROLS)}, got {name!r}")
    offered = AVAILABLE_CONTROLS.read_text().split() if AVAILABLE_CONTROLS.exists() else []
    if name not in offered:
        raise ValueError(f"this kernel does not offer TCP {name} (it offers "
                         f"{', '.join(offered) or 'none listed'}); choose another with --tcp")
    return name


def default_congestion_control(path: Path = DEFAULT_CONTROL) -> str:
    """The machine's default TCP congestion control (``"unknown"`` if the kernel does not say);
    ``course cluster`` records it beside the one it set between the hosts."""
    return path.read_text().strip() if path.exists() else "unknown"


class Cluster:
    """``hosts`` namespaces on one bridge, outgoing links shaped to ``rate`` (``None``: not
    shaped), tbf's bucket holding a few milliseconds of the link's bytes
    (``links.bucket_bytes``, the one rule of every measurement). Use as
    ``with Cluster(2, "200mbit") as hosts: …``.

    TCP between the hosts uses ``congestion_control`` (set on each host's route to the others,
    locked, so no socket between hosts can pick another; traffic inside a host keeps the
    machine's default). The default is reno: its window grows until a loss and it does not pace,
    so a standing queue forms at the shaper and the link stays busy while any connection has
    data, as the link model assumes. ``bbr`` paces each connection at
    the delivery rate it estimated and keeps queues short; with it, gloo's reduce-scatter ran
    well below the link's rate for part of each call (``course cluster --tcp bbr``; step 17)."""

    def __init__(self, hosts: int, rate: str | None, prefix: str = PREFIX,
                 congestion_control: str = "reno", delay_ms: float | None = None,
                 line: str = "netem"):
        if not isinstance(hosts, int) or not 2 <= hosts <= 200:
            raise ValueError(f"--hosts must be from 2 to 200, got {hosts!r}")
        if line not in delay.LINES:
            raise ValueError(f"a delay line is one of {', '.join(delay.LINES)}, got {line!r}")
        self.rate = None if rate is None else check_rate(rate)
        self.congestion_control = check_congestion_control(congestion_control)
        self.bucket = None if rate is None else bucket_bytes(rate)  # tbf's burst, bytes
        self.prefix = prefix
        self.delay_ms = delay_ms  # one way, between any two hosts (None: no delay line)
        self.line = line if delay_ms else None
        self.hosts = [Host(f"{prefix}h{i}", f"{SUBNET}.{i + 1}") for i in range(hosts)]

    def __enter__(self) -> list[Host]:
        self._lock = open(LOCK, "w")
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock.close()
            raise CourseError("another course cluster is running; wait for it to end") from None
        self._made_netns_etc = not NETNS_ETC.exists()
        teardown(self.prefix)  # what a killed run may have left (no other run holds the lock)
        self._guard = _start(["-m", "course_utils.tools.cluster.guard", self.prefix],
                             pass_fds=(self._lock.fileno(),))
        try:
            self._create()
        except BaseException:
            self.__exit__()
            raise
        return self.hosts

    def __exit__(self, *exc) -> None:
        teardown(self.prefix)
        for helper in (self._guard, getattr(self, "_relay", None)):
            if helper is not None:  # the guard's work is done; the relay was killed
                helper.kill()
                helper.communicate()
        if self._made_netns_etc and NETNS_ETC.is_dir() and not any(NETNS_ETC.iterdir()):
            NETNS_ETC.rmdir()
        self._lock.close()  # releases the lock

    def _create(self) -> None:
        if self.line == "tun":
            self._relay = _start(["-m", "course_utils.tools.cluster.relay", "--prefix",
                                  self.prefix, "--hosts", str(len(self.hosts)), "--delay-ms",
                                  str(self.delay_ms), "--subnet", SUBNET])
        else:
            switch = f"{self.prefix}sw"
            _ip("netns", "add", switch)
            _ip("-n", switch, "link", "add", "br0", "type", "bridge")
            _ip("-n", switch, "link", "set", "br0", "up")
        hostname = socket.gethostname()
        for i, host in enumerate(self.hosts):
            _ip("netns", "add", host.namespace)
            if self.line == "tun":
                for command in delay.tun_commands(f"{self.prefix}t{i}", host.namespace,
                                                  host.address, SUBNET):
                    _ip(*command[1:])
            else:
                self._veth(i, host, switch)
            _ip("-n", host.namespace, "route", "replace", f"{SUBNET}.0/24", "dev", "eth0",
                "congctl", "lock", self.congestion_control)
            if self.line == "netem":
                shaping = delay.netem_commands(host.namespace, "eth0", self.delay_ms, self.rate,
                                               self.bucket)
            elif self.rate is not None:
                shaping = [["ip", "netns", "exec", host.namespace, "tc", "qdisc", "add", "dev",
                            "eth0", "root", "tbf", "rate", self.rate, "burst", str(self.bucket),
                            "latency", "500ms"]]
            else:
                shaping = []
            if self.delay_ms:
                shaping += delay.sysctl_commands(
                    host.namespace, delay.socket_buffer_bytes(self.rate, self.delay_ms))
            for command in shaping:
                done = subprocess.run(command, capture_output=True, text=True)
                if done.returncode != 0:
                    raise CourseError(f"could not shape the link ({' '.join(command[4:7])}): "
                                      f"{done.stderr.strip()}")
            folder = NETNS_ETC / host.namespace
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "hosts").write_text(
                f"127.0.0.1 localhost\n{host.address} {hostname}\n")

    def _veth(self, i: int, host: Host, switch: str) -> None:
        """Host ``i``'s ``eth0``: one end of a veth pair whose other end is on the bridge."""
        inside, outside = f"{self.prefix}v{i}a", f"{self.prefix}v{i}b"
        _ip("link", "add", inside, "type", "veth", "peer", "name", outside)
        _ip("link", "set", inside, "netns", host.namespace)
        _ip("link", "set", outside, "netns", switch)
        _ip("-n", host.namespace, "link", "set", inside, "name", "eth0")
        _ip("-n", host.namespace, "addr", "add", f"{host.address}/24", "dev", "eth0")
        for link in ("lo", "eth0"):
            _ip("-n", host.namespace, "link", "set", link, "up")
        _ip("-n", switch, "link", "set", outside, "master", "br0")
        _ip("-n", switch, "link", "set", outside, "up")


def _start(argv: list[str], pass_fds: tuple[int, ...] = ()) -> subprocess.Popen:
    """A helper process of the cluster (``python`` ``argv``) in its own session, so that Ctrl-C
    reaches only the command, once it printed ``ready``; a one-line ``CourseError`` if it
    does not within 20 s."""
    popen = subprocess.Popen([sys.executable, *argv], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True, pass_fds=pass_fds)
    ready, _, _ = select.select([popen.stdout], [], [], 20.0)
    if not ready or popen.stdout.readline().strip() != "ready":
        popen.kill()
        _, err = popen.communicate()
        tail = err.strip().splitlines()[-1:] or ["no answer in 20 s"]
        raise CourseError(f"{argv[1].rsplit('.', 1)[-1]} did not start: {tail[0]}")
    return popen
