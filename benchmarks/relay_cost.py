"""What the delay line's relay costs a host's compute: a jitted matmul timed on this machine while
nothing runs, while one TCP stream crosses a veth link between two hosts, and while the same
stream crosses the TUN relay (``course cluster --delay``). The relay copies every packet in
Python on the cores the hosts compute on; this prints how much slower the compute gets.

    sudo python benchmarks/relay_cost.py [--rate 600mbit] [--delay 25] [--repeats 3]

Prints, for each condition, the median of ``--repeats`` runs (each run: the median of 20 timed
matmuls) with the runs' range, and each against the idle machine's.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

RECEIVE = ("import socket\n"
           "s = socket.create_server(('', 47304))\n"
           "print('ready', flush=True)\n"
           "c, _ = s.accept()\n"
           "while c.recv(1 << 20):\n"
           "    pass\n")
SEND = ("import socket, sys\n"
        "c = socket.create_connection((sys.argv[1], 47304))\n"
        "chunk = bytes(1 << 18)\n"
        "while True:\n"
        "    c.sendall(chunk)\n")


def compute_ms(repeats: int = 20) -> float:
    """The median ms of a 1024² float32 matmul, jitted, on this process's CPU device."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((1024, 1024), jnp.float32)
    step = jax.jit(lambda x: (x @ x).sum())
    step(a).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step(a).block_until_ready()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def during_stream(rate: str, delay_ms: float | None) -> float:
    """``compute_ms`` while host 0 streams to host 1 over a cluster of 2 hosts at ``rate``
    (with the TUN relay and ``delay_ms`` one way, or plain veth links for ``None``)."""
    from course_utils.tools.cluster.netns import Cluster

    with Cluster(2, rate, delay_ms=delay_ms, line="tun") as hosts:
        receiver = subprocess.Popen(["ip", "netns", "exec", hosts[1].namespace, sys.executable,
                                     "-c", RECEIVE], stdout=subprocess.PIPE, text=True)
        receiver.stdout.readline()
        sender = subprocess.Popen(["ip", "netns", "exec", hosts[0].namespace, sys.executable,
                                   "-c", SEND, hosts[1].address])
        try:
            time.sleep(2.0)  # TCP's window open, the link busy
            return compute_ms()
        finally:
            for p in (sender, receiver):
                p.kill()
                p.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", default="600mbit")
    parser.add_argument("--delay", type=float, default=25.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    conditions = {"idle": lambda: compute_ms(),
                  f"stream over veth at {args.rate}": lambda: during_stream(args.rate, None),
                  f"stream through the relay at {args.rate}, {args.delay:g} ms":
                      lambda: during_stream(args.rate, args.delay)}
    runs = {name: [] for name in conditions}
    for _ in range(args.repeats):  # the conditions take turns: a slow spell hits all alike
        for name, measure in conditions.items():
            runs[name].append(measure())
    idle = statistics.median(runs["idle"])
    for name, values in runs.items():
        median = statistics.median(values)
        print(f"{name:>45s}: matmul {median:6.2f} ms (runs {min(values):.2f}–{max(values):.2f}),"
              f" {median / idle:.2f}× the idle machine's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
