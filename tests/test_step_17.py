"""Step 17's and its appendix's claims about the saved cluster runs (saved/cluster_*.json).

The notebooks read the runs and say what they show; these tests hold the readings to the data, so a
new saved run that disagrees fails here, not in a student's cell.
"""

from __future__ import annotations

import pytest

from course_utils.models.links import FRAME_SHARE, link_time_s, rate_bytes_per_s
from course_utils.problems.classification import padded_size
from course_utils.results.cluster import counted_against_model, fits, saved_cluster_results

MiB = 2**20
TOP = 16 * MiB
SMALL, LARGE, BBR = (saved_cluster_results(s) for s in ("2x2", "2x4", "2x2_bbr"))
RUNS = (*SMALL.runs, *LARGE.runs)


def _rows(run):
    return {r.bytes: r for r in run.collectives}


def test_the_runs_are_jaxlib_0_10_2_whose_sources_the_appendix_reads():
    assert {s.meta.machine.jaxlib for s in (SMALL, LARGE, BBR)} == {"0.10.2"}
    assert {s.cluster.default_tcp for s in (SMALL, LARGE, BBR)} == {"bbr"}


@pytest.mark.parametrize("run", (*RUNS, BBR.runs[0]),
                         ids=lambda r: f"{r.devices_per_host}-{r.link_rate}-{r.tcp}")
def test_the_link_counted_the_model_bytes_and_three_quarters_for_the_reduce_scatter(run):
    for size in (MiB, 4 * MiB, TOP):
        sent = counted_against_model(run, size)
        for kind in ("all_reduce", "all_gather"):
            assert abs(sent[kind]["counted"] / sent[kind]["model"] - 1) < 0.02
        assert abs(sent["reduce_scatter"]["counted"] / (0.75 * size) - 1) < 0.03


def test_all_reduce_takes_about_twice_an_all_gather_at_200mbit():
    for run in RUNS:
        if run.link_rate == "200mbit":
            for size in (MiB, 4 * MiB, TOP):
                twice = _rows(run)[size].all_reduce / _rows(run)[size].all_gather
                assert 1.75 < twice < 2.25


def test_fitted_rates_sit_a_few_per_cent_below_on_slow_links_far_below_at_10gbit():
    for run in RUNS:
        gaps = [fits(run)[k]["gap"] for k in ("all_reduce", "all_gather")]
        if run.link_rate in ("50mbit", "200mbit"):  # about tbf's headers
            assert all(-0.06 < g < -0.03 for g in gaps)
            assert all(abs(g + (1 - FRAME_SHARE)) < 0.02 for g in gaps)  # the headers' share
        elif run.link_rate == "1gbit":
            assert all(-0.2 < g < 0 for g in gaps)
        else:
            assert all(g < -0.5 for g in gaps)


def test_the_reduce_scatter_takes_more_time_than_its_bytes_and_its_surplus():
    shares = {}
    for run in RUNS:
        sent, row = counted_against_model(run, TOP), _rows(run)[TOP]
        shares[run.devices_per_host, run.link_rate] = (
            sent["reduce_scatter"]["counted"] / sent["all_reduce"]["counted"],
            row.reduce_scatter / row.all_reduce)
    for key in [(2, "200mbit"), (4, "200mbit")]:
        assert shares[key][1] > shares[key][0] + 0.05
    assert shares[2, "10gbit"][1] > 1
    surplus = {(r.link_rate, r.tcp): [(_rows(r)[s].reduce_scatter - _rows(r)[s].all_gather) * 1e3
                                      for s in (MiB, 4 * MiB, TOP)]
               for r in (*SMALL.runs, BBR.runs[0])}
    reno = {rate: v for (rate, tcp), v in surplus.items() if tcp == "reno"}
    tops = [v[2] for v in reno.values()]
    assert min(tops) > 20 and max(tops) < 2 * min(tops)
    assert 0.7 < reno["50mbit"][2] / reno["10gbit"][2] < 1.4
    at_4 = {rate: v[1] for rate, v in reno.items()}
    assert abs(at_4["50mbit"]) < 1 and max(at_4, key=at_4.get) == "1gbit"
    growth = {rate: v[2] / v[1] for rate, v in reno.items() if v[1] > 1}
    assert growth["200mbit"] > 8
    assert all(2.5 < growth[rate] < 6 for rate in ("1gbit", "10gbit"))
    assert surplus["200mbit", "bbr"][2] > 2 * surplus["200mbit", "reno"][2]


