"""The TCP part of ``course cluster --measure latency``: what one connection carries over the
delay line, host 0 sending to host 1.

Two small processes of their own (no thread of a JAX process delays them), as the idle line's
round trip is measured: host 1's ``SINK`` and host 0's ``SOURCE``, which prints one JSON line.
- **A stream for ``seconds``** after ``warm_s`` (slow start over, the window open), read where it
  arrives: one connection whose receiver clamps its window (``TCP_WINDOW_CLAMP`` at ``window``
  bytes; the window Linux then advertises is not the clamp — 131,070 bytes, 65,535 × 2 at window
  scale 1, for a 64 KiB clamp in the saved run — so the sender's view of it, ``tcp_info``'s
  ``snd_wnd``, is reported as ``window_seen``), ``connections`` such connections at once, and one
  connection whose window may grow to twice the bandwidth-delay product
  (``delay.socket_buffer_bytes``).
- **A sync of ``sync_bytes``**, timed from ``connect()`` until the receiver's one-byte reply that
  it has every byte: on fresh connections (the handshake and slow start from Linux's initial
  window), and on one open connection back to back and after ``idle_s`` of silence: Linux
  halves a connection's window for every retransmission timeout (RTO, at least 200 ms) it stayed
  idle, down to the initial window, and then starts slow start again
  (``net.ipv4.tcp_slow_start_after_idle``, on by default; ``tcp_cwnd_restart``, RFC 2861). The
  full plan's gap, 3 s, is about ten RTOs or more at every delay it runs, so the window is back at
  the initial window.
"""

from __future__ import annotations

import json
import subprocess
import sys

PORT = 47304  # host 1's sink; the clamped listener is PORT + 1
SINK = r"""
import json, socket, sys, threading, time
host, port, window = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])

def exactly(c, n):
    while n:
        chunk = c.recv(min(n, 1 << 20))
        if not chunk:
            raise ConnectionError("closed early")
        n -= len(chunk)

def serve(c):
    with c:
        line = b""
        while not line.endswith(b"\n"):
            line += c.recv(1)
        ask = json.loads(line)
        if ask["mode"] == "sizes":  # each message: its bytes, then a one-byte reply
            for n in iter(lambda: int.from_bytes(c.recv(8, socket.MSG_WAITALL), "big"), 0):
                exactly(c, n)
                c.sendall(b"!")
            return
        first = last = None; counted = 0  # a stream: bytes after warm_s, until the sender stops
        while chunk := c.recv(1 << 20):
            now = time.perf_counter()
            if first is None:
                first = now
            if now >= first + ask["warm_s"]:
                if last is None:
                    last, counted = now, 0
                else:
                    counted += len(chunk)
                end = now
        rate = counted / (end - last) if last is not None and end > last else 0.0
        c.sendall((json.dumps({"bytes_per_s": rate}) + "\n").encode())

def listen(port, clamp):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if clamp:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_WINDOW_CLAMP, clamp)
    s.bind((host, port)); s.listen(16)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()

threading.Thread(target=listen, args=(port + 1, window), daemon=True).start()
threading.Thread(target=listen, args=(port, 0), daemon=True).start()
time.sleep(0.2)
print("ready", flush=True)
threading.Event().wait()
"""
SOURCE = r"""
import json, socket, struct, sys, threading, time
host, port, plan = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
CHUNK = bytes(1 << 16)
# a fresh connection starts from the initial window, not from what an earlier one to the same
# host left in the route's cache (a host namespace's own setting; not where the plan says not)
if plan.get("own_namespace", True):
    with open("/proc/sys/net/ipv4/tcp_no_metrics_save", "w") as f:
        f.write("1")

def stream(port, out, windows, i):
    with socket.create_connection((host, port)) as c:
        c.sendall((json.dumps({"mode": "stream", "warm_s": plan["warm_s"]}) + "\n").encode())
        end = time.perf_counter() + plan["warm_s"] + plan["seconds"]
        while time.perf_counter() < end:
            c.sendall(CHUNK)
        # the window the receiver advertised, as this sender sees it (tcp_info's snd_wnd)
        windows[i] = struct.unpack_from("I", c.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO,
                                                           512), 228)[0]
        c.shutdown(socket.SHUT_WR)
        out[i] = json.loads(c.makefile().readline())["bytes_per_s"]

def streams(port, k):
    out, windows = [0.0] * k, [0] * k
    threads = [threading.Thread(target=stream, args=(port, out, windows, i)) for i in range(k)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(out), max(windows)

def sized(c, n):
    start = time.perf_counter()
    c.sendall(n.to_bytes(8, "big") + bytes(n))
    assert c.recv(1) == b"!"
    return time.perf_counter() - start

def opened():
    c = socket.create_connection((host, port))
    c.sendall(b'{"mode": "sizes"}\n')
    return c

n, fresh = plan["sync_bytes"], []
for _ in range(plan["syncs"]):
    start = time.perf_counter()
    c = opened()
    sized(c, n)
    fresh.append(time.perf_counter() - start)
    c.sendall((0).to_bytes(8, "big")); c.close()
    time.sleep(0.2)
c = opened()
sized(c, n)  # the window opened
warm = [sized(c, n) for _ in range(plan["syncs"])]
idle = []
for _ in range(plan["syncs"]):
    time.sleep(plan["idle_s"])
    idle.append(sized(c, n))
c.sendall((0).to_bytes(8, "big")); c.close()
(one, window), (several, _), (opened_rate, _) = (
    streams(port + 1, 1), streams(port + 1, plan["connections"]), streams(port, 1))
print(json.dumps({"window_seen": window, "one_clamped": one, "several_clamped": several,
                  "one_open": opened_rate, "fresh_s": fresh, "warm_s": warm, "idle_s": idle}))
"""


WARM_ROUND_TRIPS = 20  # a stream's warm-up: at least this many round trips (slow start over)


def tcp_report(me: int, plan: dict, round_trip_ms: float) -> dict:
    """Host 0: the TCP part's report (``SOURCE``'s line, with the clamp and the plan's sizes);
    host 1 runs the sink; other hosts: ``{}``. Every host waits for the others before and after.
    A stream warms up for the plan's ``warm_s`` or ``WARM_ROUND_TRIPS`` round trips of the idle
    line (``round_trip_ms``), whichever is longer."""
    from jax.experimental.multihost_utils import sync_global_devices

    from course_utils.tools.cluster.netns import SUBNET

    sink, report = None, {}
    tcp = {**plan["tcp"], "warm_s": max(plan["tcp"]["warm_s"],
                                        WARM_ROUND_TRIPS * round_trip_ms / 1e3)}
    if me == 1:
        sink = subprocess.Popen([sys.executable, "-c", SINK, f"{SUBNET}.2", str(PORT),
                                 str(tcp["window"])], stdout=subprocess.PIPE, text=True)
        sink.stdout.readline()
    sync_global_devices("tcp: sink listening")
    if me == 0:
        done = subprocess.run([sys.executable, "-c", SOURCE, f"{SUBNET}.2", str(PORT),
                               json.dumps(tcp)], capture_output=True, text=True, check=True)
        report = {**json.loads(done.stdout), "window": tcp["window"],
                  "connections": tcp["connections"], "sync_bytes": tcp["sync_bytes"],
                  "idle_gap_s": tcp["idle_s"], "warm_up_s": tcp["warm_s"]}
    sync_global_devices("tcp: measured")
    if sink is not None:
        sink.kill()
        sink.wait()
    return report
