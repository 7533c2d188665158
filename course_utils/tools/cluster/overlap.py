"""One host's side of ``course cluster --measure overlap``: step 19's backward pass with its
all-reduces timed across the hosts five ways, and the collective matmul three ways.

Each host's process has two devices (``--devices-per-host 2``): the first computes, the second
is the communication stream. Every process runs the same programs in the same order.
"""

from __future__ import annotations

from typing import Sequence

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.collectives import collective_matmul as cm
from course_utils.collectives import overlap as ov
from course_utils.results.overlap import OverlapResults
from course_utils.results.records import from_json, to_json
from course_utils.tools.cluster.measurements import HostRun, Measurement, Setup
from course_utils.tools.cluster.timing import Timed, placed

OVERLAP_PLANS = {
    "quick": {"tower": ov.Tower(width=256, layers=4, rows=512), "matmul": (512, 256, 1024),
              "repeats": 2},
    "full": {"tower": ov.TOWER, "matmul": (2048, 1024, 16384), "repeats": 5},
}


def host_mesh() -> Mesh:
    """The ``("host", "device")`` mesh of every process's devices, one row per process."""
    per: dict[int, list] = {}
    for device in jax.devices():
        per.setdefault(device.process_index, []).append(device)
    return Mesh(np.array([per[h] for h in sorted(per)]), ov.AXES)


def measure_backward(plan: dict, timed) -> dict:
    """Seconds of the backward pass alone, its all-reduces alone, and the two together: one
    after the other, overlapped on the stream, sent from the computing device, and in one
    program; with the bytes host 0's link sent per overlapped call. ``timed(fn)`` gives a
    call's median seconds and bytes sent."""
    compute, stream = ov.stream_meshes(host_mesh())
    tower = plan["tower"]
    x, y, ws = ov.tower_problem(tower, compute.size)
    rows = P("host", None)
    xs, ys = placed(compute, x, rows), placed(compute, y, rows)
    wss = [placed(compute, w, P()) for w in ws]
    progs = ov.programs(compute, stream, len(x))
    same = ov.programs(compute, compute, len(x))
    one = ov.one_program_backward(compute, len(x))
    hs = jax.block_until_ready(progs.forward(wss, xs))

    def backward():
        g, grads = progs.top(hs[-1], ys), []
        for i in reversed(range(len(wss))):
            grad, g = progs.backward(hs[i], hs[i + 1], g, wss[i])
            grads.append(grad)
        return grads

    ready = [ov.move(g, progs.stream) for g in jax.block_until_ready(backward())]
    overlapped_s, sent = timed(lambda: ov.overlapped_backward(progs, hs, wss, ys))
    return {
        "compute_s": timed(backward)[0],
        "communication_s": timed(lambda: [progs.all_reduce(g) for g in ready])[0],
        "serial_s": timed(lambda: ov.serial_backward(progs, hs, wss, ys))[0],
        "overlapped_s": overlapped_s,
        "same_device_s": timed(lambda: ov.overlapped_backward(same, hs, wss, ys))[0],
        "one_program_s": timed(lambda: one(hs, wss, ys))[0],
        "link_bytes": sent,
    }


def measure_matmul(plan: dict, timed) -> dict:
    """Seconds of the collective matmul's partial products alone, its ``ppermute`` steps alone,
    and the matmul gathered first, looped in one program and split by hand."""
    compute, stream = ov.stream_meshes(host_mesh())
    m, k, n = plan["matmul"]
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a_c, b_c = placed(compute, a, cm.MATMUL_ROWS), placed(compute, b, cm.MATMUL_COLUMNS)
    a_s = placed(stream, a, cm.MATMUL_ROWS)
    hand = cm.by_hand_programs(compute, stream)
    hosts = compute.size
    out = hand.zeros(a_c, b_c)
    gathered, looped = cm.gathered_matmul(compute), cm.looped_matmul(compute)
    return {
        "compute_s": timed(lambda: [hand.place(s, out, a_c, b_c) for s in range(hosts)])[0],
        "shift_s": timed(lambda: [hand.shift(a_s) for _ in range(hosts - 1)])[0],
        "gathered_s": timed(gathered, a_c, b_c)[0],
        "looped_s": timed(looped, a_c, b_c)[0],
        "by_hand_s": timed(lambda: cm.by_hand_matmul(hand, a_c, a_s, b_c))[0],
    }


def measure_overlap(plan: dict, timed: Timed) -> dict:
    """Both measurements of ``plan`` on the global devices."""
    return {"backward": measure_backward(plan, timed), "matmul": measure_matmul(plan, timed)}


def needs_two_devices(setup: Setup) -> str | None:
    """The problem with a cluster whose hosts do not have two devices each."""
    if setup.devices_per_host != 2:
        return ("--measure overlap needs --devices-per-host 2: each host computes on one device "
                "and sends from the other")
    return None


def assemble_overlap(host_runs: Sequence[HostRun], setup: Setup) -> OverlapResults:
    """Every run's backward and matmul rows, and how the runs were made: the record keeps each
    run, and its readers take the median over the runs (``results.overlap.over_runs``)."""
    plan = OVERLAP_PLANS[setup.plan]
    tower = plan["tower"]
    sizes = {"width": tower.width, "layers": tower.layers, "rows": tower.rows,
             "matmul": list(plan["matmul"])}
    return from_json(OverlapResults, {
        "meta": to_json(setup.run_meta("overlap")), "cluster": to_json(setup.cluster()),
        "sizes": sizes,
        **{part: [{"link_rate": h.link_rate, "run": h.run, **h.result[part]} for h in host_runs]
           for part in ("backward", "matmul")}}, "the overlap run")


def overlap_lines(results: OverlapResults) -> list[str]:
    """Each run's backward pass at each rate: alone, its all-reduces alone, both one after the
    other and overlapped."""
    return [f"{row.link_rate:>8s} run {row.run + 1}: backward {row.compute_s * 1e3:7.1f} ms, "
            f"all-reduces {row.communication_s * 1e3:7.1f} ms, one after the other "
            f"{row.serial_s * 1e3:7.1f} ms, overlapped {row.overlapped_s * 1e3:7.1f} ms"
            for row in results.backward]


MEASUREMENT = Measurement(
    name="overlap", plans=OVERLAP_PLANS, measure=measure_overlap, assemble=assemble_overlap,
    output="overlap.json", lines=overlap_lines, check=needs_two_devices)
