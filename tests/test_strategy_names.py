"""Only registry data names a strategy: the places outside ``training/strategies.py`` that name
one by a string literal (``strategy_names``), held at or below the count left to remove."""

import pytest
from strategy_names import ALLOWED, ROOT, named_places, report

from course_utils.training.strategies import SPECS

# the files that still name a strategy by a literal (the goal: at most 4)
MOST_FILES = 0


def test_strategy_literals_outside_the_registry_stay_within_the_bound():
    places = named_places(SPECS)
    print(report(places))
    assert len(places) <= MOST_FILES, report(places)


def test_each_allowed_literal_is_in_its_file():
    for (path, text), count in ALLOWED.items():
        assert (ROOT / path).read_text().count(f'"{text}"') >= count, (path, text)


def test_a_new_literal_is_counted(tmp_path):
    code = tmp_path / "course_utils" / "x.py"
    code.parent.mkdir()
    code.write_text('"""zero1 in a docstring"""\nNAME, RUN = "zero1", "local_sgd H=8"\n')
    assert named_places(SPECS, tmp_path) == {"course_utils/x.py": [(2, "zero1"),
                                                                   (2, "local_sgd H=8")]}


# what still works with every strategy renamed (``renamed_copy``), run in the renamed copy:
# each names a strategy only through the registry's data
RENAMED = """
import course_utils

assert course_utils.__file__.startswith({root!r})
course_utils.use_cpu_devices(4)
mapping = {mapping!r}
"""
# the registry's tables, part four's rows, the checks and the saved runs' readers and figures
# of parts three, four and five (results.strategies, training, diloco, streaming, diloco_cluster)
RENAMED_READERS = RENAMED + """
from course_utils.checks.compute import expected_rows
from course_utils.checks.training import STAGES, check_peak_prediction
from course_utils.figures.labels import human, short_label
from course_utils.figures.streaming import wall_clock_figure_data
from course_utils.results import diloco as rd
from course_utils.results import diloco_cluster as dc
from course_utils.results import strategies as rs
from course_utils.results import streaming as rst
from course_utils.results import training as rt
from course_utils.results.diloco_figures import diloco_figure_data
from course_utils.results.training_figures import step_figure_data
from course_utils.training.part_four import COMPRESSED, PART_FOUR_ROWS, find_row
from course_utils.training.strategies import DATA_PARALLEL, DILOCO, SPECS, ZERO_STAGES, saved_in

assert set(SPECS) == set(mapping.values()) and STAGES == ZERO_STAGES
assert [r.strategy for r in PART_FOUR_ROWS] == [mapping[s] for s in {strategies!r}]
assert find_row(mapping["zero3"]).strategy == mapping["zero3_regather"] and len(COMPRESSED) == 4
assert all(human(name) == s.label and short_label(name) for name, s in SPECS.items())
assert all(rt.part_four_traffic(r.name, 2, 2).link_bytes > 0 for r in PART_FOUR_ROWS)
assert expected_rows(100_000, 2, 2, 1e8, 1e-4, 1e10) > 0
check_peak_prediction(lambda sizes, p: dict(zip(STAGES, (
    12 * sum(sizes), 8 * sum(sizes) + 8 * sum(sizes) / p, 8 * sum(sizes) + 8 * sum(sizes) / p,
    12 * sum(sizes) / p + 4 * max(sizes)))), [8192, 256, 2048, 256], 4)
# part three
runs = rs.saved_strategy_results()
labels = [label for s in SPECS.values() for label, _ in s.saved.points]
assert len(labels) == 11 and all(rs.find_run(runs, label) for label in labels)
rs.tradeoff_figure_data(runs), rs.local_sgd_figure_data(runs, [1, 4, 8, 16])
rs.heldout_figure_data(runs, labels, from_step=96)
# part four
training = rt.saved_training_results()
step_figure_data(training, alpha_s={{"50mbit": 4e-4}})
assert rt.baseline_row() == DATA_PARALLEL
assert any(rt.own_work_s(training, s) > 0 for s in COMPRESSED)
# part five: the sweep, the streaming curves, the cluster's rounds
sweep = rd.saved_diloco_results()
diloco_figure_data(sweep)
assert rd.EVERY_H == saved_in("diloco.json", "compared", "ablation")
assert rd.sweep_curves(sweep, DILOCO, 32, False) and rd.sweep_cost(sweep, DILOCO, 32)
curves = rst.saved_streaming_curves()
assert all(rst.dated_curves(curves, s) and rst.rises(curves, s) and rst.bytes_of(curves, s)
           for s in rst.CURVE_STRATEGIES)
wall_clock_figure_data({{s: [c.heldout_loss for c in rst.curves_of(curves, s).values()]
                        for s in rst.CURVE_STRATEGIES}},
                       {{"1gbit": {{s: 0.1 for s in rst.CURVE_STRATEGIES}}}}, floor=0.05,
                       targets={{"target": 0.2}})
cluster = dc.saved_diloco_cluster()
h, rate = dc.local_steps(cluster)[0], dc.rates(cluster)[0]
assert all(dc.modelled_step_s(cluster, name, h, rate) > 0
           for name in (DATA_PARALLEL, *(m.name for m in cluster.methods)))
assert dc.byte_goals(cluster, h, rate) and dc.model_gaps(cluster)
assert len(dc.hidden_syncs(cluster)) == 4  # Streaming DiLoCo at 200 Mbit/s and 1 Gbit/s
"""
# the plans: part three's runs trained, part four's curves read from the saved run by the
# cluster's training plan, part five's streaming runner
RENAMED_PLANS = RENAMED + """
from course_utils.devices.setup import data_mesh
from course_utils.results import strategies as rs
from course_utils.results import streaming as rst
from course_utils.results.training import saved_training_results
from course_utils.tools.cluster.training import TRAINING_PLANS, heldout_curves
from course_utils.training.diloco import replica_mesh

saved = rs.saved_strategy_results()
ran = rs.run_plan(data_mesh(), rs.PLAN, steps=rs.HELDOUT_EVERY)
assert [r.label for r in ran.runs] == [r.label for r in saved.runs]
# every curve read from training.json, none trained again
assert heldout_curves(TRAINING_PLANS["full"], 4) == list(saved_training_results().curves)
last = rst.CURVE_STRATEGIES[-1:]
made = rst.train_streaming_curves(replica_mesh(), seeds=[0], steps=rst.HELDOUT_EVERY,
                                  strategies=last, lr_grid=(1e-3,))  # the baseline's, kept
assert [c.strategy for c in made.curves] == [rst.BASELINE, mapping["streaming_diloco"]]
"""
# the cluster's plans, each program built and run once (the cluster times them): the training
# and own-work rows, the collectives' training steps, the DiLoCo rounds of every method
RENAMED_CLUSTER = RENAMED + """
import jax
import numpy as np
from jax.sharding import Mesh

from course_utils.collectives.overlap import AXES
from course_utils.tools.cluster import diloco_rounds as dr
from course_utils.tools.cluster.collectives import measure_collectives
from course_utils.tools.cluster.diloco import DILOCO_PLANS, methods, parameters
from course_utils.tools.cluster.training import TRAINING_PLANS, measure_own_work, measure_training
from course_utils.training.part_four import COMPRESSED, PART_FOUR_ROWS
from course_utils.training.strategies import DATA_PARALLEL, HSDP, saved_in


def once(fn, *args):
    jax.block_until_ready(fn(*args))
    return 0.0, None


full = {{**TRAINING_PLANS["full"], "batch_sizes": (32,)}}
assert [r["strategy"] for r in measure_training(full, once)] == [r.name for r in PART_FOUR_ROWS]
assert [r["strategy"] for r in measure_own_work(full, once)] == [DATA_PARALLEL, *COMPRESSED]
quick = TRAINING_PLANS["quick"]["strategies"]
assert quick == (DATA_PARALLEL, "accumulation", HSDP) == (mapping["data_parallel"],
                                                          "accumulation", mapping["hsdp"])
assert measure_collectives({{"sizes": [2**10], "buckets": (2, 2**10)}}, once)["training"]
plan = DILOCO_PLANS["quick"]
assert [m.name for m in methods(plan)] == list(saved_in("streaming.json", "curve"))
lay = dr.layout(Mesh(np.array(jax.devices()).reshape(2, 2), AXES), 8, parameters(plan, 2))
for m in methods(plan):
    dr.run_round(dr.rounds(lay, m), lay, m, 2 * m.fragments)
"""


@pytest.fixture(scope="session")
def renamed(tmp_path_factory):
    """``(root, mapping)``: one renamed copy of the package for the session."""
    from strategy_names import renamed_copy

    root = tmp_path_factory.mktemp("renamed")
    return root, renamed_copy(SPECS, root)


@pytest.mark.parametrize("code", [RENAMED_READERS, RENAMED_PLANS, RENAMED_CLUSTER],
                         ids=["readers and figures", "plans", "cluster plans"])
def test_renamed_strategies_still_read_through_the_registry(renamed, code):
    import subprocess
    import sys

    from course_utils.training.part_four import PART_FOUR_ROWS

    root, mapping = renamed
    code = code.format(root=str(root), mapping=mapping,
                       strategies=[r.strategy for r in PART_FOUR_ROWS])
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                          text=True, env={"PYTHONPATH": str(root), "JAX_PLATFORMS": "cpu"},
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
