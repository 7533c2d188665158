"""One host's side of ``course cluster --measure links``: does tbf hold the configured rate with
the one bucket rule (``links.bucket_bytes``), and how fast are the links unshaped?

Every host sends to the next one at once, the ring's pattern, over one TCP connection, for the
plan's seconds; after the first ``warm_s`` (the bucket spent, TCP's window open) it reads its
link's counter (every frame tbf counts) and the payload it received from the host before it,
and again at the end. Every host's two rates are gathered to host 0, which reports them.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time
from typing import Sequence

import numpy as np

from course_utils.models.links import bucket_bytes
from course_utils.results.links import UNSHAPED, LinkResults
from course_utils.results.records import from_json, to_json
from course_utils.tools.cluster.measurements import HostRun, Measurement, Setup
from course_utils.tools.cluster.timing import Timed, sent_bytes

LINK_PLANS = {"quick": {"seconds": 2.0, "warm_s": 0.5, "repeats": 1},
              "full": {"seconds": 6.0, "warm_s": 1.5, "repeats": 1}}
PORT = 47302  # each host's receiver (the coordinator has 47301)
CHUNK = bytes(256 * 1024)


def _receive(server: socket.socket, counted: list[int]) -> None:
    connection, _ = server.accept()
    with connection:
        while chunk := connection.recv(1 << 20):
            counted[0] += len(chunk)


def measure_links(plan: dict, timed: Timed) -> dict:
    """This host's wire and payload bytes per second while every host sends to the next;
    host 0 reports every host's (``{"hosts": [[wire, payload], …]}``)."""
    import jax
    from jax.experimental.multihost_utils import process_allgather, sync_global_devices

    from course_utils.tools.cluster.netns import SUBNET

    me, hosts = jax.process_index(), jax.process_count()
    received = [0]
    with socket.create_server(("", PORT)) as server:
        receiver = threading.Thread(target=_receive, args=(server, received), daemon=True)
        receiver.start()
        sync_global_devices("links: listening")
        with socket.create_connection((f"{SUBNET}.{(me + 1) % hosts + 1}", PORT)) as out:
            start = time.monotonic()
            marks, end = [], start + plan["seconds"]
            while (now := time.monotonic()) < end:
                if not marks and now >= start + plan["warm_s"]:
                    marks.append((now, sent_bytes(), received[0]))
                out.sendall(CHUNK)
            marks.append((time.monotonic(), sent_bytes(), received[0]))
        receiver.join(timeout=30)
    (t0, wire0, got0), (t1, wire1, got1) = marks
    mine = np.array([(wire1 - wire0) / (t1 - t0), (got1 - got0) / (t1 - t0)])
    return {"hosts": np.asarray(process_allgather(mine)).reshape(hosts, 2).tolist()}


def assemble_links(host_runs: Sequence[HostRun], setup: Setup) -> LinkResults:
    """Every host at every rate in every run, with each shaped rate's bucket."""
    return from_json(LinkResults, {
        "meta": to_json(setup.run_meta("links")), "cluster": to_json(setup.cluster()),
        "bucket_bytes": {h.link_rate: bucket_bytes(h.link_rate) for h in host_runs
                         if h.link_rate != UNSHAPED},
        "rows": [{"link_rate": h.link_rate, "run": h.run, "host": i, "wire_bytes_per_s": wire,
                  "payload_bytes_per_s": payload}
                 for h in host_runs for i, (wire, payload) in enumerate(h.result["hosts"])]},
        "the links run")


def links_lines(results: LinkResults) -> list[str]:
    """Each rate: what the hosts' links delivered against it, and the ceiling."""
    from course_utils.models.links import rate_bytes_per_s

    lines = []
    for rate in results.rates():
        got = results.delivered(rate)
        shown = ", ".join(f"{g * 8 / 1e6:,.1f}" for g in got)
        if rate == UNSHAPED:
            lines.append(f"{rate:>9s}: hosts delivered {shown} Mbit/s (the ceiling)")
            continue
        wire = statistics.median(g / rate_bytes_per_s(rate) for g in got)
        payload = statistics.median(results.payload_share(rate))
        lines.append(f"{rate:>9s}: hosts' counters {shown} Mbit/s ({wire:.3f} of the rate), "
                     f"payload {payload:.3f} of rate × 1448/1514, bucket "
                     f"{results.bucket_bytes[rate]:,} B"
                     + ("" if results.held(rate) else "; NOT held within 5 %"))
    return lines


MEASUREMENT = Measurement(name="links", plans=LINK_PLANS, measure=measure_links,
                          assemble=assemble_links, output="links.json", lines=links_lines,
                          unshaped=True)
