"""The cluster's measurements, one description each in one registry: what the command, each
host's process and ``--measure`` read, and each measurement's record assembled from host 0's
reports of several runs (``--runs``), on fake reports (no cluster runs here)."""

import ast
import itertools
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from course_utils.results.cluster import saved_cluster_results
from course_utils.results.records import to_json
from course_utils.results.training import HeldoutCurve, TrainingResults
from course_utils.tools.cli import main
from course_utils.tools.cluster import training
from course_utils.tools.cluster.measurements import (
    MEASUREMENTS,
    PLAN_NAMES,
    HostRun,
    Setup,
    measurement,
    median_of_records,
)
from course_utils.tools.cluster.worker import _parse

PACKAGE = Path(__file__).parents[1] / "course_utils"
SETUP = Setup(hosts=2, devices_per_host=2, plan="quick", tcp="reno", runs=2,
              started=time.monotonic())


@pytest.mark.parametrize("name", MEASUREMENTS)
def test_each_registered_measurement_is_one_description_with_every_plan(name):
    chosen = measurement(name)
    assert chosen.name == name
    assert set(chosen.plans) == set(PLAN_NAMES)
    assert all(plan["repeats"] >= 1 for plan in chosen.plans.values())
    assert chosen.output.endswith(".json")
    assert MEASUREMENTS[name].where.endswith(":MEASUREMENT")  # one role name in each module
    assert name in _parse(["--process-id", "0", "--processes", "2", "--devices", "1",
                           "--coordinator", "x:1", "--measure", name]).measure


def test_the_measurements_write_different_files():
    outputs = [measurement(name).output for name in MEASUREMENTS]
    assert len(set(outputs)) == len(outputs)


def test_an_unknown_measurement_gets_one_line_listing_the_known_ones(capsys):
    with pytest.raises(ValueError, match="no cluster measurement is called 'jitter'") as error:
        measurement("jitter")
    assert "\n" not in str(error.value)
    assert all(name in str(error.value) for name in MEASUREMENTS)
    with pytest.raises(SystemExit):
        main(["cluster", "--measure", "jitter"])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("course cluster: error: argument --measure: invalid choice: 'jitter'")
    assert all(repr(name) in line for name in MEASUREMENTS)


def test_the_median_of_records_is_taken_cell_by_cell_and_the_rest_must_agree():
    run = saved_cluster_results("2x2").runs[0]
    slower = replace(run, buckets=replace(run.buckets, separate=3 * run.buckets.separate))
    faster = replace(run, buckets=replace(run.buckets, separate=run.buckets.separate / 3))
    median = median_of_records([slower, run, faster])
    assert median == run
    assert median_of_records([run]) == run
    other = replace(run, buckets=replace(run.buckets, count=run.buckets.count + 1))
    with pytest.raises(ValueError, match=r"the runs differ at buckets.count \(64, 65\)"):
        median_of_records([run, other])


def _collectives_report(run, scale):
    """Host 0's report of ``run`` (a saved ``ClusterRun``) with every time times ``scale``."""
    report = {k: v for k, v in to_json(run).items()
              if k not in ("hosts", "devices_per_host", "link_rate", "tcp")}
    for key in ("collectives", "hierarchy", "ring16"):
        report[key] = [{k: v * scale if k not in ("bytes", "link_bytes") else v
                        for k, v in row.items()} for row in report[key]]
    return report


def test_collectives_over_two_runs_are_each_rate_s_median_cell_by_cell():
    run = saved_cluster_results("2x2").runs[0]
    hosts = [HostRun(r, rate, _collectives_report(run, scale))
             for r, scale in ((0, 1.0), (1, 3.0)) for rate in ("200mbit", "1gbit")]
    results = measurement("collectives").assemble(hosts, SETUP)
    assert [r.link_rate for r in results.runs] == ["200mbit", "1gbit"]
    row, saved = results.runs[0].collectives[0], run.collectives[0]
    assert row.all_reduce == pytest.approx(2 * saved.all_reduce)  # the median of 1× and 3×
    assert row.bytes == saved.bytes and row.link_bytes == saved.link_bytes
    assert results.runs[0].ring16[-1].u16 == pytest.approx(2 * run.ring16[-1].u16)
    assert results.runs[0].buckets == run.buckets  # the same in both runs
    cluster = results.cluster
    assert (cluster.hosts, cluster.plan, cluster.tcp) == (2, "quick", "reno")
    json.dumps(to_json(results))


