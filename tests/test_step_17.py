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


def _slow(run):
    """At 200 Mbit/s and below: the link counter reads the frames' headers and the
    acknowledgements too, up to about 7 % above the payload; from 1 Gbit/s segmentation offload
    (GSO) hands the link ~64 KB packets and it reads about the payload."""
    return rate_bytes_per_s(run.link_rate) <= rate_bytes_per_s("200mbit")


def _counted_as_the_page_says(ratio, run, what=""):
    """Counted bytes over the model's: 3 to 8 % above it at 200 Mbit/s and below (step 17: "up
    to 7 % more than the model's bytes"), within 2 % from 1 Gbit/s."""
    if _slow(run):
        assert 1.03 < ratio < 1.08, (run.link_rate, what, ratio)
    else:
        assert abs(ratio - 1) < 0.02, (run.link_rate, what, ratio)


def test_the_runs_are_jaxlib_0_10_2_whose_sources_the_appendix_reads():
    assert {s.meta.machine.jaxlib for s in (SMALL, LARGE, BBR)} == {"0.10.2"}
    assert {s.cluster.default_tcp for s in (SMALL, LARGE, BBR)} == {"bbr"}


@pytest.mark.parametrize("run", (*RUNS, BBR.runs[0]),
                         ids=lambda r: f"{r.devices_per_host}-{r.link_rate}-{r.tcp}")
def test_the_link_counted_the_model_bytes_and_three_quarters_for_the_reduce_scatter(run):
    # The counter reads what the link sends, not only TCP's payload: at 200 Mbit/s and below the
    # frames' headers and the acknowledgements of the other direction add up to ~7 %; from
    # 1 Gbit/s GSO's large packets make it ~1.00 (step 17, cell 7; the appendix's table).
    for size in (MiB, 4 * MiB, TOP):
        sent = counted_against_model(run, size)
        for kind in ("all_reduce", "all_gather"):
            _counted_as_the_page_says(sent[kind]["counted"] / sent[kind]["model"], run, kind)
        _counted_as_the_page_says(sent["reduce_scatter"]["counted"] / (0.75 * size), run, "rs")


def test_at_200mbit_time_sits_7_to_20_percent_above_the_model_at_every_size():
    # step 17, cell 7: on 2 × 2 at 200 Mbit/s, every size 7-20 % above the link model (6.8 %
    # at 256 KiB prints as 7 %), the most at 1 MiB
    at_200 = next(r for r in SMALL.runs if r.link_rate == "200mbit")
    rate = rate_bytes_per_s("200mbit")
    over = {r.bytes: r.all_reduce / link_time_s("all_reduce", r.bytes, 2, 2, rate)
            for r in at_200.collectives}
    assert all(1.065 < x < 1.205 for x in over.values()), over
    assert max(over, key=over.get) == MiB


def test_all_reduce_takes_about_twice_an_all_gather_at_200mbit():
    # step 17, cell 10: close to 2 on both shapes from 256 KiB, and on 2 × 2 at 64 KiB too
    for run in RUNS:
        if run.link_rate == "200mbit":
            for size, row in _rows(run).items():
                if size >= 256 * 1024 or run.devices_per_host == 2:
                    assert 1.85 < row.all_reduce / row.all_gather < 2.15, (run, size)


def test_fitted_rates_sit_a_few_per_cent_below_on_slow_links_far_below_at_10gbit():
    for run in RUNS:
        gaps = [fits(run)[k]["gap"] for k in ("all_reduce", "all_gather")]
        if run.link_rate in ("50mbit", "200mbit"):
            # the appendix: "within about 2 % of the configured rate": the counted bytes there
            # include the headers (~7 % above the payload), so the fit lands on the rate
            assert all(abs(g) < 0.02 for g in gaps)
        elif run.link_rate == "1gbit":  # "fall further"
            assert all(-0.2 < g < -0.05 for g in gaps)
        else:  # 10 Gbit/s: the link no longer limits
            assert all(g < -0.25 for g in gaps)


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
    # nothing at 50 Mbit/s up to 4 MiB; a few ms from 200 Mbit/s on. (The appendix's "largest at
    # 1 Gbit/s for 1 and 4 MiB" no longer holds, 200 Mbit/s is: reported, not asserted.)
    assert all(abs(v) < 4 for v in reno["50mbit"][:2])
    assert all(5 < at_4[rate] < 15 for rate in ("200mbit", "1gbit", "10gbit"))
    # no fixed cost per byte: from 4 to 16 MiB it grows far more than the bytes' 4x
    growth = {rate: v[2] / v[1] for rate, v in reno.items() if v[1] > 1}
    assert set(growth) == {"200mbit", "1gbit", "10gbit"} and min(growth.values()) > 6
    # BBR: larger. (The appendix's "more than twice as large" no longer holds, 1.4x: reported.)
    assert surplus["200mbit", "bbr"][2] > 1.25 * surplus["200mbit", "reno"][2]


def test_bbr_slows_the_reduce_scatter_not_the_rings_nor_the_two_level_schedule():
    reno = fits(next(r for r in SMALL.runs if r.link_rate == "200mbit"))
    bbr = fits(BBR.runs[0])
    # "drops much further": 4.7 points further in this run (it was 12 under the old bucket)
    assert bbr["reduce_scatter"]["gap"] < reno["reduce_scatter"]["gap"] - 0.03
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
    # "the same time at 1 and 4 MiB": 0.93 and 1.00 in this run
    assert abs(both[MiB] - 1) < 0.08 and abs(both[4 * MiB] - 1) < 0.05 and both[TOP] > 1.05
    top = rows[TOP]
    lead = top.reduce_scatter + top.all_gather - top.all_reduce
    extra = top.reduce_scatter - top.all_gather
    assert abs(lead - extra) < 0.25 * extra


