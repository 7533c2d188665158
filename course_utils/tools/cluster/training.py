"""One host's side of ``course cluster --measure training``: part four's training steps timed
across the hosts, each strategy at each batch size, with the bytes host 0's link sent per step.

Every process runs the same programs in the same order: the ones ``train`` runs
(``programs.build_programs``, ``row_programs``: the registry's ``strategies.SPECS``, part four's
wider model ``PART_FOUR_MLP``); ``batch_size`` is the rows each device draws per (micro-)step.
Besides the strategies, each batch size times the step's compute alone: one device's gradient
and update with nothing sent (local SGD's step), the ``compute_s`` of every row;
``communication_s`` is the rest of the step; local SGD's outer program (its averaging) is timed
apart and spread over its H steps. Gradient accumulation runs ``ACCUMULATION`` micro-steps, each
adding its gradient to the state, then its step with one all-reduce.

After the steps, every device of every host multiplies rows by the model's first weight matrix
at once: one device's FLOP rate while all compute, as in the steps. Without the links (in the
process that runs ``course cluster``, on as many logical devices) it reads each strategy's
held-out curve from the saved run (training only a curve the saved run does not hold) and times
each compression scheme's step where sending is only a memory copy (what the scheme's own
encoding and decoding cost).
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Sequence

import numpy as np

from course_utils.problems.classification import PART_FOUR_MLP
from course_utils.results.records import from_json, to_json
from course_utils.results.training import HeldoutCurve, TrainingResults, median_of_runs
from course_utils.tools.cluster.measurements import HostRun, Measurement, Setup
from course_utils.tools.cluster.timing import Timed, placed, timer
from course_utils.training.batches import HELDOUT_ROWS
from course_utils.training.part_four import PART_FOUR_ROWS, SAME_CURVE, TOPK_FRACTION, find_row
from course_utils.training.strategies import DATA_PARALLEL, HSDP, LOCAL_SGD

HELDOUT_FREE_ROWS = PART_FOUR_MLP.rows - HELDOUT_ROWS  # what a curve trains on; timings use as many

# curves: steps (by batch size) trained in one process for the held-out loss, recorded every
# ``every`` steps, from each of ``seeds`` seeds; the large batches take fewer steps
TRAINING_PLANS = {
    "quick": {"batch_sizes": (64,), "strategies": tuple(
        r.name for r in PART_FOUR_ROWS if r.strategy in (DATA_PARALLEL, HSDP)),
              "repeats": 3, "steps": {64: 20}, "every": 10, "seeds": 1},
    "full": {"batch_sizes": (32, 128, 512, 1024),
             "strategies": tuple(r.name for r in PART_FOUR_ROWS), "repeats": 5,
             "steps": {32: 200, 128: 200, 512: 100, 1024: 100}, "every": 10, "seeds": 3},
}
FLOPS_ROWS = 1024  # rows of the timed matrix product (the model's first layer at batch 1024)


def step_fits(name: str, batch_size: int, p: int, rows: int) -> bool:
    """Whether one optimizer step of ``name`` at ``batch_size`` on ``p`` devices fits in
    ``rows`` rows (accumulation draws ``ACCUMULATION`` micro-batches per step).

    Examples:
        >>> step_fits("accumulation", 512, 4, 12288), step_fits("accumulation", 1024, 4, 12288)
        (True, False)
    """
    return p * batch_size * find_row(name).accumulate <= rows


def row_programs(mesh, name: str, batch_size: int, *, hosts: int | None = None):
    """``(programs, state, (x, y))``: the programs ``train`` runs (``programs.build_programs``)
    for part four's row ``name`` at ``batch_size`` rows per device on ``mesh``'s devices, its
    state and one micro-step's rows. A strategy of hosts (HSDP) runs on a mesh ``("host",
    "device")`` of ``hosts`` rows (``None``: each process's devices a host)."""
    import jax
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    from course_utils.problems.classification import (
        PART_FOUR_MLP,
        classification_task,
        init_params,
        padded_size,
    )
    from course_utils.training.programs import axes, build_programs, initial_state
    from course_utils.training.strategies import Context, spec

    row, entry = find_row(name), spec(find_row(name).strategy)
    if entry.mesh_axes is not None:
        mesh = Mesh(mesh.devices.reshape(hosts or jax.process_count(), -1), entry.mesh_axes)
    (axis, rows_axis), n = axes(entry, mesh), padded_size(mesh.size, PART_FOUR_MLP)
    rows, (x, y) = mesh.size * batch_size, classification_task(mlp=PART_FOUR_MLP)
    ctx = Context(axis, mesh.shape[axis], n, rows * row.accumulate,
                  k=max(1, round(TOPK_FRACTION * n)), mlp=PART_FOUR_MLP, optimizer=entry.optimizer)
    state = initial_state(entry, mesh, ctx, init_params(n, 0, PART_FOUR_MLP),
                          accumulate=row.accumulate)
    batch = placed(mesh, x[:rows], P(rows_axis, None)), placed(mesh, y[:rows], P(rows_axis))
    return build_programs(entry, mesh, ctx, state, batch, accumulate=row.accumulate,
                          local_steps=row.local_steps), state, batch


def row_step(mesh, name: str, batch_size: int):
    """``(run, state, x, y)``: ``run(state, x, y)`` takes one optimizer step of row ``name``
    (``row_programs``): its micro-steps, then its step."""
    programs, state, batch = row_programs(mesh, name, batch_size)

    def run(state, x, y):
        for _ in range(find_row(name).accumulate - 1):  # gradients summed, nothing sent
            state, _ = programs.micro(state, x, y)
        return programs.step(state, x, y)[0]

    return run, state, *batch


def measure_training(plan: dict, timed) -> list[dict]:
    """Every (strategy, batch size) of ``plan`` on the global devices: one dict each with
    ``step_s``, ``compute_s``, ``communication_s`` and ``link_bytes`` (per optimizer step;
    ``None`` without the link's counter). ``timed(fn, *args)`` gives a call's median seconds
    and the bytes sent per call."""
    import jax
    from jax.sharding import Mesh

    mesh = Mesh(np.asarray(jax.devices()), ("d",))
    rows = []
    for batch_size in plan["batch_sizes"]:
        local_sgd, state, batch = row_programs(mesh, LOCAL_SGD, batch_size)
        compute_s, _ = timed(local_sgd.step, state, *batch)  # nothing sent
        averaging_s, averaging_bytes = timed(local_sgd.outer, state)
        for name in plan["strategies"]:
            if not step_fits(name, batch_size, mesh.size, HELDOUT_FREE_ROWS):
                continue
            h = find_row(name).local_steps
            if h > 1:  # its step, and one averaging spread over H steps
                step_s = compute_s + averaging_s / h
                sent = None if averaging_bytes is None else averaging_bytes / h
            else:
                step_s, sent = timed(*row_step(mesh, name, batch_size))
            rows.append({"strategy": name, "batch_size": batch_size, "step_s": step_s,
                         "compute_s": compute_s * find_row(name).accumulate,
                         "link_bytes": sent})
    for row in rows:
        row["communication_s"] = max(0.0, row["step_s"] - row["compute_s"])
    return rows


def heldout_curves(plan: dict, p: int) -> list[HeldoutCurve]:
    """Each (strategy, batch size) of ``plan`` on ``p`` devices for the plan's steps, from each
    of its ``seeds``: the held-out loss every ``every`` steps (what the link does not change).
    A curve the saved run (``saved/training.json``, made on as many devices) holds is read from
    it, not trained again; only the others are trained here (``train_curves``)."""
    from course_utils.results.training import saved_training_results

    saved = saved_training_results()
    kept = saved.curves if saved.cluster.hosts * saved.cluster.devices_per_host == p else ()
    wanted = [(name, b, plan["steps"][b], plan["every"]) for b in plan["batch_sizes"]
              for name in plan["strategies"] if step_fits(name, b, p, HELDOUT_FREE_ROWS)]
    return train_curves(wanted, p, seeds=range(plan["seeds"]), kept=kept)


def train_curves(wanted: Sequence[tuple[str, int, int, int]], p: int, *,
                 seeds: Sequence[int], kept: Sequence[HeldoutCurve] = ()) -> list[HeldoutCurve]:
    """The held-out curve of each ``(row name, batch size, steps, every)`` of ``wanted`` from
    each seed (``train``'s ``seed``: the initial parameters and the stream's rows; the mixture
    is task seed 0's), trained in this process on ``p`` devices (``curves.run_curves``). A
    curve of ``kept`` of the same row, batch size and seed that reaches as many steps is used
    as it is; a row with the same updates as another (``SAME_CURVE``) copies it. Every curve
    is of the stream task (``problems.stream``: fresh rows every step, the same rows for every
    row of the table at a step), with part four's optimizer (momentum SGD) unchanged."""
    from course_utils.devices.setup import data_mesh, use_cpu_devices
    from course_utils.results.curves import CurvePlan, run_curves

    use_cpu_devices(p)
    mesh, curves = data_mesh(), {}

    def found(among, name, batch_size, seed, steps):
        return next((c for c in among if (c.strategy, c.batch_size, c.seed) == (
            name, batch_size, seed) and c.heldout_loss[-1][0] >= steps), None)

    def copied(name, batch_size, steps, seed):  # the same updates trained, or this curve kept
        same = found(curves.values(), SAME_CURVE.get(name), batch_size, seed, steps) or found(
            kept, name, batch_size, seed, steps)
        return None if same is None else replace(same, strategy=name, seed=seed)

    for name, batch_size, steps, every in wanted:
        for seed in seeds:
            if (same := copied(name, batch_size, steps, seed)) is not None:
                curves[name, batch_size, seed] = same
        row = find_row(name)
        plan = CurvePlan(row.trained, tuple(s for s in seeds if (name, batch_size, s) not in
                                            curves), {
            "steps": steps, "data_seed": 0, "batch_size": batch_size,
            "accumulate": row.accumulate, "local_steps": row.local_steps,
            "topk_fraction": TOPK_FRACTION, "heldout_every": every, "mlp": PART_FOUR_MLP,
            "stream": True})
        for _, seed, run in run_curves(mesh, [plan]):
            curves[name, batch_size, seed] = HeldoutCurve(name, batch_size, tuple(
                (step, loss) for step, loss in run.heldout_loss), seed)
    return [curves[name, b, seed] for name, b, _, _ in wanted for seed in seeds]


def measure_own_work(plan: dict, timed) -> list[dict]:
    """Data parallelism's and each compression scheme's step at the plan's smallest batch size,
    timed on this process's devices, where sending costs only memory copies: a scheme's step
    minus data parallelism's is its own work (top-k's selection, encoding, decoding), which
    does not depend on the batch. ``timed(fn, *args)`` gives a call's median seconds."""
    import jax
    from jax.sharding import Mesh

    from course_utils.training.part_four import COMPRESSED

    mesh = Mesh(np.asarray(jax.devices()), ("d",))
    batch_size = min(plan["batch_sizes"])
    names = [s for s in (DATA_PARALLEL, *COMPRESSED) if s in plan["strategies"]]
    return [{"strategy": name, "batch_size": batch_size,
             "step_s": timed(*row_step(mesh, name, batch_size))[0]} for name in names]


def flops_per_s(timed, rows: int = FLOPS_ROWS) -> float:
    """FLOPs per second of one device while every global device multiplies ``rows`` rows by the
    model's first weight matrix (2 · rows · fan_in · fan_out FLOPs each)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    mesh = Mesh(np.asarray(jax.devices()), ("d",))
    fan_in, fan_out = PART_FOUR_MLP.features, PART_FOUR_MLP.hidden
    rng = np.random.default_rng(0)
    x = placed(mesh, rng.standard_normal((mesh.size * rows, fan_in), np.float32), P("d"))
    w = placed(mesh, rng.standard_normal((mesh.size * fan_in, fan_out), np.float32), P("d"))
    product = jax.jit(jax.shard_map(jnp.matmul, mesh=mesh, in_specs=(P("d"), P("d")),
                                    out_specs=P("d")))
    return 2.0 * rows * fan_in * fan_out / timed(product, x, w)[0]


def measure_steps(plan: dict, timed: Timed) -> dict:
    """What host 0 reports: every (strategy, batch size) row of ``plan``
    (``measure_training``) and one device's FLOP rate while every device computes."""
    return {"rows": measure_training(plan, timed), "flops_per_s": flops_per_s(timed)}


def assemble_training(host_runs: Sequence[HostRun], setup: Setup) -> TrainingResults:
    """The rows of every rate, with the held-out curves and each scheme's own work (measured
    here, without the links, once a run) and how the run was made; one device's FLOP rate is
    the median over the rates. Over several runs, the median of the runs cell by cell
    (``results.training.median_of_runs``: the times, own work and FLOP rate)."""
    plan = TRAINING_PLANS[setup.plan]
    curves = heldout_curves(plan, setup.hosts * setup.devices_per_host)  # sets up the devices
    timed, runs = timer(plan["repeats"]), []
    for run in sorted({h.run for h in host_runs}):
        mine = [h for h in host_runs if h.run == run]
        own_work = measure_own_work(plan, timed)
        runs.append(from_json(TrainingResults, {
            "meta": to_json(setup.run_meta("training")), "cluster": to_json(setup.cluster()),
            "flops_per_s": statistics.median(h.result["flops_per_s"] for h in mine),
            "curves": to_json(curves), "own_work": own_work,
            "rows": [{**row, "link_rate": h.link_rate} for h in mine for row in h.result["rows"]]},
            "the training run"))
    if len(runs) == 1:
        return runs[0]
    median = median_of_runs(runs)
    return replace(median, meta=replace(median.meta, seconds=runs[-1].meta.seconds))


def training_lines(results: TrainingResults) -> list[str]:
    """Each row's step and its compute alone."""
    return [f"{row.strategy:14s} {row.link_rate:>8s} batch {row.batch_size:5d}: step "
            f"{row.step_s * 1e3:8.1f} ms, compute {row.compute_s * 1e3:7.1f} ms"
            for row in results.rows]


MEASUREMENT = Measurement(
    name="training", plans=TRAINING_PLANS, measure=measure_steps, assemble=assemble_training,
    output="training.json", lines=training_lines)

