"""Step 23's parts: recursive doubling and the all-ppermute ring against psum, the crossover
model, the latency run's readers against the models (on records built from known times), and
the TCP part's two processes on this machine's loopback (no namespace, no root)."""

import json
import math
import subprocess
import sys

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from course_utils import data_mesh, recursive_doubling_all_reduce, ring_all_reduce
from course_utils.checks.budget import crossover_bytes as step_08_crossover
from course_utils.collectives.doubling import doubling_permutation, doubling_steps
from course_utils.models.latency import crossover_bytes
from course_utils.models.links import payload_bytes_per_s
from course_utils.models.window import slow_start_s
from course_utils.observe.ir import hlo_collectives
from course_utils.results import round_trips as rt
from course_utils.results.latency import LatencyResults
from course_utils.results.links import saved_link_results
from course_utils.results.records import from_json, to_json
from course_utils.tools.cluster import tcp


def _program(mesh, body):
    axis = mesh.axis_names[0]
    return jax.jit(jax.shard_map(lambda x: body(x[0], axis, mesh.size)[None], mesh=mesh,
                                 in_specs=P(axis), out_specs=P(axis)))


@pytest.mark.parametrize("body", [recursive_doubling_all_reduce,
                                  lambda g, axis, p: ring_all_reduce(g, axis, p, by_hand=True)])
def test_both_hand_built_all_reduces_give_psum_s_sum_on_every_device_in_their_messages(body):
    mesh = data_mesh()
    x = np.random.default_rng(0).standard_normal((mesh.size, 64)).astype(np.float32)
    got = np.asarray(_program(mesh, body)(x))
    assert np.allclose(got, np.broadcast_to(x.sum(0), got.shape), atol=1e-5)
    ops = hlo_collectives(_program(mesh, body).lower(x).compile().as_text())
    assert {o.op for o in ops} == {"collective-permute"}
    if body is recursive_doubling_all_reduce:  # log2 p swaps of the whole vector
        assert [o.shape for o in ops] == [(64,)] * 2
        assert np.array_equal(got, np.broadcast_to(got[0], got.shape))  # the same bits
    else:  # 2(p - 1) steps of n/p
        assert [o.shape for o in ops] == [(16,)] * 6


def test_recursive_doubling_pairs_devices_and_refuses_a_count_that_is_not_a_power_of_two():
    assert doubling_permutation(8, 2)[:2] == [(0, 4), (1, 5)]
    assert [doubling_steps(p) for p in (1, 2, 4, 8)] == [0, 1, 2, 3]
    for bad in (3, 6, 0, 2.0, True):
        with pytest.raises(ValueError, match="power of two of devices"):
            doubling_steps(bad)


@pytest.mark.parametrize("p, alpha, rate", [(4, 0.05, 6e6), (8, 2e-5, 1.25e9), (64, 1e-6, 2.5e10)])
def test_the_crossover_is_where_both_models_take_the_same_time(p, alpha, rate):
    from course_utils.models.latency import collective_time

    for factor in (1, 2):
        n = crossover_bytes(p, alpha_s=alpha, bandwidth_bytes_per_s=rate, swap_factor=factor)
        ring = collective_time(n, p, alpha_s=alpha, bandwidth_bytes_per_s=rate, algorithm="ring")
        doubling = collective_time(factor * n, p, alpha_s=alpha, bandwidth_bytes_per_s=rate,
                                   algorithm="recursive_doubling")
        assert ring == pytest.approx(doubling, rel=1e-9)
    assert step_08_crossover(p, alpha, rate) == crossover_bytes(
        p, alpha_s=alpha, bandwidth_bytes_per_s=rate)  # step 08's answer: the one model


SIZES = [2**k for k in range(14, 23)]
WINDOW_SEEN = 131070


