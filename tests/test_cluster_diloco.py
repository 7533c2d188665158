"""``course cluster --measure diloco``: its plans, the record assembled from host 0's reports
of several runs, the record's reader, the round model, and (as root, ``-m e2e``) one quick run
that leaves nothing behind."""

import json
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from course_utils.collectives.overlap import AXES
from course_utils.models.links import FRAME_SHARE, rate_bytes_per_s
from course_utils.problems.classification import PART_FOUR_MLP, init_params
from course_utils.results.diloco_cluster import (
    BASELINE,
    DATA_PARALLEL,
    NOTHING_SENT,
    DilocoClusterResults,
    byte_goals,
    counted_bytes,
    hidden_syncs,
    load_diloco_cluster,
    model_gaps,
    modelled_step_s,
    round_time,
    step,
    sync,
    sync_link_bytes,
)
from course_utils.results.records import save, to_json
from course_utils.tools.cluster import diloco_rounds as dr
from course_utils.tools.cluster.diloco import DILOCO_PLANS, methods, parameters
from course_utils.tools.cluster.measurements import HostRun, Setup, measurement
from course_utils.tools.cluster.netns import check_can_run, leftovers
from course_utils.training.diloco import OuterStep
from course_utils.training.state import state_specs
from course_utils.training.strategies import SPECS, spec

SETUP = Setup(hosts=2, devices_per_host=2, plan="quick", tcp="reno", runs=2,
              started=time.monotonic())
COMPUTE_S, RATE = 0.02, "50mbit"


def _syncs(entries) -> set:
    return {(s.dtype, s.fragments, s.overlap, s.mixing) for s in entries}


