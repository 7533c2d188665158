"""One host's side of ``course cluster --measure latency``: what a one-way delay (``--delay``)
costs a message.

On the first device of every host (a mesh of one device per host, axis ``hosts``), in order:
- the idle line's round trip: host 0 sends 64-byte UDP datagrams to host 1, which echoes each;
- a 64-byte ping-pong built from two ``ppermute`` calls in one program (host 0 → host 1, then
  back), called back to back: what JAX sees of one round trip;
- one ring message step (every host sends S bytes to the next, one ``ppermute``) at each of the
  plan's sizes, called back to back: each call waits for the host before it, so a call takes one
  message step, the delay once and the bytes at the link's rate.
Host 0 reports its times; ``results.latency`` fits T = α + S/B to the message steps.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Sequence

import numpy as np

from course_utils.results.latency import LatencyResults, latency_lines, rows_from_runs
from course_utils.results.records import from_json, to_json
from course_utils.tools.cluster.measurements import HostRun, Measurement, Setup
from course_utils.tools.cluster.timing import Timed, placed

LATENCY_PLANS = {
    "quick": {"sizes": (64, 16384, 262144), "repeats": 5, "probes": 10},
    "full": {"sizes": (64, 1024, 16384, 65536, 262144, 1048576), "repeats": 10, "probes": 30},
}
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
    return {"udp_round_trips_ms": round_trips, "pingpong_ms": pingpong_s * 1e3,
            "sizes": list(plan["sizes"]), "step_ms": step_ms}


def assemble_latency(host_runs: Sequence[HostRun], setup: Setup) -> LatencyResults:
    """Every cell of every run, with the delay line's kind."""
    return from_json(LatencyResults, {
        "meta": to_json(setup.run_meta("latency")), "cluster": to_json(setup.cluster()),
        "rows": rows_from_runs([(h.run, h.link_rate, h.delay_ms, h.result) for h in host_runs])},
        "the latency run")


MEASUREMENT = Measurement(name="latency", plans=LATENCY_PLANS, measure=measure_latency,
                          assemble=assemble_latency, output="latency.json", lines=latency_lines)