def test_bbr_slows_the_reduce_scatter_not_the_rings_nor_the_two_level_schedule():
    reno = fits(next(r for r in SMALL.runs if r.link_rate == "200mbit"))
    bbr = fits(BBR.runs[0])
    assert bbr["reduce_scatter"]["gap"] < reno["reduce_scatter"]["gap"] - 0.08
    assert all(abs(bbr[k]["gap"] - reno[k]["gap"]) < 0.05 for k in ("all_reduce", "all_gather"))
    assert reno["reduce_scatter"]["gap"] < reno["all_gather"]["gap"] - 0.05
    rs_2x4 = fits(next(r for r in LARGE.runs if r.link_rate == "200mbit"))["reduce_scatter"]["gap"]
    assert rs_2x4 < -0.15 < reno["reduce_scatter"]["gap"]
    at_200 = next(r for r in SMALL.runs if r.link_rate == "200mbit")
    two = {run.tcp: {r.bytes: r.hierarchical for r in run.hierarchy}
           for run in (at_200, BBR.runs[0])}
    assert all(two["bbr"][s] < 1.1 * two["reno"][s] for s in (4 * MiB, TOP))


def test_psum_and_reduce_scatter_plus_all_gather_tie_until_16_mib():
    at_200 = next(r for r in SMALL.runs if r.link_rate == "200mbit")
    rows = _rows(at_200)
    both = {s: (rows[s].reduce_scatter + rows[s].all_gather) / rows[s].all_reduce
            for s in (MiB, 4 * MiB, TOP)}
    assert abs(both[MiB] - 1) < 0.05 and abs(both[4 * MiB] - 1) < 0.05 and both[TOP] > 1
    top = rows[TOP]
    lead = top.reduce_scatter + top.all_gather - top.all_reduce
    extra = top.reduce_scatter - top.all_gather
    assert abs(lead - extra) < 0.25 * extra


def test_sixteen_bit_messages_halve_the_ring_time_from_1_mib():
    for run in RUNS:
        if run.link_rate in ("50mbit", "200mbit"):
            for r in run.ring16:
                if r.bytes >= MiB:
                    assert 0.45 < r.u16 / r.f32 < 0.55, (run.link_rate, r)


def test_on_the_fast_links_the_ratio_drifts_from_one_half():
    fast = [r.u16 / r.f32 for run in SMALL.runs if run.link_rate in ("1gbit", "10gbit")
            for r in run.ring16 if r.bytes >= MiB]
    assert max(abs(x - 0.5) for x in fast) > 0.1  # "drifts from one half"
    ten = next(run for run in SMALL.runs if run.link_rate == "10gbit")
    assert max(r.u16 / r.f32 for r in ten.ring16 if r.bytes >= MiB) > 1  # "above 1"


def per_call_ms(run):
    """The cost of each separate small all-reduce beyond the bucket, ms (17's reading)."""
    b = run.buckets
    return (b.separate - b.one_bucket) / (b.count - 1) * 1e3


def test_many_small_calls_pay_a_fixed_cost_that_does_not_follow_the_rate():
    for run in RUNS:
        assert run.buckets.separate > 2.5 * run.buckets.one_bucket
        rate = rate_bytes_per_s(run.link_rate)  # far above one message's link time
        assert per_call_ms(run) > 1.5 * 1e3 * link_time_s(
            "all_reduce", run.buckets.bytes, run.hosts, run.devices_per_host, rate)
    for runs in (SMALL.runs, LARGE.runs):  # about the same from 50 Mbit/s to 10 Gbit/s
        costs = [per_call_ms(r) for r in runs]
        assert max(costs) < 1.8 * min(costs)
    assert min(map(per_call_ms, LARGE.runs)) > 2 * max(map(per_call_ms, SMALL.runs))


