"""Trace what crosses a cluster link during part five's syncs and single collectives (issue 50):
each call timed after an idle gap, with TCP's counters (retransmits, timeouts, loss probes),
tbf's drops, and each connection's tcp_info from ``ss -ti`` around it (busy time: data in
flight; rwnd- and sndbuf-limited time), ``cwnd`` and RTT sampled during it.

As root, on a quiet machine (one cluster at a time)::

    python scripts/trace_syncs.py syncs 10mbit,200mbit out.json [SYSCTL=VALUE ...]
    python scripts/trace_syncs.py collectives 10mbit,200mbit out.json

``syncs``: the DiLoCo measurement's one sync alone of every method (``diloco_rounds``), 2 hosts
of 2 devices; ``collectives``: a psum, a psum_scatter, an all_to_all, an all_gather and a
ppermute, each sending 1 MB per host, 2 hosts of 1 device. A ``SYSCTL=VALUE`` (for example
``net.ipv4.tcp_slow_start_after_idle=0``) is set in every host's namespace. Prints a summary
and writes every call's record to ``out.json``.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NETSTAT = ("TCPTimeouts", "TCPLossProbes", "TCPSlowStartRetrans", "TCPFastRetrans",
           "RetransSegs")
INFO = ("busy", "rwnd_limited", "sndbuf_limited", "bytes_sent")
MB = 1_000_000


def counters() -> dict:
    """This namespace's TCP counters and its link's tbf drops."""
    out = {}
    for f in ("/proc/net/netstat", "/proc/net/snmp"):
        lines = Path(f).read_text().splitlines()
        for head, values in zip(lines[::2], lines[1::2]):
            out |= {k: int(v) for k, v in zip(head.split()[1:], values.split()[1:])
                    if k in NETSTAT}
    shown = subprocess.run(["tc", "-s", "qdisc", "show", "dev", "eth0"], capture_output=True,
                           text=True).stdout
    dropped = re.search(r"dropped (\d+)", shown)
    out["tbf_dropped"] = int(dropped.group(1)) if dropped else 0
    return out


def connections() -> dict:
    """Per connection to another host: ``INFO``'s cumulative values from ``ss -ti``."""
    shown = subprocess.run(["ss", "-tin", "dst", "10.77.0.0/24"], capture_output=True,
                           text=True).stdout.splitlines()
    out = {}
    for head, info in zip(shown, shown[1:]):
        if head.startswith("ESTAB"):
            out[" ".join(head.split()[3:5])] = {
                k: int(m.group(1)) if (m := re.search(rf"\b{k}:(\d+)", info)) else 0
                for k in INFO}
    return out


def _sample(stop: threading.Event, samples: list) -> None:
    while not stop.is_set():
        shown = subprocess.run(["ss", "-tin", "dst", "10.77.0.0/24"], capture_output=True,
                               text=True).stdout
        cwnd = [int(x) for x in re.findall(r"\bcwnd:(\d+)", shown)]
        rtt = [float(x) for x in re.findall(r"\brtt:([\d.]+)/", shown)]
        samples.append((max(cwnd or [0]), max(rtt or [0.0])))
        time.sleep(0.01)


def traced(name: str, call, idle_s: float) -> dict:
    """``call()`` after ``idle_s`` of idle link, timed, with what TCP and tbf did meanwhile."""
    import jax

    time.sleep(idle_s)
    before, conns, samples, stop = counters(), connections(), [], threading.Event()
    sampler = threading.Thread(target=_sample, args=(stop, samples))
    sampler.start()
    start = time.perf_counter()
    jax.block_until_ready(call())
    took = time.perf_counter() - start
    stop.set()
    sampler.join()
    time.sleep(0.5)  # the last bytes leave the queue
    after, now = counters(), connections()
    used = {k: {i: v[i] - conns.get(k, {}).get(i, 0) for i in INFO} for k, v in now.items()}
    used = {k: v for k, v in used.items() if v["bytes_sent"] > 10_000}
    return {"call": name, "seconds": took, "counters": {k: after[k] - before[k] for k in after},
            "connections": used, "max_cwnd": max((c for c, _ in samples), default=0),
            "max_rtt_ms": max((r for _, r in samples), default=0.0)}


