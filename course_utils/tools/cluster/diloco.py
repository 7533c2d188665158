"""One host's side of ``course cluster --measure diloco``: part five's syncs timed across the
hosts on part four's model (``PART_FOUR_MLP``) at one batch size, each host computing on one device
and sending from another (``diloco_rounds``).

At each H of the plan: a round of H inner steps with nothing sent (the step every method
shares), and with each method's syncs (DiLoCo in float32, int8 and int4, and Streaming
DiLoCo's F fragments in int4, each overlapping τ inner steps); data parallelism's step (its
gradient all-reduced every step); and each method's one sync alone. Host 0 reports each round's
median seconds per inner step and the bytes its link sent per inner step, and each sync's
seconds and bytes (the largest single sync over a host's link). Every process runs the same
programs in the same order.
"""

from __future__ import annotations

from typing import Sequence

from course_utils.results.diloco_cluster import (
    DATA_PARALLEL,
    NOTHING_SENT,
    DilocoClusterResults,
    Measured,
    MethodRow,
)
from course_utils.results.records import from_json, to_json
from course_utils.results.streaming import REPLICA_ROWS
from course_utils.tools.cluster.measurements import HostRun, Measurement, Setup
from course_utils.tools.cluster.timing import Timed
from course_utils.training.strategies import saved_in, spec

# batch_size: rows per host and inner step (the saved curves' rows per replica); local_steps:
# the H of every round; methods: the strategies of the saved streaming curves, whose syncs are
# timed (each one's format, F, τ and α its ``Sync``'s: ``MethodRow``); dp_steps: data-parallel
# steps per timed call
_STREAMING = {"batch_size": REPLICA_ROWS,
              "methods": saved_in("streaming.json", "curve"),
              "dp_steps": 2, "repeats": 2}
DILOCO_PLANS = {"quick": {**_STREAMING, "local_steps": (16,)},
                "full": {**_STREAMING, "local_steps": (16, 32)}}


def methods(plan: dict) -> list[MethodRow]:
    """The methods of ``plan``, each a registry name read through its ``Sync``: DiLoCo in
    float32, int8 and int4, Streaming DiLoCo in int4."""
    return [MethodRow(name, Measured.of(spec(name).sync)) for name in plan["methods"]]


def parameters(plan: dict, hosts: int) -> int:
    """The flat parameter vector's length: part four's, padded so that the hosts' slices of
    every fragment split into whole scale buckets."""
    from course_utils.problems.classification import PART_FOUR_MLP, padded_size

    return padded_size(hosts * max(m.fragments for m in methods(plan)), PART_FOUR_MLP)


def measure_diloco(plan: dict, timed: Timed) -> dict:
    """What host 0 reports: every round (``rounds``: method, H, seconds and link bytes per
    inner step) and every method's one sync alone (``syncs``). The calls of one H take turns
    (``timing.interleaved``, ``plan["repeats"]`` times), and so do the syncs alone with data
    parallelism's steps: ``timed``, which times one call after another, is not used."""
    from functools import partial

    from course_utils.tools.cluster import diloco_rounds as dr
    from course_utils.tools.cluster.overlap import host_mesh
    from course_utils.tools.cluster.timing import interleaved

    mesh = host_mesh()
    lay = dr.layout(mesh, plan["batch_size"], parameters(plan, mesh.shape["host"]))
    built = {m: dr.rounds(lay, m) for m in methods(plan)}
    first, k = next(iter(built.values())), plan["dp_steps"]
    alone = interleaved({DATA_PARALLEL: partial(dr.dp_steps, lay, k),
                         **{m.name: partial(dr.one_sync, r, lay) for m, r in built.items()}},
                        plan["repeats"])
    seconds, sent = alone.pop(DATA_PARALLEL)
    rounds = [_per_step(DATA_PARALLEL, 1, k, seconds, sent)]
    syncs = [{"method": name, "sync_s": s, "sync_bytes": b} for name, (s, b) in alone.items()]
    for h in plan["local_steps"]:
        timed_h = interleaved({NOTHING_SENT: partial(dr.run_round, first, lay, None, h),
                               **{m.name: partial(dr.run_round, r, lay, m, h)
                                  for m, r in built.items()}}, plan["repeats"])
        rounds += [_per_step(name, h, h, s, b) for name, (s, b) in timed_h.items()]
    return {"rounds": rounds, "syncs": syncs}


def _per_step(name: str, h: int, calls: int, seconds: float, sent: float | None) -> dict:
    """A round's report: seconds and link bytes of a call of ``calls`` inner steps, per step."""
    return {"method": name, "local_steps": h, "step_s": seconds / calls,
            "link_bytes": None if sent is None else sent / calls}


def check_diloco(setup: Setup) -> str | None:
    """The problem with the cluster asked for (its hosts must have two devices each) or with
    its plan's schedules (``training.streaming.check_streaming``), before anything is built."""
    from course_utils.training.streaming import check_streaming

    if setup.devices_per_host != 2:
        return ("--measure diloco needs --devices-per-host 2: each host computes on one device "
                "and syncs from the other")
    plan = DILOCO_PLANS[setup.plan]
    try:
        for h in plan["local_steps"]:
            for m in methods(plan):
                check_streaming(local_steps=h, fragments=m.fragments, overlap=m.overlap,
                                n=parameters(plan, setup.hosts), devices=setup.hosts)
    except ValueError as exc:
        return f"the {setup.plan} plan cannot run: {exc}"
    return None


def assemble_diloco(host_runs: Sequence[HostRun], setup: Setup) -> DilocoClusterResults:
    """Every run's rounds and syncs at every rate, and how the runs were made: the record keeps
    each run, and its readers take the median over the runs (``results.diloco_cluster``)."""
    plan = DILOCO_PLANS[setup.plan]
    return from_json(DilocoClusterResults, {
        "meta": to_json(setup.run_meta("diloco")),
        "cluster": to_json(setup.cluster()),
        "sizes": {"n": parameters(plan, setup.hosts), "batch_size": plan["batch_size"],
                  "mixing": max(m.mixing for m in methods(plan))},  # the overlapped one's
        "methods": [to_json(m) for m in methods(plan)],
        **{part: [{**row, "link_rate": h.link_rate, "run": h.run} for h in host_runs
                  for row in h.result[part]] for part in ("rounds", "syncs")}},
        "the DiLoCo run")


def diloco_lines(results: DilocoClusterResults) -> list[str]:
    """Each round's seconds and link bytes per inner step, with the model's seconds."""
    from course_utils.results.diloco_cluster import modelled_step_s

    return [f"{row.link_rate:>8s} run {row.run + 1} H {row.local_steps:3d} {row.method:17s}: "
            f"{row.step_s * 1e3:8.1f} ms per inner step (model "
            f"{modelled_step_s(results, row.method, row.local_steps, row.link_rate) * 1e3:8.1f}"
            f"), {(row.link_bytes or 0) / 2**10:8.1f} KiB sent" for row in results.rounds]


MEASUREMENT = Measurement(
    name="diloco", plans=DILOCO_PLANS, measure=measure_diloco, assemble=assemble_diloco,
    output="diloco_cluster.json", lines=diloco_lines, check=check_diloco)
