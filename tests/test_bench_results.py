"""The saved full run (course_utils/saved/bench_full.json, read by 10_performance_lab) stays in
sync with the code.

Regenerate it as ``course_utils.results.bench.saved_results`` says when these fail.
"""

import json
from dataclasses import asdict

import pytest

from course_utils import validate_figure_data
from course_utils.observe.sweep import VARIANTS
from course_utils.results.bench import figure_data, saved_results, steps_figure_data
from course_utils.results.records import saved_path, to_json
from course_utils.tools.bench.combine import fit_rows, rs_ag_against_psum, zero1_goal
from course_utils.tools.bench.plan import make_plan

SAVED = saved_results()
SAVED_JSON = to_json(SAVED)  # what the file holds


def close(a, b, rel: float = 1e-9) -> bool:
    """Equal structure, strings and integers; floats equal to ``rel``.

    Least squares differs in the last bits between NumPy builds.
    """
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
        )
    if isinstance(a, list):
        return (
            isinstance(b, list) and len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
        )
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return b == pytest.approx(a, rel=rel)
    return a == b


def test_close_tells_a_changed_value():
    assert close({"a": [1.0, {"b": 2}]}, {"a": [1.0 + 1e-13, {"b": 2}]})
    assert not close({"a": [1.0, {"b": 2}]}, {"a": [1.001, {"b": 2}]})
    assert not close({"a": 1.0}, {"a": 1.0, "c": 0})


def test_saved_run_is_the_full_default_plan():
    plan = asdict(make_plan())
    assert SAVED.meta.command == "course bench"
    assert SAVED_JSON["plan"] == json.loads(json.dumps(plan))
    measured = {(r.devices, r.variant, r.elements) for r in SAVED.collectives}
    assert measured == {(p, v, e) for p in plan["devices"] for v in VARIANTS for e in plan["sizes"]}


def test_derived_sections_are_what_the_current_code_computes():
    rows = SAVED.collectives

    def as_saved(value):
        return json.loads(json.dumps(to_json(value)))

    assert close(SAVED_JSON["fits"], as_saved(fit_rows(rows)))
    assert close(SAVED_JSON["rs_ag_vs_psum"], as_saved(rs_ag_against_psum(rows)))
    assert close(SAVED_JSON["zero1_goal"], as_saved(zero1_goal(SAVED.zero1)))
    validate_figure_data(figure_data(SAVED))
    validate_figure_data(steps_figure_data(SAVED))


def test_fits_are_typed_records_with_a_fit():
    from course_utils.results.bench import BenchFit, FitTop

    fit = SAVED.fits[0]
    assert isinstance(fit, BenchFit) and isinstance(fit.top, FitTop)
    assert fit.fit.alpha_s == pytest.approx(fit.alpha_us * 1e-6)


def _at_top(variant, p):
    top = max(r.bytes for r in SAVED.collectives)
    return next(r.median_us for r in SAVED.collectives
                if (r.devices, r.variant, r.bytes) == (p, variant, top))


def test_what_step_10_reads_off_the_saved_run_holds():
    # 10_performance_lab's prose: these are its claims about the saved data, checked here
    counts = sorted({f.devices for f in SAVED.fits})
    psum = {f.devices: f for f in SAVED.fits if f.variant == "psum"}
    floors = [psum[p].floor_us for p in counts]
    bandwidths = [psum[p].bandwidth_gbps for p in counts]
    assert floors == sorted(floors) and bandwidths == sorted(bandwidths, reverse=True)
    assert bandwidths[0] / bandwidths[-1] > 2  # falls faster than a ring's 2(p-1)/p could explain
    assert any(p > SAVED.meta.machine.cores for p in counts)  # oversubscribed counts exist
    ratios = [r for e in SAVED.rs_ag_vs_psum for v in ("rs_ag_calls", "rs_ag_fused")
              for r in getattr(e, v).ratios]
    assert sum(r > 1 for r in ratios) >= 0.9 * len(ratios)  # slower at almost every size
    scatter = [_at_top("psum", p) / _at_top("psum_scatter", p) for p in counts]
    gather = [_at_top("psum", p) / _at_top("all_gather", p) for p in counts]
    assert scatter == sorted(scatter) and gather == sorted(gather, reverse=True)


def test_what_step_10_reads_off_the_saved_zero1_rows_holds():
    for p in {r.devices for r in SAVED.zero1}:
        mine = sorted((r for r in SAVED.zero1 if r.devices == p), key=lambda r: r.params)
        assert mine[0].ratio_to_dp["zero1_fused"] > 1 > mine[-1].ratio_to_dp["zero1_fused"]
        for r in mine:  # 1/p of the optimizer state at every size
            state = r.state_bytes_device0
            assert state["zero1_fused"] * p == state["dp"]


def test_the_records_give_back_the_saved_file():
    text = saved_path("bench_full.json").read_text()
    assert SAVED_JSON == json.loads(text)


def test_a_file_that_is_not_a_bench_run_says_so(tmp_path):
    from course_utils.results.bench import load_bench_run

    path = tmp_path / "bench.json"
    path.write_text(json.dumps({**SAVED_JSON, "meta": {**SAVED_JSON["meta"], "machine": {}}}))
    with pytest.raises(ValueError, match=r"bench.json: meta.machine.python: missing; is it a"):
        load_bench_run(path)
    path.write_text(json.dumps({**SAVED_JSON, "extra": 1}))
    with pytest.raises(ValueError, match="bench.json: extra: not a field of BenchRun; is it"):
        load_bench_run(path)