def _times(rate, delay_ms, alpha_ms, doubling_factor=2.0):
    """A cell whose all-reduces take exactly gloo's model (recursive doubling's bytes
    ``doubling_factor`` times), and whose connection takes each TCP model."""
    b = payload_bytes_per_s(rate) / 1e3  # bytes per ms
    rtt_s = (2 * delay_ms + 0.5) / 1e3
    ring = [6 * alpha_ms + 1.5 * s / b for s in SIZES]
    doubling = [2 * alpha_ms + 2 * doubling_factor * s / b for s in SIZES]
    link = payload_bytes_per_s(rate)
    fresh = slow_start_s(2**20, link, rtt_s)
    return {"allreduce_sizes": SIZES,
            "allreduce_ms": {"ring": ring, "doubling": doubling, "psum": ring,
                             "swap": [alpha_ms + 2 * s / b for s in SIZES]},
            "tcp": {"window": 65536, "window_seen": WINDOW_SEEN, "connections": 4,
                    "sync_bytes": 2**20, "idle_gap_s": 3.0, "warm_up_s": 1.0,
                    "one_clamped": min(link, WINDOW_SEEN / rtt_s),
                    "several_clamped": min(link, 4 * WINDOW_SEEN / rtt_s), "one_open": link,
                    "fresh_s": [fresh] * 3, "warm_s": [2**20 / link + rtt_s] * 3,
                    "idle_s": [fresh - rtt_s] * 3}}


def _results(doubling_factor=2.0):
    rows = []
    for rate in ("50mbit", "200mbit"):
        for delay_ms in (1.0, 25.0):
            alpha_ms = 2 * delay_ms + 0.3
            per_byte = 1e3 / payload_bytes_per_s(rate)
            sizes = (64, 16384, 262144)
            rows += [{"link_rate": rate, "delay_ms": delay_ms, "run": run,
                      "udp_round_trips_ms": [2 * delay_ms + 0.5] * 3,
                      "pingpong_ms": 2 * delay_ms + 0.2, "sizes": list(sizes),
                      "step_ms": [alpha_ms + s * per_byte for s in sizes],
                      **_times(rate, delay_ms, alpha_ms, doubling_factor)} for run in range(3)]
    saved = saved_link_results()  # any saved run's meta and cluster, on 4 hosts
    return from_json(LatencyResults, {"meta": to_json(saved.meta),
                                      "cluster": {**to_json(saved.cluster), "hosts": 4},
                                      "rows": rows})


def test_gloo_s_model_holds_a_run_made_of_it_and_the_textbook_misses_recursive_doubling():
    results = _results()
    cells = rt.allreduce_cells(results)
    assert {c.algorithm for c in cells} == {"ring", "doubling"}
    assert all(abs(c.error("gloo")) < 1e-6 for c in cells)
    doubling = [c for c in cells if c.algorithm == "doubling" and c.long_messages]
    assert doubling and rt.share_within(doubling, "textbook") < 1
    goals = dict(rt.algorithm_goals(results))
    assert goals["ring within 15%, messages ≥ 4 BDP"].met
    assert goals["doubling (gloo's model) within 15%, messages ≥ 4 BDP"].met
    assert not goals["doubling (textbook's model) within 15%, messages ≥ 4 BDP"].met
    # a long message: at least 4 bandwidth-delay products (the payload rate × the round trip)
    one = next(c for c in cells if c.delay_ms == 25.0 and c.algorithm == "ring")
    assert one.bdp_bytes == pytest.approx(payload_bytes_per_s(one.link_rate) * 50.5e-3)
    assert one.message_bytes == one.size / 4


def test_the_crossover_is_read_between_the_sizes_where_the_order_flips():
    results = _results()
    for rate in results.rates():
        for delay_ms in (1.0, 25.0):
            seen = rt.crossover(results, rate, delay_ms)
            if seen.side == "within":  # a geometric step of 2: within a factor 2 of the model
                assert seen.within("gloo")
                assert seen.measured / seen.gloo == pytest.approx(1, abs=0.4)
            else:
                assert seen.measured is None and seen.within("gloo") is None
    sides = {rt.crossover(results, r, d).side for r in results.rates() for d in (1.0, 25.0)}
    assert "within" in sides
    textbook = _results(doubling_factor=1.0)  # a run made of the textbook's model
    seen = rt.crossover(textbook, "50mbit", 1.0)
    assert seen.side == "within" and seen.within("textbook") and not seen.within("gloo")


def test_the_connection_is_read_against_the_window_slow_start_and_the_link():
    c = rt.connection(_results(), "50mbit", 25.0)
    assert c.one_clamped.median == pytest.approx(c.window_model)
    assert c.several_clamped.median == pytest.approx(c.several_model)
    assert c.window_model < c.several_model <= c.link == c.one_open.median
    assert c.fresh.median == pytest.approx(c.fresh_model)
    assert c.idle_model == pytest.approx(c.fresh_model - 50.5e-3)  # no handshake
    assert c.warm.median == pytest.approx(c.warm_model) and c.warm_model < c.idle_model


