"""One host's side of ``course cluster --measure latency``: what a one-way delay (``--delay``)
costs a message.

On the first device of every host (a mesh of one device per host, axis ``hosts``), in order:
- the idle line's round trip: host 0 sends 64-byte UDP datagrams to host 1, which echoes each;
- a 64-byte ping-pong built from two ``ppermute`` calls in one program (host 0 → host 1, then
  back), called back to back: what JAX sees of one round trip;
- one ring message step (every host sends S bytes to the next, one ``ppermute``) at each of the
  plan's sizes, called back to back: each call waits for the host before it, so a call takes one
  message step, the delay once and the bytes at the link's rate;
- three all-reduces of an S-byte vector at each of the plan's sizes, called back to back on
  warm connections: the ring built from ``ppermute`` (2(p − 1) message steps of S/p),
  recursive doubling (log₂ p steps of S) and the built-in ``psum``; and recursive doubling's
  first step alone, every pair of hosts swapping S bytes;
- what one TCP connection carries, host 0 to host 1 (``tcp``): clamped windows, several
  connections, an open window, and a sync's time fresh, back to back and after an idle gap.
Host 0 reports its times; ``results.latency`` fits T = α + S/B to the message steps and reads
the all-reduces and the connection against the models.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Sequence

import numpy as np

from course_utils.results.latency import LatencyResults, rows_from_runs
from course_utils.results.records import from_json, to_json
from course_utils.results.round_trips import round_trip_lines
from course_utils.tools.cluster.measurements import HostRun, Measurement, Setup
from course_utils.tools.cluster.tcp import tcp_report
from course_utils.tools.cluster.timing import Timed, placed, timer

# sizes: a ring message step's bytes; allreduce: the all-reduces' vector bytes and repeats; tcp:
# the clamped window, the connections beside it, a stream's seconds (after warm_s at least,
# ``tcp.tcp_report``), a sync's bytes, how many syncs of each kind and the idle gap before one
LATENCY_PLANS = {
    "quick": {"sizes": (64, 16384, 262144), "repeats": 5, "probes": 10,
              "allreduce": {"sizes": (16384, 262144), "repeats": 2},
              "tcp": {"window": 65536, "connections": 4, "seconds": 0.5, "warm_s": 0.3,
                      "sync_bytes": 262144, "syncs": 2, "idle_s": 0.5}},
    "full": {"sizes": (64, 1024, 16384, 65536, 262144, 1048576), "repeats": 10, "probes": 30,
             "allreduce": {"sizes": tuple(2**k for k in range(14, 23)), "repeats": 3},
             "tcp": {"window": 65536, "connections": 4, "seconds": 1.5, "warm_s": 0.5,
                     "sync_bytes": 2**20, "syncs": 3, "idle_s": 3.0}},
}
# timed at each size: three all-reduces, and one step of recursive doubling alone (a swap)
ALGORITHMS = ("ring", "doubling", "psum", "swap")
UDP_PORT = 47303  # host 1's echo (the coordinator has 47301, the links measurement 47302)
PROBE_BYTES = 64
# the idle line's round trip, measured by two small processes of their own (no thread of a JAX
# process delays them): host 1's echo, and host 0's probe, which prints each round trip in ms
ECHO = ("import socket, sys\n"
        "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "s.bind((sys.argv[1], int(sys.argv[2])))\n"
        "print('ready', flush=True)\n"
        "while True:\n"
        "    data, sender = s.recvfrom(2048)\n"
        "    s.sendto(data, sender)\n")
PROBE = ("import json, socket, sys, time\n"
         "host, port, probes, size, pause = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "
         "int(sys.argv[4]), float(sys.argv[5])\n"
         "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
         "s.settimeout(5.0)\n"
         "times = []\n"
         "for _ in range(probes + 1):\n"
         "    start = time.perf_counter()\n"
         "    s.sendto(bytes(size), (host, port))\n"
         "    s.recvfrom(2048)\n"
         "    times.append((time.perf_counter() - start) * 1e3)\n"
         "    time.sleep(pause)\n"
         "print(json.dumps(times[1:]))\n")  # the first probe warms the path up
PAUSE_S = 0.005  # between two probes: the line is idle when each leaves


def udp_round_trips_ms(me: int, probes: int) -> list[float]:
    """Host 0: the round trip of each of ``probes`` 64-byte datagrams that host 1 echoes, in
    ms, one at a time with a pause between them (the line idle); other hosts: ``[]``."""
    from jax.experimental.multihost_utils import sync_global_devices

    from course_utils.tools.cluster.netns import SUBNET

    echo, times = None, []
    if me == 1:
        echo = subprocess.Popen([sys.executable, "-c", ECHO, f"{SUBNET}.2", str(UDP_PORT)],
                                stdout=subprocess.PIPE, text=True)
        echo.stdout.readline()
    sync_global_devices("latency: echo listening")
    if me == 0:
        done = subprocess.run([sys.executable, "-c", PROBE, f"{SUBNET}.2", str(UDP_PORT),
                               str(probes), str(PROBE_BYTES), str(PAUSE_S)],
                              capture_output=True, text=True, check=True)
        times = json.loads(done.stdout)
    sync_global_devices("latency: probed")
    if echo is not None:
        echo.kill()
        echo.wait()
    return times


def measure_latency(plan: dict, timed: Timed) -> dict:
    """Host 0's report: the idle round trips, the ping-pong's median and each size's message
    step, in ms."""
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    me, hosts = jax.process_index(), jax.process_count()
    round_trips = udp_round_trips_ms(me, plan["probes"])
    firsts = [next(d for d in jax.devices() if d.process_index == h) for h in range(hosts)]
    mesh = Mesh(np.array(firsts), ("hosts",))

    def program(body):
        return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("hosts"), out_specs=P("hosts")))

    def pingpong(x):
        there = jax.lax.ppermute(x, "hosts", [(0, 1)])
        return jax.lax.ppermute(there, "hosts", [(1, 0)])

    def ring_step(x):
        return jax.lax.ppermute(x, "hosts", [(i, (i + 1) % hosts) for i in range(hosts)])

    def value(nbytes: int):
        return placed(mesh, np.ones((hosts, nbytes // 4), np.float32), P("hosts"))

    pingpong_s, _ = timed(program(pingpong), value(PROBE_BYTES))
    step = program(ring_step)
    step_ms = [timed(step, value(size))[0] * 1e3 for size in plan["sizes"]]
    reduce = plan["allreduce"]
    timed_few, sums = timer(reduce["repeats"]), all_reduces(hosts)
    reduce_ms: dict = {name: [] for name in ALGORITHMS}
    for size in reduce["sizes"]:  # size by size, the four in turn
        for name in ALGORITHMS:
            block = sums[name]
            reduced = program(lambda x, block=block: block(x[0])[None])
            reduce_ms[name].append(timed_few(reduced, value(size))[0] * 1e3)
    tcp = tcp_report(me, plan, statistics.median(round_trips) if round_trips else 0.0)
    return {"udp_round_trips_ms": round_trips, "pingpong_ms": pingpong_s * 1e3,
            "sizes": list(plan["sizes"]), "step_ms": step_ms,
            "allreduce_sizes": list(reduce["sizes"]), "allreduce_ms": reduce_ms, "tcp": tcp}


def all_reduces(hosts: int) -> dict:
    """By name (``ALGORITHMS``), a function of one host's f32 vector inside ``shard_map`` over
    ``hosts``: the ring with both halves from ``ppermute`` (2(p − 1) message steps of S/p),
    recursive doubling (log₂ p steps of S), the built-in ``psum``, and recursive doubling's
    first step alone: each pair of hosts swaps S bytes over one connection."""
    import jax

    from course_utils.collectives.doubling import (
        doubling_permutation,
        recursive_doubling_all_reduce,
    )
    from course_utils.collectives.ring import ring_all_reduce

    return {"ring": lambda g: ring_all_reduce(g, "hosts", hosts, by_hand=True),
            "doubling": lambda g: recursive_doubling_all_reduce(g, "hosts", hosts),
            "psum": lambda g: jax.lax.psum(g, "hosts"),
            "swap": lambda g: jax.lax.ppermute(g, "hosts", doubling_permutation(hosts, 0))}


def assemble_latency(host_runs: Sequence[HostRun], setup: Setup) -> LatencyResults:
    """Every cell of every run, with the delay line's kind."""
    return from_json(LatencyResults, {
        "meta": to_json(setup.run_meta("latency")), "cluster": to_json(setup.cluster()),
        "rows": rows_from_runs([(h.run, h.link_rate, h.delay_ms, h.result) for h in host_runs])},
        "the latency run")


def check_latency(setup: Setup) -> str | None:
    """Recursive doubling pairs the hosts: their number must be a power of two."""
    if setup.hosts & (setup.hosts - 1):
        return (f"--measure latency runs recursive doubling, which pairs the hosts: give "
                f"--hosts 2, 4 or 8, not {setup.hosts}")
    return None


MEASUREMENT = Measurement(name="latency", plans=LATENCY_PLANS, measure=measure_latency,
                          assemble=assemble_latency, output="latency.json", lines=round_trip_lines,
                          check=check_latency)
