"""``course cluster --measure diloco``: its plans, the record assembled from host 0's reports
of several runs, the record's reader, the round model, and (as root, ``-m e2e``) one quick run
that leaves nothing behind."""

import json
import subprocess
import sys
import time
from dataclasses import replace

import jax
import numpy as np
import pytest
from jax.sharding import Mesh

from course_utils.collectives.overlap import AXES
from course_utils.models.links import FRAME_SHARE, rate_bytes_per_s
from course_utils.problems.classification import PART_FOUR_MLP, init_params
from course_utils.results.diloco_cluster import (
    DATA_PARALLEL,
    NOTHING_SENT,
    DilocoClusterResults,
    byte_goals,
    hidden_syncs,
    link_bytes,
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

SETUP = Setup(hosts=2, devices_per_host=2, plan="quick", tcp="reno", runs=2,
              started=time.monotonic())
COMPUTE_S, RATE = 0.02, "50mbit"


@pytest.mark.parametrize("plan", DILOCO_PLANS)
def test_every_plan_can_run_on_two_hosts_of_two_devices(plan):
    chosen = DILOCO_PLANS[plan]
    assert measurement("diloco").check(replace(SETUP, plan=plan)) is None
    assert [m.dtype for m in methods(chosen)] == ["float32", "int8", "int4", "int4"]
    streaming = methods(chosen)[-1]
    assert all(0 < streaming.overlap < h // streaming.fragments for h in chosen["local_steps"])
    assert parameters(chosen, 2) % (2 * streaming.fragments * 64) == 0  # whole scale blocks


def test_a_plan_whose_schedule_cannot_run_gets_one_line_before_anything_is_built(monkeypatch):
    monkeypatch.setitem(DILOCO_PLANS, "quick", {**DILOCO_PLANS["quick"], "overlap": 4})
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
    assert link_bytes(results, "diloco_int8", 16, RATE).median == pytest.approx(4.4e6 / 32)
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
    dp = link_bytes(results, DATA_PARALLEL, h, "200mbit").median
    # the counters: DiLoCo sends data parallelism's bytes once every H steps
    assert link_bytes(results, "diloco", h, "200mbit").median == pytest.approx(dp / h, rel=0.05)
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
    assert [(m.name, m.dtype, m.fragments, m.overlap) for m in saved.methods] == [
        (m.name, m.dtype, m.fragments, m.overlap) for m in methods(plan)]
    rates = ["10mbit", "50mbit", "200mbit", "1gbit"]
    names = [NOTHING_SENT, *(m.name for m in saved.methods)]
    want = {(DATA_PARALLEL, 1, r, k) for r in rates for k in range(3)} | {
        (name, h, r, k) for name in names for h in plan["local_steps"] for r in rates
        for k in range(3)}
    assert {(r.method, r.local_steps, r.link_rate, r.run) for r in saved.rounds} == want
    assert {(s.method, s.link_rate, s.run) for s in saved.syncs} == {
        (m.name, r, k) for m in saved.methods for r in rates for k in range(3)}


def test_a_fragments_sync_is_larger_than_the_diloco_links_bucket_where_the_link_limits():
    # a bucket as large as the sync would send it at the machine's speed after an idle spell
    from course_utils.models.links import BUCKET_BYTES, bucket_bytes
    from course_utils.results.diloco_cluster import MethodRow

    plan = DILOCO_PLANS["full"]
    streaming = MethodRow(*methods(plan)[-1])
    fragment = sync_link_bytes(streaming, parameters(plan, 2), 2)
    assert streaming.fragments > 1 and fragment < BUCKET_BYTES  # why the default will not do
    for rate in ("10mbit", "50mbit", "200mbit"):
        assert bucket_bytes(rate, measurement("diloco").bucket_ms) <= fragment / 3
    assert measurement("collectives").bucket_ms is None  # steps 17–20 keep 256 KiB
