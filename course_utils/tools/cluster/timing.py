"""What every cluster measurement times with, on a host: a call's median seconds and the bytes
the host's link sent meanwhile (``timer``), and a value placed on the global devices
(``placed``). Run inside a host's namespace, after the host joined JAX's multi-process runtime;
``timer`` also runs in the parent, where no link counter exists and the bytes are ``None``;
``interleaved`` times several calls taking turns."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import numpy as np

# inside a host's namespace (``ip netns exec`` mounts its own /sys): what the host's link sent
LINK_COUNTER = Path("/sys/class/net/eth0/statistics/tx_bytes")

# timed(fn, *args): the median seconds of the completed calls, and the bytes sent per call
Timed = Callable[..., tuple[float, float | None]]


def sent_bytes() -> int | None:
    """Bytes this host has sent over its link so far, or ``None`` outside a host's namespace."""
    try:
        return int(LINK_COUNTER.read_text())
    except (OSError, ValueError):
        return None


def settled_sent_bytes(limit_s: float = 3.0, every_s: float = 0.02) -> int | None:
    """The link counter once it has stopped moving (or after ``limit_s``): a call can return
    while its last bytes still wait in TCP's buffers or the shaper's queue, and they belong to
    that call, not to the next reading."""
    last, deadline = sent_bytes(), time.monotonic() + limit_s
    while last is not None and time.monotonic() < deadline:
        time.sleep(every_s)
        now = sent_bytes()
        if now == last:
            break
        last = now
    return last


def timer(repeats: int) -> Timed:
    """``timed(fn, *args)``: ``fn(*args)`` called once to compile and touch its inputs, then
    ``repeats`` times, each waited for; the median seconds of those calls, and the bytes the
    host's link sent per call meanwhile (``None`` without a counter)."""
    import jax

    def timed(fn, *args) -> tuple[float, float | None]:
        jax.block_until_ready(fn(*args))  # compile, first touch
        times, before = [], settled_sent_bytes()
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - start)
        after = settled_sent_bytes()
        sent = None if before is None or after is None else (after - before) / repeats
        return float(np.median(times)), sent

    return timed


def interleaved(calls: dict, repeats: int) -> dict:
    """Each of ``calls`` (name: a function of no argument) called once to compile and touch
    its inputs, then all of them in turn ``repeats`` times, each call waited for: by name, the
    median seconds of its calls and the bytes the host's link sent per call (``None`` without
    a counter). Taking turns spreads a busy machine's slow spells over every call alike.

    Every process waits for the others before each call (``sync_global_devices``): a call
    with a collective then does not time how far another host lagged behind, and the link
    counter is read there, once the other hosts have received all this host sent in the call
    before (a collective can return here while this host's last bytes still wait in its
    link's queue, and a counter that only seems to have stopped, ``settled_sent_bytes``, can
    be waiting for acknowledgements queued behind the other host's data)."""
    import jax
    from jax.experimental.multihost_utils import sync_global_devices

    for fn in calls.values():
        jax.block_until_ready(fn())
    times: dict = {name: [] for name in calls}
    sent: dict = {name: 0 for name in calls}
    last, mark = None, None
    for _ in range(repeats):
        for name, fn in calls.items():
            sync_global_devices(name)
            last, mark = name, _count(sent, last, mark)
            start = time.perf_counter()
            jax.block_until_ready(fn())
            times[name].append(time.perf_counter() - start)
    sync_global_devices("interleaved")
    _count(sent, last, mark)
    return {name: (float(np.median(times[name])),
                   None if sent[name] is None else sent[name] / repeats) for name in calls}


def _count(sent: dict, last, mark: int | None) -> int | None:
    """The link counter now, its change since ``mark`` added to ``sent[last]``."""
    now = sent_bytes()
    if last is not None:
        sent[last] = None if None in (now, mark, sent[last]) else sent[last] + now - mark
    return now


def placed(mesh, value: np.ndarray, spec):
    """``value`` (the same on every process) as a global array; each process fills its own
    shards."""
    import jax
    from jax.sharding import NamedSharding

    return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec),
                                        lambda i: value[i])