def test_hierarchy_pays_on_slow_links_only():
    gain, factor, extra = {}, {}, {}
    for run in RUNS:
        hier = next(r for r in run.hierarchy if r.bytes == 4 * MiB)
        h, d, rate = run.hosts, run.devices_per_host, rate_bytes_per_s(run.link_rate)
        flat_model = link_time_s("all_reduce", hier.bytes, h, d, rate)
        two_model = link_time_s("hierarchical", hier.bytes, h, d, rate)
        key = (d, run.link_rate)
        gain[key], factor[key] = hier.flat / hier.hierarchical, flat_model / two_model
        sent = counted_against_model(run, hier.bytes)["hierarchical"]
        assert abs(sent["counted"] / sent["model"] - 1) < 0.05
        extra[key] = (hier.hierarchical - two_model / FRAME_SHARE) * 1e3
    assert abs(gain[2, "50mbit"] / factor[2, "50mbit"] - 1) < 0.05
    assert all(1 < gain[k] < factor[k] for k in [(2, "200mbit"), (4, "200mbit")])
    assert max(v for (_, r), v in gain.items() if r in ("1gbit", "10gbit")) < 1.1
    assert abs(extra[2, "50mbit"]) < 5
    assert all(10 < ms < 50 for k, ms in extra.items() if k[1] != "50mbit")
    assert 4 * padded_size(4) < 256 * 1024  # local SGD's vector fits in the shaper's burst


def test_the_exercise_measurement_flips_the_model_ranking():
    run = next(r for r in LARGE.runs if r.link_rate == "1gbit")
    row = next(r for r in run.hierarchy if r.bytes == TOP)
    rate = 1e9 / 8
    over_flat = row.flat - link_time_s("all_reduce", TOP, 2, 4, rate)
    over_two = row.hierarchical - link_time_s("hierarchical", TOP, 2, 4, rate)
    assert over_two > 3 * over_flat > 0
    quarter = next(r for r in run.hierarchy if r.bytes == TOP // 4)
    over_quarter = quarter.hierarchical - link_time_s("hierarchical", TOP // 4, 2, 4, rate)
    assert over_two > 4 * over_quarter > 0
    assert row.hierarchical > row.flat


def test_the_exercise_run_reduce_scatter_is_slower_than_its_model_and_sends_fewer_bytes():
    # step 17's exercise reads: all-gather about the model, reduce-scatter about twice, fewer bytes
    run = next(r for r in LARGE.runs if r.link_rate == "1gbit")
    row = _rows(run)[TOP]
    model_s = link_time_s("all_gather", TOP, 2, 4, rate_bytes_per_s("1gbit"))
    assert 0.95 < row.all_gather / model_s < 1.15
    assert 1.7 < row.reduce_scatter / model_s < 2.5
    assert counted_against_model(run, TOP)["reduce_scatter"]["counted"] < 7 / 8 * TOP


def test_the_training_timings_time_the_programs_train_runs():
    """``--measure collectives``' training figures time ``build_programs``' programs: data
    parallelism's step, local SGD's step and its outer step (H = 8), on step 16's whole task."""
    import jax

    from course_utils.devices.setup import data_mesh
    from course_utils.observe.ir import hlo_collectives
    from course_utils.problems.classification import classification_task
    from course_utils.tools.cluster.collectives import _training_steps

    calls = []

    def median_s(fn, *args):
        calls.append((fn, args))
        return 0.5

    mesh = data_mesh()
    times = _training_steps(mesh, median_s)
    assert times == {"dp_step": 0.5, "local_step": 0.5, "averaging": 0.5, "local_steps": 8,
                     "local_sgd_step": 0.5 + 0.5 / 8}
    (dp, (whole, x, _)), (local, (own, *_)), (average, (synced,)) = calls
    assert synced is own and x.shape[0] == len(classification_task()[1])
    n = padded_size(mesh.size)
    assert whole.params.shape == (n,) and own.params.shape == (mesh.size * n,)
    ops = {name: [(c.op, c.bytes) for c in hlo_collectives(fn.as_text())]
           for name, fn in (("dp", dp), ("local", local), ("average", average))}
    assert isinstance(dp, jax.stages.Compiled)
    if mesh.size > 1:
        assert ops == {"dp": [("all-reduce", 4 * n)], "local": [],
                       "average": [("all-reduce", 4 * n)]}