def test_the_command_s_lines_name_each_cell_s_crossover_connection_and_goal():
    text = "\n".join(rt.round_trip_lines(_results()))
    assert "50mbit,    25 ms: crossover" in text and "fresh sync" in text
    assert "goal doubling (gloo's model) within 15%" in text


def test_the_figure_has_a_panel_per_cell_with_measured_and_modelled_series():
    from course_utils import validate_figure_data

    data = rt.allreduce_figure_data(_results(), [("50mbit", 1.0), ("200mbit", 25.0)])
    validate_figure_data(data)
    assert [p["title"] for p in data["panels"]] == ["50mbit, 1 ms one way",
                                                    "200mbit, 25 ms one way"]
    assert len(data["panels"][0]["series"]) == 6


def test_the_tcp_part_measures_windows_and_syncs_between_two_processes_on_loopback():
    sink = subprocess.Popen([sys.executable, "-c", tcp.SINK, "127.0.0.1", str(tcp.PORT),
                             "65536"], stdout=subprocess.PIPE, text=True)
    try:
        assert sink.stdout.readline().strip() == "ready"
        plan = {"window": 65536, "connections": 2, "seconds": 0.2, "warm_s": 0.1,
                "sync_bytes": 65536, "syncs": 2, "idle_s": 0.05, "own_namespace": False}
        done = subprocess.run([sys.executable, "-c", tcp.SOURCE, "127.0.0.1", str(tcp.PORT),
                               json.dumps(plan)], capture_output=True, text=True, timeout=120,
                              check=True)
    finally:
        sink.kill()
        sink.wait()
    report = json.loads(done.stdout)
    assert report["window_seen"] >= 65536  # Linux advertises about twice the clamp
    for key in ("one_clamped", "several_clamped", "one_open"):
        assert report[key] > 0
    for key in ("fresh_s", "warm_s", "idle_s"):
        assert len(report[key]) == 2 and all(0 < t < 60 for t in report[key])


def test_the_latency_measurement_refuses_hosts_that_recursive_doubling_cannot_pair():
    import time

    from course_utils.tools.cluster.latency import check_latency
    from course_utils.tools.cluster.measurements import Setup

    def setup(hosts):
        return Setup(hosts=hosts, devices_per_host=1, plan="quick", tcp="reno", runs=1,
                     started=time.monotonic())

    assert check_latency(setup(4)) is None and check_latency(setup(2)) is None
    assert "--hosts 2, 4 or 8, not 3" in check_latency(setup(3))
    assert math.isinf(crossover_bytes(2, alpha_s=0.1, bandwidth_bytes_per_s=1e6))


def test_the_saved_runs_carry_their_commands_and_diloco_s_delay_matches_its_undelayed_run():
    from course_utils.results.diloco_cluster import local_steps, rates, saved_diloco_cluster

    latency = rt.saved_latency_results()
    assert latency.rows[0].tcp.window_seen > 0 and set(latency.rows[0].allreduce_ms) == {
        "ring", "doubling", "psum", "swap"}
    far, near = rt.saved_delayed_diloco(), saved_diloco_cluster()
    assert far.cluster.delay_ms == 50.0 and far.cluster.delay_line == latency.cluster.delay_line
    assert far.meta.runs == 3 and far.meta.commit and not far.meta.dirty
    assert rt.DELAYED_COMMAND in far.meta.command_line  # the regenerate hint
    assert [m.name for m in far.methods] == [m.name for m in near.methods]
    assert far.sizes == near.sizes and far.cluster.hosts == near.cluster.hosts
    assert set(rates(far)) <= set(rates(near)) and local_steps(far) == local_steps(near)


def test_a_quantized_sync_is_counted_as_the_collectives_its_program_holds():
    from course_utils.models.cost_model import Topology
    from course_utils.training.diloco import sync_traffic
    from course_utils.training.quantize import quantized_all_reduce

    mesh = data_mesh()
    p = mesh.size
    x = np.zeros((p, 256 * p), np.float32)
    for dtype, arrays in (("float32", 1), ("int4", 2)):  # int4: the codes and the scales
        program = _program(mesh, lambda g, a, q, dtype=dtype: quantized_all_reduce(
            g, a, q, dtype=dtype))
        ops = hlo_collectives(program.lower(x).compile().as_text())
        assert len(ops) == (1 if dtype == "float32" else 2 * arrays), [o.op for o in ops]
        float32 = sync_traffic(256 * p, Topology(p, 1)).messages
        assert sync_traffic(256 * p, Topology(p, 1), dtype=dtype).messages == arrays * float32