def test_training_over_two_runs_is_the_median_of_the_runs_cell_by_cell(monkeypatch):
    curve = HeldoutCurve("data_parallel", 64, ((10, 0.5),))
    monkeypatch.setattr(training, "heldout_curves", lambda plan, p: [to_json(curve)])
    own = itertools.cycle([0.01, 0.03])  # each run's own work, measured in this process
    monkeypatch.setattr(training, "measure_own_work", lambda plan, timed: [
        {"strategy": "data_parallel", "batch_size": 64, "step_s": next(own)}])

    def report(step_s, flops):
        return {"rows": [{"strategy": "data_parallel", "batch_size": 64, "step_s": step_s,
                          "compute_s": 0.1, "communication_s": step_s - 0.1,
                          "link_bytes": 6.7e6}], "flops_per_s": flops}

    hosts = [HostRun(0, "200mbit", report(0.4, 1e9)), HostRun(0, "1gbit", report(0.2, 3e9)),
             HostRun(1, "200mbit", report(0.6, 2e9)), HostRun(1, "1gbit", report(0.3, 4e9))]
    results = measurement("training").assemble(hosts, SETUP)
    assert isinstance(results, TrainingResults) and results.meta.runs == 2
    assert [(r.link_rate, r.step_s) for r in results.rows] == [
        ("200mbit", pytest.approx(0.5)), ("1gbit", pytest.approx(0.25))]
    assert results.rows[0].communication_s == pytest.approx(0.4)
    assert results.flops_per_s == pytest.approx(2.5e9)  # each run's median over the rates
    assert results.own_work[0].step_s == pytest.approx(0.02)
    assert results.curves == (curve,)
    one = measurement("training").assemble(hosts[:2], replace(SETUP, runs=1))
    assert one.meta.runs == 1 and one.rows[0].step_s == 0.4  # one run: its own times


def test_overlap_over_two_runs_keeps_every_run_for_its_readers_median():
    times = {"compute_s": 1.0, "communication_s": 1.0, "serial_s": 2.0, "overlapped_s": 1.2,
             "same_device_s": 1.5, "one_program_s": 1.4, "link_bytes": 1e6}
    matmul = {"compute_s": 1.0, "shift_s": 0.5, "gathered_s": 1.6, "looped_s": 1.4,
              "by_hand_s": 1.2}
    hosts = [HostRun(r, rate, {"backward": times, "matmul": matmul})
             for r in range(2) for rate in ("200mbit", "1gbit")]
    results = measurement("overlap").assemble(hosts, SETUP)
    assert [(r.link_rate, r.run) for r in results.backward] == [
        ("200mbit", 0), ("1gbit", 0), ("200mbit", 1), ("1gbit", 1)]
    assert results.meta.runs == 2 and len(results.matmul) == 4
    assert measurement("overlap").check(SETUP) is None
    assert "--devices-per-host 2" in measurement("overlap").check(replace(SETUP,
                                                                         devices_per_host=1))


def _imports(path):
    """``(module imported from, name)`` of every ``from course_utils… import name`` in ``path``."""
    return [(node.module, alias.name) for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("course_utils")
            for alias in node.names]


def test_no_module_of_the_package_imports_another_module_s_underscore_names():
    private = [(str(path.relative_to(PACKAGE)), module, name)
               for path in PACKAGE.rglob("*.py") for module, name in _imports(path)
               if name.startswith("_") and not name.startswith("__")]
    assert private == []


def test_the_cluster_modules_import_no_circle():
    cluster = {p.stem: p for p in (PACKAGE / "tools" / "cluster").glob("*.py")}
    prefix = "course_utils.tools.cluster."
    edges = {stem: {m.removeprefix(prefix) for m, _ in _imports(path)
                    if m.startswith(prefix)} | {n for m, n in _imports(path)
                                                if m == prefix[:-1]}
             for stem, path in cluster.items()}

    def reaches(start, goal, seen=()):
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, (*seen, nxt)))
                   for nxt in edges.get(start, ()))

    assert [stem for stem in edges if reaches(stem, stem)] == []
    assert "worker" not in edges["training"] | edges["overlap"] | edges["command"]
