"""One host's process of ``course cluster``: join JAX's multi-process runtime (gloo), run the
plan's timings in step with the other hosts, and (process 0) print the results as one JSON line.

Run inside a host's namespace: ``python -m course_utils.tools.cluster.worker --process-id I
--processes H --devices D --coordinator 10.77.0.1:PORT --plan quick``. Every process runs the
same programs in the same order (a collective waits for all); each call is timed from dispatch
until its result is ready, and process 0's times are reported. For the three collectives, process
0 also counts the bytes its host sent over its link during the timed calls (the kernel's counter
of the bytes sent on ``eth0`` in the host's namespace, read once it has stopped moving).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

# per-device vector sizes (bytes) of each plan's sweep
PLANS = {
    "quick": {"sizes": [2**18, 2**20, 2**22], "repeats": 3, "buckets": (64, 1024)},
    "full": {"sizes": [2**k for k in range(16, 25, 2)], "repeats": 5, "buckets": (64, 4096)},
}
# inside a host's namespace (``ip netns exec`` mounts its own /sys): what the host's link sent
LINK_COUNTER = Path("/sys/class/net/eth0/statistics/tx_bytes")


def _parse(argv):
    parser = argparse.ArgumentParser(prog="cluster_worker")
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--plan", choices=PLANS, default="quick")
    parser.add_argument("--measure", choices=("collectives", "training", "overlap"),
                        default="collectives")
    return parser.parse_args(argv)


def _sent_bytes() -> int | None:
    """Bytes this host has sent over its link so far, or ``None`` outside a host's namespace."""
    try:
        return int(LINK_COUNTER.read_text())
    except (OSError, ValueError):
        return None


def _settled_sent_bytes(limit_s: float = 3.0, every_s: float = 0.02) -> int | None:
    """The link counter once it has stopped moving (or after ``limit_s``): a call can return
    while its last bytes still wait in TCP's buffers or the shaper's queue, and they belong to
    that call, not to the next reading."""
    last, deadline = _sent_bytes(), time.monotonic() + limit_s
    while last is not None and time.monotonic() < deadline:
        time.sleep(every_s)
        now = _sent_bytes()
        if now == last:
            break
        last = now
    return last


def _timer(repeats: int):
    import jax

    def median_s(fn, *args) -> float:
        return timed(fn, *args)[0]

    def timed(fn, *args) -> tuple[float, float | None]:
        """The median seconds of ``repeats`` completed calls, and the bytes the host's link sent
        per call meanwhile (``None`` without a counter)."""
        jax.block_until_ready(fn(*args))  # compile, first touch
        times, before = [], _settled_sent_bytes()
        for _ in range(repeats):
            start = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - start)
        after = _settled_sent_bytes()
        sent = None if before is None or after is None else (after - before) / repeats
        return float(np.median(times)), sent

    return median_s, timed


def _placed(mesh, value: np.ndarray, spec):
    """``value`` (the same on every process) as a global array; each process fills its own
    shards."""
    import jax
    from jax.sharding import NamedSharding

    return jax.make_array_from_callback(value.shape, NamedSharding(mesh, spec),
                                        lambda i: value[i])


def _blocks(mesh, spec, shape, seed=0):
    """A global random f32 array of ``shape`` (one row per device)."""
    return _placed(mesh, np.random.default_rng(seed).standard_normal(shape).astype(np.float32),
                   spec)


def _training_steps(mesh, median_s, local_steps: int = 8) -> dict:
    """Seconds of one data-parallel step (gradient + all-reduce), one local SGD step (gradient
    only) and one averaging (``pmean`` of the parameters): the step bodies of ``train``, on step
    16's task."""
    import jax
    from jax.sharding import PartitionSpec as P

    from course_utils.problems.classification import classification_task, init_params, padded_size
    from course_utils.training.strategies import STRATEGY_STEPS, Context, placements

    axis, p = mesh.axis_names[0], mesh.size
    n, (x, y) = padded_size(p), classification_task()
    ctx = Context(axis, p, n, len(y), k=1)
    data = (_placed(mesh, x, P(axis, None)), _placed(mesh, y, P(axis)))

    def step(name):
        strategy = STRATEGY_STEPS[name]
        state = strategy.init(init_params(n), mesh, ctx)
        specs = placements(state)
        return jax.jit(jax.shard_map(lambda s, xs, ys: strategy.step(s, xs, ys, ctx)[0],
                                     mesh=mesh, in_specs=(specs, P(axis, None), P(axis)),
                                     out_specs=specs, check_vma=False)), state

    dp_step, whole = step("data_parallel")
    local_step, own = step("local_sgd")
    average = jax.jit(jax.shard_map(lambda a: jax.lax.pmean(a, axis), mesh=mesh,
                                    in_specs=P(axis), out_specs=P(axis), check_vma=False))
    times = {
        "dp_step": median_s(dp_step, whole, *data),
        "local_step": median_s(local_step, own, *data),
        "averaging": median_s(average, own.params),
    }
    return {**times, "local_steps": local_steps,
            "local_sgd_step": times["local_step"] + times["averaging"] / local_steps}


def measure(plan: dict, hosts: int) -> dict:
    """Every timing of the plan on the global devices (``hosts`` × the devices per host)."""
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
    two_level = Mesh(devices.reshape(hosts, -1), ("node", "local"))
    median_s, timed = _timer(plan["repeats"])
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
                                       in_specs=rows, out_specs=rows, check_vma=False))
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


def main(argv=None) -> int:
    args = _parse(argv)
    from course_utils.devices.multiprocess import join_runtime

    join_runtime(args.coordinator, args.process_id, args.processes, args.devices)
    if args.measure == "training":
        from course_utils.tools.cluster.training import (
            TRAINING_PLANS,
            flops_per_s,
            measure_training,
        )

        plan = TRAINING_PLANS[args.plan]
        timed = _timer(plan["repeats"])[1]
        result = {"rows": measure_training(plan, timed), "flops_per_s": flops_per_s(timed)}
    elif args.measure == "overlap":
        from course_utils.tools.cluster.overlap import OVERLAP_PLANS, measure_overlap

        plan = OVERLAP_PLANS[args.plan]
        result = measure_overlap(plan, _timer(plan["repeats"])[1])
    else:
        result = measure(PLANS[args.plan], args.processes)
    if args.process_id == 0:
        print(json.dumps({"event": "result", **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
