"""Refuse every socket connection that leaves this machine, and remember who tried.

Installed for the test process by tests/conftest.py, and for every notebook kernel the tests start
through an IPython startup file (see the root conftest.py). Loopback (127.0.0.0/8, ::1, localhost)
and Unix sockets stay allowed: JupyterLab, the kernels and jax.distributed's coordinator use them.
"""

import ipaddress
import socket

attempts: list = []


def is_local(address) -> bool:
    """Whether a socket address stays on this machine."""
    if isinstance(address, (str, bytes)):
        return True
    host = address[0]
    if host in ("", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guard(method):
    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and not is_local(address):
            attempts.append(address)
            raise ConnectionRefusedError(
                f"tests never reach the network; refused a connection to {address!r}"
            )
        return method(self, address)

    return connect


def install() -> None:
    """Guard ``socket.socket.connect`` and ``connect_ex`` in this process (idempotent)."""
    if not getattr(socket.socket.connect, "network_guard", False):
        for name in ("connect", "connect_ex"):
            guarded = _guard(getattr(socket.socket, name))
            guarded.network_guard = True
            setattr(socket.socket, name, guarded)