@pytest.mark.parametrize("plan", DILOCO_PLANS)
def test_every_plan_times_each_sync_of_part_five_s_registry_once(plan):
    chosen = DILOCO_PLANS[plan]
    assert measurement("diloco").check(replace(SETUP, plan=plan)) is None
    found = methods(chosen)
    assert all(m.sync is spec(m.name).sync for m in found)  # read from the registry
    part_five = [s.sync for s in SPECS.values() if isinstance(s.sync.outer, OuterStep)]
    assert len(_syncs(m.sync for m in found)) == len(found)  # no sync timed twice
    assert _syncs(m.sync for m in found) == _syncs(part_five)  # and none left out
    streaming = max(found, key=lambda m: m.fragments)
    assert all(0 < streaming.overlap < h // streaming.fragments for h in chosen["local_steps"])
    assert parameters(chosen, 2) % (2 * streaming.fragments * 64) == 0  # whole scale blocks


def test_a_plan_whose_schedule_cannot_run_gets_one_line_before_anything_is_built(monkeypatch):
    entry = spec("streaming_diloco")
    monkeypatch.setitem(SPECS, entry.name, replace(entry, sync=entry.sync._replace(overlap=4)))
    problem = measurement("diloco").check(SETUP)
    assert problem.startswith("the quick plan cannot run: overlap=4 is not less than H/F")
    assert "\n" not in problem


def _report(scale: float, h: int = 16) -> dict:
    """Host 0's report at ``RATE``: the nothing-sent step takes ``COMPUTE_S`` × ``scale``."""
    names = [m.name for m in methods(DILOCO_PLANS["quick"])]
    rounds = [{"method": NOTHING_SENT, "local_steps": h, "step_s": COMPUTE_S * scale,
               "link_bytes": 0.0},
              {"method": DATA_PARALLEL, "local_steps": 1, "step_s": 0.8 * scale,
               "link_bytes": 4.4e6}]
    rounds += [{"method": name, "local_steps": h, "step_s": 0.05 * scale,
                "link_bytes": 4.4e6 / h / (1 + i)} for i, name in enumerate(names)]
    syncs = [{"method": name, "sync_s": 0.5 * scale, "sync_bytes": 4.4e6 / (1 + i)}
             for i, name in enumerate(names)]
    return {"rounds": rounds, "syncs": syncs}


def _results(scales=(1.0, 3.0)) -> DilocoClusterResults:
    hosts = [HostRun(run, RATE, _report(scale)) for run, scale in enumerate(scales)]
    return measurement("diloco").assemble(hosts, replace(SETUP, runs=len(scales)))


def test_the_record_keeps_every_run_and_its_readers_take_the_median_with_the_spread():
    results = _results((1.0, 3.0, 2.0))
    assert results.meta.runs == 3 and results.meta.command.endswith("--measure diloco")
    assert results.sizes.n == parameters(DILOCO_PLANS["quick"], 2)
    assert [m.name for m in results.methods] == [m.name for m in methods(DILOCO_PLANS["quick"])]
    assert sorted({r.run for r in results.rounds}) == [0, 1, 2]
    s = step(results, "diloco", 16, RATE)
    assert (s.median, s.low, s.high) == pytest.approx((0.1, 0.05, 0.15))
    assert step(results, DATA_PARALLEL, 64, RATE).median == pytest.approx(1.6)  # H: any
    assert counted_bytes(results, "diloco_int8", 16, RATE).median == pytest.approx(4.4e6 / 32)
    assert sync(results, "diloco", RATE, "sync_bytes").median == pytest.approx(4.4e6)
    with pytest.raises(ValueError, match="no run of diloco at H = 32 and 50mbit"):
        step(results, "diloco", 32, RATE)
    lines = measurement("diloco").lines(results)
    assert len(lines) == len(results.rounds) and "model" in lines[0]
    json.dumps(to_json(results))


def test_diloco_needs_a_stream_device_on_every_host():
    assert measurement("diloco").check(SETUP) is None
    problem = measurement("diloco").check(replace(SETUP, devices_per_host=1))
    assert "--devices-per-host 2" in problem and "\n" not in problem


def test_the_model_adds_what_the_overlap_does_not_hide_to_h_steps_of_compute():
    results = _results()
    compute = step(results, NOTHING_SENT, 16, RATE).median
    bytes_per_s = rate_bytes_per_s(RATE) * FRAME_SHARE
    n, found = results.sizes.n, {m.name: m for m in results.methods}
    whole = sync_link_bytes(found["diloco"], n, 2) / bytes_per_s
    assert whole == pytest.approx(4 * n / bytes_per_s)  # two hosts: each sends n floats
    assert modelled_step_s(results, "diloco", 16, RATE) == pytest.approx(compute + whole / 16)
    assert modelled_step_s(results, DATA_PARALLEL, 16, RATE) == pytest.approx(compute + whole)
    streaming = found["streaming_diloco"]
    fragment = sync_link_bytes(streaming, n, 2) / bytes_per_s
    assert fragment == pytest.approx(whole / 4 * (0.5 + 4 / 64) / 4)  # int4 + a scale per 64
    hidden = min(fragment, streaming.overlap * compute)
    assert modelled_step_s(results, "streaming_diloco", 16, RATE) == pytest.approx(
        compute + streaming.fragments * (fragment - hidden) / 16)
    assert round_time(0.1, 0.1, local_steps=8, fragments=2, overlap=1) == pytest.approx(0.8)
    alone = sync(results, "streaming_diloco", RATE).median  # what the link and TCP gave it
    assert modelled_step_s(results, "streaming_diloco", 16, RATE, sync_alone=True) == (
        pytest.approx(compute + streaming.fragments * (alone - streaming.overlap * compute) / 16))
    with pytest.raises(ValueError, match="no run of data_parallel's sync"):
        modelled_step_s(results, DATA_PARALLEL, 16, RATE, sync_alone=True)


def test_the_goals_are_read_per_run_against_the_counters_and_the_model():
    results = _results((1.0, 3.0))
    goals = byte_goals(results, 16, RATE)
    dp_share = goals["DiLoCo / data parallelism, bytes per inner step"]
    assert dp_share.value.median == pytest.approx(1 / 16) and dp_share.met
    int8 = goals["int8 / float32, one sync"]  # the fake int8 sync sends half of f32's
    assert int8.value.median == pytest.approx(0.5) and not int8.met
    assert int8.target == pytest.approx((1 + 4 / 64) / 4)  # int8 codes and a scale per 64
    fragment = goals["Streaming / DiLoCo (int4), largest single sync"]
    assert fragment.value.median == pytest.approx(3 / 4) and fragment.target == 1 / 4
    # the fake fragment's sync (0.5 s) needs more than half of τ · compute: nothing hides
    assert hidden_syncs(results) == []
    gaps = {(rate, h, name): gap for rate, h, name, gap in model_gaps(results)}
    assert set(gaps) == {(RATE, 1, DATA_PARALLEL)} | {
        (RATE, 16, m.name) for m in results.methods}
    assert gaps[(RATE, 16, "diloco")] == pytest.approx(
        modelled_step_s(results, "diloco", 16, RATE) / 0.1 - 1)


def test_a_bad_file_gets_one_line_naming_it_the_field_and_the_command(tmp_path):
    path = tmp_path / "diloco_cluster.json"
    with pytest.raises(ValueError, match="no such file; regenerate it with course cluster"):
        load_diloco_cluster(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        load_diloco_cluster(path)
    results = _results()
    data = to_json(results)
    del data["rounds"][0]["step_s"]
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"step_s") as error:
        load_diloco_cluster(path)
    assert "\n" not in str(error.value) and str(path) in str(error.value)
    save(results, path)
    assert load_diloco_cluster(path) == results


def _registry_outer_step(lay, method, replicas: np.ndarray):
    """The registry's outer step of ``method`` (``Sync.outer``, as ``train`` runs it) on the
    cluster's compute devices, from the replicas' parameters ``replicas`` f32[hosts, n]."""
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    entry, mesh = spec(method.name), lay.compute
    w0 = init_params(lay.ctx.n, 0, PART_FOUR_MLP)
    state = entry.init(w0, mesh, lay.ctx)
    state = state._replace(params=jax.device_put(replicas.reshape(-1),
                                                 NamedSharding(mesh, P("host"))))
    specs = state_specs(state)
    program = jax.jit(jax.shard_map(lambda s: entry.sync.outer(s, lay.ctx), mesh=mesh,
                                    in_specs=(specs,), out_specs=specs, check_vma=True))
    return program(state)


@pytest.mark.parametrize("index", range(4))
def test_the_cluster_s_sync_is_the_registry_s_outer_step(index):
    # bit for bit up to JAX 0.12.0; 0.12.1's XLA rounds a few entries of one method 1 ulp apart
    plan = DILOCO_PLANS["quick"]
    n = parameters(plan, 2)
    lay = dr.layout(Mesh(np.array(jax.devices()).reshape(2, 2), AXES), 8, n)
    method = methods(plan)[index]
    programs = dr.rounds(lay, method)
    state = dr.run_round(programs, lay, None, 2)  # the replicas apart: 2 inner steps each
    replicas = np.asarray(state.params).reshape(2, n)
    f = 1 % method.fragments  # the first sync's fragment (``streaming.sent_after``)
    mine = dr.to(programs.take(state.params, f), lay.stream)
    shared, _ = programs.sync(mine, *programs.outer[f])  # on the stream device
    registry = _registry_outer_step(lay, method, replicas)
    outer = registry.outer
    arrived = outer.pending if method.overlap else outer.synced[f::method.fragments]
    np.testing.assert_allclose(np.asarray(shared).reshape(2, -1),
                               np.tile(np.asarray(arrived), (2, 1)), rtol=1e-6, atol=1e-9)
    # the merge: the cluster's and the registry's (at once if τ = 0, else τ steps later)
    merged = np.asarray(programs.merge(state.params, dr.to(shared, lay.compute), f))
    if method.overlap:
        registry = jax.jit(jax.shard_map(
            lambda s: method.sync.merge(s, lay.ctx), mesh=lay.compute,
            in_specs=(state_specs(registry),), out_specs=state_specs(registry),
            check_vma=False))(registry)  # the specs read back from arrays on an axis of one
        # device say replicated where train's say sliced; JAX 0.12.1 then refuses the gather
    np.testing.assert_allclose(merged, np.asarray(registry.params), rtol=1e-6, atol=1e-9)


def test_a_diloco_round_is_h_inner_steps_then_the_outer_nesterov_step_on_the_mean():
    plan = DILOCO_PLANS["quick"]
    n = parameters(plan, 2)
    lay = dr.layout(Mesh(np.array(jax.devices()).reshape(2, 2), AXES), 8, n)
    diloco, int8 = methods(plan)[:2]
    programs = dr.rounds(lay, diloco)
    local = np.asarray(dr.run_round(programs, lay, None, 4).params).reshape(2, n)  # per host
    w0 = init_params(n, 0, PART_FOUR_MLP)
    delta = w0 - local.mean(axis=0)  # the mean outer gradient
    want = w0 - 0.7 * (delta + 0.9 * delta)  # Nesterov from zero momentum
    got = np.asarray(dr.run_round(programs, lay, diloco, 4).params).reshape(2, n)
    np.testing.assert_allclose(got, [want, want], rtol=1e-5, atol=1e-6)
    quantized = np.asarray(dr.run_round(dr.rounds(lay, int8), lay, int8, 4).params)
    # int8 codes both ways: within two rounding steps of the largest outer gradient, × 1.9 · 0.7
    bound = 1.33 * 2 * np.abs(w0 - local).max() / 127
    assert 0 < np.abs(quantized.reshape(2, n) - want).max() <= bound


@pytest.mark.e2e
@pytest.mark.skipif(check_can_run() is not None, reason="needs root and iproute2 (CI runs as root)")
def test_the_quick_plan_writes_its_record_and_leaves_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.tools.cli", "cluster", "--measure", "diloco",
         "--plan", "quick", "--link-rate", "200mbit", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    results = load_diloco_cluster(tmp_path / "diloco_cluster.json")
    plan = DILOCO_PLANS["quick"]
    names = {m.name for m in methods(plan)}
    assert {(r.method, r.local_steps) for r in results.rounds} == {(DATA_PARALLEL, 1)} | {
        (name, h) for name in names | {NOTHING_SENT} for h in plan["local_steps"]}
    h = plan["local_steps"][0]
    dp = counted_bytes(results, DATA_PARALLEL, h, "200mbit").median
    # the counters: DiLoCo sends data parallelism's bytes once every H steps
    assert counted_bytes(results, "diloco", h, "200mbit").median == pytest.approx(dp / h, rel=0.05)
    for m in results.methods:  # each sync's bytes over the link as the model says
        assert sync(results, m.name, "200mbit", "sync_bytes").median == pytest.approx(
            sync_link_bytes(m, results.sizes.n, 2), rel=0.1)
    assert leftovers() == []


def test_the_saved_run_is_the_full_plan_three_times_at_the_curves_rows():
    from course_utils.results.diloco_cluster import saved_diloco_cluster
    from course_utils.results.records import saved_path
    from course_utils.results.streaming import REPLICA_ROWS

    saved, plan = saved_diloco_cluster(), DILOCO_PLANS["full"]
    path = saved_path("diloco_cluster.json")
    assert json.loads(path.read_text()) == to_json(saved)  # the file is what the writer writes
    assert saved.meta.runs == 3
    assert saved.sizes.batch_size == plan["batch_size"] == REPLICA_ROWS
    assert saved.sizes.n == parameters(plan, saved.cluster.hosts)
    assert saved.methods == tuple(methods(plan))  # registry names
    assert saved.sizes.mixing == max(m.mixing for m in methods(plan))  # the registry's α
    rates = ["10mbit", "50mbit", "200mbit", "1gbit"]
    names = [NOTHING_SENT, *(m.name for m in saved.methods)]
    want = {(DATA_PARALLEL, 1, r, k) for r in rates for k in range(3)} | {
        (name, h, r, k) for name in names for h in plan["local_steps"] for r in rates
        for k in range(3)}
    assert {(r.method, r.local_steps, r.link_rate, r.run) for r in saved.rounds} == want
    assert {(s.method, s.link_rate, s.run) for s in saved.syncs} == {
        (m.name, r, k) for m in saved.methods for r in rates for k in range(3)}


def test_a_fragments_sync_is_larger_than_the_links_bucket_where_the_link_limits():
    # a bucket as large as the sync would send it at the machine's speed after an idle spell
    from course_utils.models.links import bucket_bytes, link_limits
    plan = DILOCO_PLANS["full"]
    streaming = max(methods(plan), key=lambda m: m.fragments)
    fragment = sync_link_bytes(streaming, parameters(plan, 2), 2)
    for rate in ("10mbit", "50mbit", "200mbit"):
        assert bucket_bytes(rate) <= fragment / 3 and link_limits(fragment, rate)


# the methods as diloco_cluster.json held them before they became registry names (6eaaf92)
OLD_METHODS = [("diloco", "float32", 1, 0), ("diloco_int8", "int8", 1, 0),
               ("diloco_4bit", "int4", 1, 0), ("streaming_diloco", "int4", 4, 1)]


def test_the_conversion_to_registry_names_keeps_every_reading_of_the_saved_run(tmp_path):
    import runpy

    from course_utils.results.diloco_cluster import Measured, MethodRow, saved_diloco_cluster
    from course_utils.results.records import saved_path

    converted = runpy.run_path(str(Path(__file__).parents[1] / "scripts"
                                   / "convert_diloco_cluster.py"))["converted"]
    new = json.loads(saved_path("diloco_cluster.json").read_text())
    old = {**new, "methods": [dict(zip(("name", "dtype", "fragments", "overlap"), m))
                              for m in OLD_METHODS]}
    assert converted(old) == new  # the settings move under "measured", nothing else changes
    saved = saved_diloco_cluster()  # and the registry reads them back as they were
    assert [(m.name, m.dtype, m.fragments, m.overlap) for m in saved.methods] == OLD_METHODS
    assert all(m.measured == Measured.of(m.sync) for m in saved.methods)
    path = tmp_path / "diloco_cluster.json"
    path.write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"methods\[0\]\.dtype: not a field of MethodRow.*"
                                         "convert_diloco_cluster.py"):
        load_diloco_cluster(path)  # the old shape: one line
    wrong = {**old, "methods": [{**old["methods"][3], "fragments": 2}]}
    with pytest.raises(ValueError, match="streaming_diloco: saved .*'fragments': 2.* the "
                                         "registry's .*'fragments': 4"):
        converted(wrong)
    # a run measured with settings the registry no longer has is refused, not modelled anew
    moved = {**new, "methods": [{**new["methods"][3],
                                 "measured": {**new["methods"][3]["measured"], "overlap": 2}}]}
    path.write_text(json.dumps(moved))
    with pytest.raises(ValueError, match="streaming_diloco was measured as .*overlap=2.*measure "
                                         "it again"):
        load_diloco_cluster(path)
    assert MethodRow("diloco").measured is None  # a model's row, not a measurement


