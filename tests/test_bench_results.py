"""The saved full run (course_utils/saved/bench_full.json, read by 10_performance_lab) stays in sync with the code.

Regenerate it as ``bench.saved_results`` says when these fail.
"""
import json
from dataclasses import asdict

from course_utils import validate_figure_data
from course_utils.bench import (VARIANTS, figure_data, fit_rows, make_plan, rs_ag_against_psum, saved_results,
                                zero1_goal)

SAVED = saved_results()


def test_saved_run_is_the_full_default_plan():
    plan = asdict(make_plan())
    assert SAVED["command"] == "course bench"
    assert SAVED["plan"] == json.loads(json.dumps(plan))
    measured = {(r["devices"], r["variant"], r["elements"]) for r in SAVED["collectives"]}
    assert measured == {(p, v, e) for p in plan["devices"] for v in VARIANTS for e in plan["sizes"]}


def test_derived_sections_are_what_the_current_code_computes():
    rows = SAVED["collectives"]
    assert SAVED["fits"] == json.loads(json.dumps(fit_rows(rows)))
    assert SAVED["rs_ag_vs_psum"] == json.loads(json.dumps(rs_ag_against_psum(rows)))
    assert SAVED["zero1_goal"] == json.loads(json.dumps(zero1_goal(SAVED["zero1"])))
    validate_figure_data(figure_data(SAVED))