def test_sixteen_bit_messages_halve_the_ring_time_from_1_mib():
    # step 17, cell 13 (2 × 2): about one half at every rate up to 1 Gbit/s, 0.44-0.60
    for run in SMALL.runs:
        if run.link_rate != "10gbit":
            for r in run.ring16:
                if r.bytes >= MiB:
                    assert 0.435 < r.u16 / r.f32 < 0.605, (run.link_rate, r)


def test_at_10gbit_half_the_bytes_no_longer_take_half_the_time():
    # step 17, cell 13: 0.88-0.98 at 10 Gbit/s (it read "drifts from one half, above 1" before)
    ten = next(run for run in SMALL.runs if run.link_rate == "10gbit")
    ratios = [r.u16 / r.f32 for r in ten.ring16 if r.bytes >= MiB]
    assert len(ratios) == 3 and all(0.87 < x < 0.99 for x in ratios), ratios


def per_call_ms(run):
    """The cost of each separate small all-reduce beyond the bucket, ms (17's reading)."""
    b = run.buckets
    return (b.separate - b.one_bucket) / (b.count - 1) * 1e3


def test_many_small_calls_pay_more_than_their_bytes_from_200mbit():
    # step 17, cell 19. (It read "the 64 calls take about the same time at every rate" on both
    # shapes before; now only on 2 × 4, and on 2 × 2 69-132 ms with no order by rate.)
    over = {}
    for run in RUNS:
        b, rate = run.buckets, rate_bytes_per_s(run.link_rate)
        call_ms = 1e3 * link_time_s("all_reduce", b.bytes, run.hosts, run.devices_per_host, rate)
        over[run.devices_per_host, run.link_rate] = per_call_ms(run) / call_ms
        if _slow(run):  # the bucket costs about its link time on the slow links
            bucket_s = link_time_s("all_reduce", b.count * b.bytes, run.hosts,
                                   run.devices_per_host, rate)
            assert 1 < b.one_bucket / bucket_s < 1.2, run.link_rate
    assert 0.8 < over[2, "50mbit"] < 1.25  # about its bytes' link time
    assert over[2, "200mbit"] > 2 and over[4, "200mbit"] > 2  # more
    assert all(x > 10 for (_, r), x in over.items() if r in ("1gbit", "10gbit"))  # many times
    assert min(map(per_call_ms, LARGE.runs)) > 2 * max(map(per_call_ms, SMALL.runs))  # 2 × 4
    large = [r.buckets.separate for r in LARGE.runs]  # 2 × 4: about the same at both rates
    assert max(large) < 1.15 * min(large)
    small = [r.buckets.separate * 1e3 for r in SMALL.runs]  # 2 × 2: 69 to 132 ms, no order
    assert all(65 < ms < 135 for ms in small)
    assert small != sorted(small) and small != sorted(small, reverse=True)


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
        # "the model's bytes for it at every rate, and the headers"
        _counted_as_the_page_says(sent["counted"] / sent["model"], run, "hierarchical")
        extra[key] = (hier.hierarchical - two_model / FRAME_SHARE) * 1e3
    # step 17, cell 16: the model's factor at 50 Mbit/s, a little less at 200, clearly less
    # from 1 Gbit/s, a loss at 10 Gbit/s
    assert abs(gain[2, "50mbit"] / factor[2, "50mbit"] - 1) < 0.05
    assert all(1 < gain[k] < factor[k] for k in [(2, "200mbit"), (4, "200mbit")])
    assert all(1 < gain[d, "1gbit"] < gain[d, "200mbit"] for d in (2, 4))
    assert gain[2, "10gbit"] < 1
    # the appendix: ten to a few tens of ms beyond the model and the headers from 200 Mbit/s on.
    # (It says "about nothing on the slowest link"; at 50 Mbit/s it is 27 ms, 4 % of the model,
    # about the acknowledgements' bytes FRAME_SHARE leaves out: reported, not asserted as 0.)
    assert all(10 < ms < 50 for k, ms in extra.items() if k[1] != "50mbit")
    assert 0 < extra[2, "50mbit"] < 0.05 * 1e3 * link_time_s(
        "hierarchical", 4 * MiB, 2, 2, rate_bytes_per_s("50mbit"))
    # (the old "local SGD's vector fits in the shaper's 256 KiB burst" is gone: no page says it)


def test_the_reduce_scatter_takes_the_all_gather_s_time_where_the_link_limits():
    # step 17, cells 9-10: from 256 KiB up, on 2 x 2, about the all-gather's time at 50 and
    # 200 Mbit/s; longer where the hosts' CPUs limit (1 and 10 Gbit/s)
    ratio = {run.link_rate: [r.reduce_scatter / r.all_gather for r in run.collectives
                             if r.bytes >= 2**18] for run in SMALL.runs}
    assert all(0.9 < x < 1.2 for rate in ("50mbit", "200mbit") for x in ratio[rate])
    assert all(max(ratio[rate]) > 1.3 for rate in ("1gbit", "10gbit"))


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