@pytest.mark.parametrize("h", [16, 32])
def test_step_22_the_cluster_and_the_registry_read_one_model_of_a_sync(h):
    # bytes and messages: the registry's per-step traffic is F syncs of the cluster's every H
    from course_utils.models.cost_model import Topology
    from course_utils.training.traffic import strategy_traffic

    results, hosts = _results(), SETUP.hosts
    n, flat = results.sizes.n, Topology(hosts, 1)
    for m in results.methods:
        per_step = strategy_traffic(m.name, n, flat, local_steps=h)
        one = m.sync.outer.traffic(n, flat)
        assert per_step.link_bytes == pytest.approx(sync_link_bytes(m, n, hosts) * m.fragments / h)
        assert per_step.messages == pytest.approx(one.messages * m.fragments / h)
        if m.overlap == 0 and h == 16:  # nothing hidden: α · messages of every sync, per step
            slower = modelled_step_s(results, m.name, h, RATE, 1e-3)
            assert slower - modelled_step_s(results, m.name, h, RATE) == pytest.approx(
                1e-3 * per_step.messages)
    dp = strategy_traffic(BASELINE, n, flat)  # data parallelism: its step's, every step
    assert modelled_step_s(results, DATA_PARALLEL, h, RATE, 1e-3) - modelled_step_s(
        results, DATA_PARALLEL, h, RATE) == pytest.approx(1e-3 * dp.messages)
