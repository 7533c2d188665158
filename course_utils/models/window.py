"""One TCP connection: its window against the bandwidth-delay product, and slow start.

A sender has at most one window of unacknowledged bytes in flight, and each byte's ACK comes
back a round trip after it left: one connection sends at most ``window / rtt`` bytes a second,
and never more than the link's rate. The window that fills the link is the bandwidth-delay
product, ``rate · rtt`` (BDP). A fresh connection does not start there: its congestion window
starts at ``INITIAL_WINDOW`` (Linux: 10 segments, RFC 6928) and doubles every round trip (slow
start, RFC 5681) until it covers the BDP; from then on the link's rate limits. ``slow_start_s``
is the time of one transfer on a fresh connection: a handshake, slow-start rounds, the rest at
the link's rate and the receiver's reply. Loss, the receiver's window, delayed ACKs and the time
to put a round's window on the wire are left out.
"""

from __future__ import annotations

import math
import numbers

from course_utils.validate import positive_int

__all__ = ["INITIAL_WINDOW", "MSS", "bdp_bytes", "slow_start_s", "window_rate"]

MSS = 1448  # payload bytes of a full segment: a 1500-byte MTU less IP, TCP and timestamps
INITIAL_WINDOW = 10 * MSS  # Linux's initial congestion window (RFC 6928): 14,480 bytes


def _positive(name: str, value: object) -> float:
    """``value`` as a float if it is a finite real number above 0 (not ``bool``), else a
    ``ValueError`` that names it."""
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or value <= 0):
        raise ValueError(f"{name} must be a finite number above 0, got {value!r}; give it in "
                         "bytes, seconds or bytes per second")
    return float(value)


def bdp_bytes(rate_bytes_per_s: float, rtt_s: float) -> float:
    """The bandwidth-delay product: the bytes in flight that keep a link of ``rate_bytes_per_s``
    busy for a round trip of ``rtt_s``, the window one connection needs to fill it.

    Examples:
        >>> bdp_bytes(6.25e6, 0.1)  # 50 Mbit/s over 100 ms: 43 segments of 1448 bytes
        625000.0
    """
    return _positive("rate_bytes_per_s", rate_bytes_per_s) * _positive("rtt_s", rtt_s)


def window_rate(window_bytes: float, rtt_s: float, rate_bytes_per_s: float, *,
                connections: int = 1) -> float:
    """The steady bytes per second of ``connections`` connections with ``window_bytes`` each in
    flight: a window per round trip each, at most the link's rate together.

    Examples:
        >>> window_rate(INITIAL_WINDOW, 0.1, 6.25e6)  # the initial window: 144,800 B/s
        144800.0
        >>> window_rate(INITIAL_WINDOW, 0.1, 6.25e6, connections=100)  # the link limits
        6250000.0
    """
    window = _positive("window_bytes", window_bytes)
    rtt, rate = _positive("rtt_s", rtt_s), _positive("rate_bytes_per_s", rate_bytes_per_s)
    k = positive_int("connections", connections)
    return min(rate, k * window / rtt)


def slow_start_s(size_bytes: float, rate_bytes_per_s: float, rtt_s: float, *,
                 initial_window: float = INITIAL_WINDOW) -> float:
    """Seconds from ``connect()`` until the sender reads the receiver's one-byte reply saying it
    has all ``size_bytes``, on a fresh connection (no loss; the receiver's window never limits):
    one round trip for the handshake; then rounds of one round trip each, a window of bytes out
    and its ACKs back, the window doubling, while more than the window is left and the window is
    below the BDP; then the rest at the link's rate, and one round trip for its last byte to
    arrive and the reply to come back.

    Examples:
        >>> round(slow_start_s(2**20, 6.25e6, 0.1), 4)  # 1 MiB at 50 Mbit/s: 6 rounds first
        0.8218
        >>> round(slow_start_s(2**20, 1e5, 0.1), 4)  # BDP 10,000 B: no round, 0.1 + 10.49 + 0.1
        10.6858
    """
    size = _positive("size_bytes", size_bytes)
    rate, rtt = _positive("rate_bytes_per_s", rate_bytes_per_s), _positive("rtt_s", rtt_s)
    window = _positive("initial_window", initial_window)
    seconds, left = rtt, size  # the handshake
    while left > window and window < rate * rtt:  # a round: a window out, its ACKs back
        seconds += rtt
        left -= window
        window *= 2
    return seconds + left / rate + rtt  # the rest at the rate; its last byte over, the reply back