def sync_calls() -> dict:
    """Every DiLoCo method's one sync alone, as ``course cluster --measure diloco`` times it."""
    from functools import partial

    from course_utils.tools.cluster import diloco_rounds as dr
    from course_utils.tools.cluster.diloco import DILOCO_PLANS, methods, parameters
    from course_utils.tools.cluster.overlap import host_mesh

    plan = DILOCO_PLANS["full"]
    lay = dr.layout(host_mesh(), plan["batch_size"], parameters(plan, 2))
    return {m.name: partial(dr.one_sync, dr.rounds(lay, m), lay) for m in methods(plan)}


def collective_calls() -> dict:
    """One collective of each kind, each host sending ``MB`` bytes (2 hosts, 1 device each)."""
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.asarray(jax.devices()), ("host",))

    def call(body, size, dtype, out):
        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("host"), out_specs=out))
        x = jax.make_array_from_callback((size,), NamedSharding(mesh, P("host")),
                                         lambda i: np.ones(size, dtype)[i])
        return lambda: fn(x)

    return {"psum f32": call(lambda v: jax.lax.psum(v, "host"), MB // 2, np.float32,
                             P("host")),
            "psum_scatter f32": call(lambda v: jax.lax.psum_scatter(v, "host", tiled=True),
                                     MB, np.float32, P("host")),
            "all_to_all u8": call(lambda v: jax.lax.all_to_all(
                v.reshape(2, -1), "host", 0, 0, tiled=True).reshape(-1), 4 * MB, np.uint8,
                P("host")),
            "all_gather u8": call(lambda v: jax.lax.all_gather(
                v, "host", tiled=True, to="invarying"), 2 * MB, np.uint8, P(None)),
            "ppermute u8": call(lambda v: jax.lax.ppermute(v, "host", [(0, 1), (1, 0)]),
                                2 * MB, np.uint8, P("host"))}


def worker(kind: str, process: int, coordinator: str) -> None:
    sys.path.insert(0, str(ROOT))
    from course_utils.devices.multiprocess import join_runtime

    join_runtime(coordinator, process, 2, 2 if kind == "syncs" else 1)
    import jax
    from jax.experimental.multihost_utils import sync_global_devices

    calls = sync_calls() if kind == "syncs" else collective_calls()
    for call in calls.values():
        jax.block_until_ready(call())
    report = []
    for repeat in range(4):
        for name, call in calls.items():
            sync_global_devices(name)
            report.append({"repeat": repeat, **traced(name, call, idle_s=0.7)})
    if process == 0:
        print(json.dumps(report), flush=True)


def main(argv: list[str]) -> int:
    if argv[0] == "--worker":
        worker(argv[1], int(argv[2]), argv[3])
        return 0
    sys.path.insert(0, str(ROOT))
    from course_utils.models.links import FRAME_SHARE, rate_bytes_per_s
    from course_utils.tools.cluster.netns import Cluster, host_command

    kind, rates, out, settings = argv[0], argv[1].split(","), Path(argv[2]), argv[3:]
    results = []
    for rate in rates:
        with Cluster(2, rate) as hosts, tempfile.TemporaryDirectory() as logs:
            for host in hosts:
                for setting in settings:
                    subprocess.run(["ip", "netns", "exec", host.namespace, "sysctl", "-qw",
                                    setting], check=True)
            procs = [subprocess.Popen(
                host_command(host, [sys.executable, __file__, "--worker", kind, str(i),
                                    f"{hosts[0].address}:47301"]),
                stdout=open(f"{logs}/out{i}", "w"), stderr=open(f"{logs}/err{i}", "w"))
                for i, host in enumerate(hosts)]
            for proc in procs:
                proc.wait(timeout=1800)
            lines = [x for x in Path(f"{logs}/out0").read_text().splitlines()
                     if x.startswith("[{")]
            if not lines:
                print(Path(f"{logs}/err0").read_text()[-2000:])
                return 1
            calls = json.loads(lines[-1])
        results.append({"rate": rate, "settings": settings, "calls": calls})
        payload = rate_bytes_per_s(rate) * FRAME_SHARE
        for name in dict.fromkeys(c["call"] for c in calls):
            mine = [c for c in calls if c["call"] == name]
            shown = []
            for c in mine:
                sent = sum(v["bytes_sent"] for v in c["connections"].values())
                busy = sum(v["busy"] for v in c["connections"].values())
                shown.append(f"{c['seconds'] * 1e3:.0f} ms ({c['seconds'] * payload / sent:.2f}"
                             f"× its bytes at the rate, busy {busy} ms)" if sent else "-")
            lost = sum(c["counters"]["RetransSegs"] + c["counters"]["tbf_dropped"] for c in mine)
            print(f"{rate} {name}: {'; '.join(shown)}; retransmits + drops {lost}")
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
