"""``course cluster``'s default measurement (step 17): the collectives, the two-level all-reduce,
16-bit against 32-bit rings, bucketing and two training steps, timed across the hosts, with the
bytes host 0's link sent during the three collectives and the two-level all-reduce (the kernel's
counter of the bytes sent on ``eth0`` in the host's namespace, read once it has stopped moving).
Writes ``cluster.json`` (``ClusterResults``) and ``cluster.png``; over several runs, each rate's
times are the median of the runs, cell by cell.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from course_utils.results.cluster import (
    ClusterResults,
    ClusterRun,
    figure_data,
    summary_lines,
)
from course_utils.results.records import from_json
from course_utils.tools.cluster.measurements import (
    HostRun,
    Measurement,
    Setup,
    median_of_records,
)
from course_utils.tools.cluster.timing import Timed, placed

# per-device vector sizes (bytes) of each plan's sweep
COLLECTIVES_PLANS = {
    "quick": {"sizes": [2**18, 2**20, 2**22], "repeats": 3, "buckets": (64, 1024)},
    "full": {"sizes": [2**k for k in range(16, 25, 2)], "repeats": 5, "buckets": (64, 4096)},
}


def _blocks(mesh, spec, shape, seed=0):
    """A global random f32 array of ``shape`` (one row per device)."""
    return placed(mesh, np.random.default_rng(seed).standard_normal(shape).astype(np.float32),
                  spec)
def _training_steps(mesh, median_s, local_steps: int = 8) -> dict:
    """Seconds of one data-parallel step (gradient + all-reduce), one local SGD step (gradient
    only) and one averaging (its outer step, a ``pmean`` of the parameters): the programs
    ``train`` runs (``programs.build_programs``), on step 16's task."""
    from jax.sharding import PartitionSpec as P

    from course_utils.problems.classification import classification_task, init_params, padded_size
    from course_utils.training.programs import build_programs, initial_state
    from course_utils.training.strategies import DATA_PARALLEL, LOCAL_SGD, Context, spec

    axis, p = mesh.axis_names[0], mesh.size
    n, (x, y) = padded_size(p), classification_task()
    data = (placed(mesh, x, P(axis, None)), placed(mesh, y, P(axis)))

    def programs(name):
        entry = spec(name)
        ctx = Context(axis, p, n, len(y), k=1, optimizer=entry.optimizer)
        state = initial_state(entry, mesh, ctx, init_params(n))
        return build_programs(entry, mesh, ctx, state, data, local_steps=local_steps), state

    (dp, whole), (local, own) = programs(DATA_PARALLEL), programs(LOCAL_SGD)
    times = {
        "dp_step": median_s(dp.step, whole, *data),
        "local_step": median_s(local.step, own, *data),
        "averaging": median_s(local.outer, own),
    }
    return {**times, "local_steps": local_steps,
            "local_sgd_step": times["local_step"] + times["averaging"] / local_steps}


def measure_collectives(plan: dict, timed: Timed) -> dict:
    """Every timing of the plan on the global devices (each process's devices one host)."""
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from course_utils.collectives.compression import bf16_all_reduce
    from course_utils.collectives.hierarchy import hierarchical_all_reduce
    from course_utils.collectives.kernels import block_collective
    from course_utils.collectives.ring import ring_all_reduce

    devices = np.asarray(jax.devices())
    p = devices.size
    flat = Mesh(devices, ("d",))
    two_level = Mesh(devices.reshape(jax.process_count(), -1), ("node", "local"))

    def median_s(fn, *args) -> float:
        return timed(fn, *args)[0]

    rows = P("d", None)
    result = {"collectives": [], "hierarchy": [], "ring16": [], "buckets": {}}
    for nbytes in plan["sizes"]:
        m = nbytes // 4
        x = _blocks(flat, rows, (p, m))
        row, sent = {"bytes": nbytes}, {}
        for kind in ("all_reduce", "reduce_scatter"):
            row[kind], sent[kind] = timed(block_collective(flat, kind).jitted, x)
        row["all_gather"], sent["all_gather"] = timed(
            block_collective(flat, "all_gather").jitted, _blocks(flat, rows, (p, m // p)))
        if None not in sent.values():
            row["link_bytes"] = sent
        result["collectives"].append(row)
        y = _blocks(two_level, P(("node", "local"), None), (p, m))
        hierarchical, crossed = timed(hierarchical_all_reduce(two_level).jitted, y)
        result["hierarchy"].append({"bytes": nbytes, "flat": row["all_reduce"],
                                    "hierarchical": hierarchical,
                                    **({} if crossed is None else {"link_bytes": crossed})})
        rings = {}
        for name, body in (("f32", ring_all_reduce), ("u16", bf16_all_reduce)):
            fn = jax.jit(jax.shard_map(lambda b, body=body: body(b[0], "d", p)[None], mesh=flat,
                                       in_specs=rows, out_specs=rows))
            rings[name] = median_s(fn, x)
        result["ring16"].append({"bytes": nbytes, **rings})
    count, small = plan["buckets"]
    pieces = [_blocks(flat, rows, (p, small // 4), seed=k) for k in range(count)]
    one = block_collective(flat, "all_reduce").jitted

    def separate_calls():
        for piece in pieces:  # separate calls, each waited for (see step 12)
            summed = jax.block_until_ready(one(piece))
        return summed

    bucket = _blocks(flat, rows, (p, count * small // 4))
    result["buckets"] = {"count": count, "bytes": small, "separate": median_s(separate_calls),
                         "one_bucket": median_s(one, bucket)}
    result["training"] = _training_steps(flat, median_s)
    return result


def assemble_collectives(host_runs: Sequence[HostRun], setup: Setup) -> ClusterResults:
    """One ``ClusterRun`` per link rate, in the order the rates ran: the median over the runs of
    each timed figure (and each count of bytes), cell by cell."""
    shape = {"hosts": setup.hosts, "devices_per_host": setup.devices_per_host, "tcp": setup.tcp}
    rates = list(dict.fromkeys(h.link_rate for h in host_runs))
    runs = [median_of_records([
        from_json(ClusterRun, {**shape, "link_rate": rate, **h.result}, "host 0's results")
        for h in host_runs if h.link_rate == rate]) for rate in rates]
    return ClusterResults(meta=setup.run_meta("collectives"), cluster=setup.cluster(),
                          runs=tuple(runs))


def collectives_lines(results: ClusterResults) -> list[str]:
    """Each rate's times beside the link models, then (at the goals' rate) the goals."""
    return [line for run in results.runs for line in summary_lines(run)]


MEASUREMENT = Measurement(
    name="collectives", plans=COLLECTIVES_PLANS, measure=measure_collectives,
    assemble=assemble_collectives, output="cluster.json", lines=collectives_lines,
    figure=figure_data)
