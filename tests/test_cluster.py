"""course cluster: hosts as network namespaces. Every exit path removes every namespace, link
and file it made: success, a dead process, a hung one (the time limit), Ctrl-C and SIGTERM.
Nothing here asserts a time; the measured figures are the command's output, not a test's."""

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from terminal import as_from_a_terminal

from course_utils import validate_figure_data
from course_utils.models.cost_model import Topology
from course_utils.models.links import BUCKET_MS, FRAME_SHARE, bucket_bytes, rate_bytes_per_s
from course_utils.problems.classification import PART_FOUR_MLP, padded_size
from course_utils.results.cluster import (
    ClusterResults,
    ClusterRun,
    ClusterSetup,
    figure_data,
    goals,
    load_cluster_results,
    saved_cluster_results,
    summary_lines,
)
from course_utils.results.links import LinkResults
from course_utils.results.meta import Machine, RunMeta
from course_utils.results.overlap import OverlapResults, saved_overlap_results
from course_utils.results.overlap import rates as overlap_rates
from course_utils.results.records import from_json, load, to_json
from course_utils.results.training import TrainingResults
from course_utils.tools.cli import main
from course_utils.tools.cluster.netns import (
    Cluster,
    check_can_run,
    host_command,
    leftovers,
    teardown,
)
from course_utils.tools.cluster.overlap import OVERLAP_PLANS
from course_utils.tools.cluster.training import TRAINING_PLANS
from course_utils.training.traffic import strategy_traffic

CAN_RUN = check_can_run() is None


def needs_root(test):
    """A test that builds hosts as network namespaces: root only, and end to end (``-m e2e``)."""
    skip = pytest.mark.skipif(not CAN_RUN, reason="needs root and iproute2 (CI runs as root)")
    return pytest.mark.e2e(skip(test))


COURSE = [sys.executable, "-m", "course_utils.tools.cli", "cluster"]
SMALL = ["--hosts", "2", "--devices-per-host", "1", "--plan", "quick"]
# `course cluster` whose last host dies or hangs: FAULTY + ["die" | "hang", *arguments]
FAULTY = [sys.executable, str(Path(__file__).with_name("cluster_fault.py"))]


def _cluster(tmp_path, *extra, fault=None, timeout=240):
    command = COURSE if fault is None else [*FAULTY, fault]
    return subprocess.run([*command, *SMALL, "--out", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=timeout)


@needs_root
def test_a_run_writes_its_results_and_leaves_nothing(tmp_path):
    # the default shape (2 hosts of 2 devices), as a student runs it
    done = subprocess.run([*COURSE, "--plan", "quick", "--link-rate", "200mbit,1gbit",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads((tmp_path / "cluster.json").read_text())
    assert to_json(load_cluster_results(tmp_path / "cluster.json")) == results
    assert (results["cluster"]["hosts"], results["cluster"]["devices_per_host"]) == (2, 2)
    assert [r["link_rate"] for r in results["runs"]] == ["200mbit", "1gbit"]
    assert (tmp_path / "cluster.png").stat().st_size > 0
    assert "goal hierarchical speed-up" in done.stdout
    for run in results["runs"]:  # host 0's link counter saw the collectives' bytes
        for row in run["collectives"]:
            assert all(row["link_bytes"][k] > 0 for k in ("all_reduce", "all_gather")), row
        assert all(row["link_bytes"] > 0 for row in run["hierarchy"]), run["hierarchy"]
    assert "counted / ring model" in done.stdout
    assert leftovers() == []


@needs_root
def test_a_dead_process_is_reported_and_everything_removed(tmp_path):
    done = _cluster(tmp_path, fault="die")
    assert done.returncode == 1
    assert done.stderr.startswith("course cluster: error: host 1's process exited with status 3")
    assert leftovers() == []


@needs_root
def test_a_hung_process_meets_the_time_limit_and_everything_is_removed(tmp_path):
    done = _cluster(tmp_path, "--timeout", "6", fault="hang")
    assert done.returncode == 1 and "ran past --timeout 6 s" in done.stderr
    assert done.stderr.startswith("course cluster: error: ")
    assert leftovers() == []


@needs_root
@pytest.mark.parametrize("sig, status, extra", [
    (signal.SIGINT, 130, []), (signal.SIGTERM, 130, []),
    (signal.SIGINT, 130, ["--measure", "links", "--delay", "5"]),  # the delay line's relay too
], ids=["ctrl-c", "sigterm", "ctrl-c with a delay line"])
def test_ctrl_c_and_sigterm_remove_everything(tmp_path, sig, status, extra):
    popen = subprocess.Popen(as_from_a_terminal([*FAULTY, "hang", *SMALL, *extra, "--out",
                                                 str(tmp_path)]),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(name.endswith("h1") for name in leftovers()):
            assert time.monotonic() < deadline and popen.poll() is None
            time.sleep(0.1)
        time.sleep(0.5)  # the workers are starting
        popen.send_signal(sig)
        _, err = popen.communicate(timeout=60)
    finally:  # a run that outlives the test would hold the lock every later cluster test needs
        if popen.poll() is None:
            popen.kill()
            popen.wait()
            teardown()
    assert popen.returncode == status and "course cluster: error: interrupted" in err
    assert leftovers() == []


@needs_root
def test_a_host_process_runs_without_capabilities():
    probe = ("import subprocess\n"
             "caps = open('/proc/self/status').read().split('CapEff:')[1].split()[0]\n"
             "done = subprocess.run(['ip', 'link', 'add', 'd03probe', 'type', 'dummy'],\n"
             "                      capture_output=True, text=True)\n"
             "print(caps, done.returncode, done.stderr.strip())")
    with Cluster(2, None) as hosts:
        done = subprocess.run(host_command(hosts[1], [sys.executable, "-c", probe]),
                              capture_output=True, text=True, timeout=60)
    caps, status, why = done.stdout.split(maxsplit=2)
    assert int(caps, 16) == 0 and status != "0" and "not permitted" in why
    assert leftovers() == []


PROBE_SERVER = ("import socket\n"
                "with socket.create_server(('10.77.0.2', 47400)) as s:\n"
                "    s.accept()[0].recv(1)\n")
PROBE_CLIENT = ("import socket, time\n"
                "for _ in range(100):\n"
                "    try:\n"
                "        c = socket.create_connection(('10.77.0.2', 47400), timeout=5); break\n"
                "    except OSError:\n"
                "        time.sleep(0.05)\n"
                "print(c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16)"
                ".rstrip(b'\\0').decode())\n"
                "c.send(b'x')\n")


@needs_root
@pytest.mark.parametrize("control", ["cubic", "reno"])
def test_tcp_between_hosts_uses_the_chosen_congestion_control(control):
    with Cluster(2, "1gbit", congestion_control=control) as hosts:
        server = subprocess.Popen(host_command(hosts[1], [sys.executable, "-c", PROBE_SERVER]))
        client = subprocess.run(host_command(hosts[0], [sys.executable, "-c", PROBE_CLIENT]),
                                capture_output=True, text=True, timeout=60)
        server.wait(timeout=60)
    assert client.stdout.strip() == control, client.stderr
    assert leftovers() == []


def test_a_congestion_control_the_kernel_lacks_is_refused_with_what_it_offers(
        monkeypatch, tmp_path):
    from course_utils.tools.cluster import netns

    offered = tmp_path / "available"
    offered.write_text("reno cubic\n")
    monkeypatch.setattr(netns, "AVAILABLE_CONTROLS", offered)
    assert netns.check_congestion_control("cubic") == "cubic"
    with pytest.raises(ValueError, match="does not offer TCP bbr.*reno, cubic.*--tcp"):
        netns.check_congestion_control("bbr")


def test_without_root_one_line_says_what_to_do(monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert main(["cluster"]) == 2
    out = capsys.readouterr().err.strip()
    assert out.count("\n") == 0 and "needs root" in out and "saved results" in out
    assert out.startswith("course cluster: error: ")


@needs_root
@pytest.mark.parametrize("argv, message", [
    (["--link-rate", "fast"], "--link-rate must look like 200mbit"),
    (["--hosts", "1"], "--hosts must be from 2 to 200"),
    (["--tcp", "vegas"], "--tcp must be one of reno, cubic, bbr"),
    (["--measure", "overlap", "--devices-per-host", "1"],
     "--measure overlap needs --devices-per-host 2"),
    (["--link-rate", "200mbit,unshaped"], "--link-rate unshaped is for --measure links"),
])
def test_bad_arguments_get_one_line(capsys, argv, message):
    assert main(["cluster", *argv]) == 2
    assert f"course cluster: error: {message}" in capsys.readouterr().err
    assert leftovers() == []


RUN_JSON = {
    "hosts": 2, "devices_per_host": 2, "link_rate": "200mbit", "tcp": "reno",
    "collectives": [{"bytes": b, "all_reduce": 1.5 * b / 25e6, "reduce_scatter": 0.75 * b / 25e6,
                     "all_gather": 0.75 * b / 25e6} for b in (2**20, 2**22)],
    "hierarchy": [{"bytes": b, "flat": 1.5 * b / 25e6, "hierarchical": b / 25e6}
                  for b in (2**20, 2**22)],
    "ring16": [{"bytes": b, "f32": 1.5 * b / 25e6, "u16": 0.75 * b / 25e6}
               for b in (2**20, 2**22)],
    "buckets": {"count": 64, "bytes": 1024, "separate": 0.2, "one_bucket": 0.002},
    "training": {"dp_step": 0.01, "local_step": 0.004, "averaging": 0.008, "local_steps": 8,
                 "local_sgd_step": 0.005},
}


RUN = from_json(ClusterRun, RUN_JSON)


def run_with(**changes) -> ClusterRun:
    """``RUN`` with some of its fields (as JSON) replaced."""
    return from_json(ClusterRun, {**RUN_JSON, **changes})


def test_a_run_that_follows_the_model_meets_every_goal():
    met = goals(RUN)
    assert all(g.met for g in met.values()), met
    assert met["hierarchical speed-up"].value == pytest.approx(1.5)
    lines = summary_lines(RUN)
    assert "4 MiB: all_reduce 251.7/251.7" in "\n".join(lines)
    results = ClusterResults(meta=RunMeta("course cluster", Machine("3.11", "0.10.2", "0.10.2"),
                                          1.0),
                             cluster=ClusterSetup(2, 2, "quick", "reno", "bbr"),
                             runs=(RUN, replace(RUN, link_rate="1gbit")))
    data = figure_data(results)
    validate_figure_data(data)
    assert len(data["panels"]) == 4
    models = [s for s in data["panels"][0]["series"] if s.get("style") == "model"]
    assert [s.get("label") for s in models] == [
        "link model: all_reduce", "link model: reduce_scatter = all_gather"]  # in the legend
    assert data["panels"][3]["series"][1]["y"] == [1.5, 1.5]  # the link model's speed-up


def test_the_rates_are_fitted_from_the_counted_bytes_when_a_run_has_them():
    # the reduce-scatter sends 4/3 of the ring model's bytes, all at the configured rate
    sent = {"all_reduce": 1.5, "reduce_scatter": 1.0, "all_gather": 0.75}
    rows = [{**row, "reduce_scatter": row["bytes"] / 25e6,
             "link_bytes": {k: f * row["bytes"] for k, f in sent.items()}}
            for row in RUN_JSON["collectives"]]
    from course_utils.results.cluster import counted_against_model, fits

    fitted = fits(run_with(collectives=rows))
    assert fitted["reduce_scatter"]["gap"] == pytest.approx(0, abs=1e-9)
    assert fitted["reduce_scatter"]["model_gap"] == pytest.approx(-0.25)
    assert fits(RUN)["reduce_scatter"]["counted"] is False
    counts = counted_against_model(run_with(collectives=rows))
    assert counts["reduce_scatter"]["counted"] / counts["reduce_scatter"]["model"] == (
        pytest.approx(4 / 3))
    assert counted_against_model(RUN) is None
    two_level = [{**row, "link_bytes": row["bytes"]} for row in RUN_JSON["hierarchy"]]
    counts = counted_against_model(run_with(collectives=rows, hierarchy=two_level))
    assert counts["hierarchical"] == {"counted": 4 * 2**20, "model": 4 * 2**20}
    text = "\n".join(summary_lines(run_with(collectives=rows)))
    assert "reduce_scatter 4.00/3.00 MiB (1.33)" in text and "reduce_scatter -25.0%" in text


@pytest.mark.parametrize("shape, hosts, devices, tcp", [
    ("2x2", 2, 2, "reno"), ("2x4", 2, 4, "reno"), ("2x2_bbr", 2, 2, "bbr")])
def test_the_saved_runs_are_full_plans_that_step_17_can_read(shape, hosts, devices, tcp):
    from course_utils.tools.cluster.collectives import COLLECTIVES_PLANS as PLANS

    saved = saved_cluster_results(shape)
    setup = saved.cluster
    assert (setup.hosts, setup.devices_per_host, setup.plan) == (hosts, devices, "full")
    assert setup.tcp == tcp and {"jax", "jaxlib", "python"} <= set(to_json(saved.meta.machine))
    assert saved.meta.command == "course cluster --measure collectives"
    assert all(run.tcp == tcp for run in saved.runs)
    for run in saved.runs:
        for key in ("collectives", "hierarchy", "ring16"):
            assert [r.bytes for r in getattr(run, key)] == PLANS["full"]["sizes"]
        assert run.buckets.count == PLANS["full"]["buckets"][0]
        assert run.training.local_sgd_step > 0
        rate_bytes_per_s(run.link_rate)
    assert "200mbit" in [r.link_rate for r in saved.runs]
    validate_figure_data(figure_data(saved))
    text = (Path(__file__).parents[1] / f"course_utils/saved/cluster_{shape}.json").read_text()
    assert to_json(saved) == json.loads(text)  # the records give back the file
    assert json.dumps(to_json(saved), indent=1) == text  # byte for byte
    assert setup.default_tcp == "bbr"  # the machine that made them defaulted to BBR


def test_the_machine_default_congestion_control_is_read_from_proc(tmp_path):
    from course_utils.tools.cluster.netns import default_congestion_control

    path = tmp_path / "tcp_congestion_control"
    path.write_text("cubic\n")
    assert default_congestion_control(path) == "cubic"
    assert default_congestion_control(tmp_path / "missing") == "unknown"


def test_a_file_that_is_not_a_cluster_run_says_so(tmp_path):
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps({**to_json(saved_cluster_results("2x2")), "runs": [RUN_JSON, {}]}))
    with pytest.raises(ValueError, match=r"cluster.json: runs\[1\].hosts: missing; is it a"):
        load_cluster_results(path)



def test_the_link_counter_is_read_once_it_stops_moving(monkeypatch):
    from course_utils.tools.cluster import timing

    readings = iter([100, 150, 180, 180, 999])  # bytes still draining, then still
    monkeypatch.setattr(timing, "sent_bytes", lambda: next(readings))
    assert timing.settled_sent_bytes(every_s=0) == 180
    monkeypatch.setattr(timing, "sent_bytes", lambda: None)  # not inside a host
    assert timing.settled_sent_bytes(every_s=0) is None
    rising = iter(range(10**6))
    monkeypatch.setattr(timing, "sent_bytes", lambda: next(rising))
    assert 0 < timing.settled_sent_bytes(limit_s=0.05, every_s=0.001) < 10**6


ROW_KEYS = {"strategy", "link_rate", "batch_size", "step_s", "compute_s", "communication_s",
            "link_bytes"}


@needs_root
def test_the_quick_links_plan_holds_the_rate_with_the_bucket_rule_and_leaves_nothing(tmp_path):
    done = _cluster(tmp_path, "--measure", "links", "--link-rate", "50mbit,unshaped")
    assert done.returncode == 0, done.stdout + done.stderr
    results = load(LinkResults, tmp_path / "links.json")
    assert results.bucket_bytes == {"50mbit": bucket_bytes("50mbit")}
    assert results.cluster.bucket_ms == BUCKET_MS
    assert results.held("50mbit")  # every host within 5 % of 6.25 MB/s, the ring's pattern
    assert results.ceiling() > 10 * rate_bytes_per_s("50mbit")
    # what the next host received: the payload share of the frames, less the acknowledgements
    for row in results.rows:
        if row.link_rate == "50mbit":
            assert 0.85 < row.payload_bytes_per_s / row.wire_bytes_per_s < FRAME_SHARE + 0.01
    assert leftovers() == []


@needs_root
def test_each_hosts_link_is_shaped_with_the_one_bucket_rule():
    with Cluster(2, "50mbit") as hosts:
        shown = subprocess.run(["ip", "netns", "exec", hosts[1].namespace, "tc", "qdisc", "show",
                                "dev", "eth0"], capture_output=True, text=True).stdout
    assert "rate 50Mbit" in shown and f"burst {bucket_bytes('50mbit')}b" in shown, shown


@needs_root
def test_the_quick_training_plan_writes_training_json_and_leaves_nothing(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "course_utils.tools.cli", "cluster", "--measure", "training",
         "--hosts", "2", "--devices-per-host", "1", "--link-rate", "200mbit", "--plan", "quick",
         "--runs", "2", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "200mbit: done (run 2 of 2)" in done.stdout
    data = json.loads((tmp_path / "training.json").read_text())
    results = from_json(TrainingResults, data, "training.json")
    assert results.meta.runs == 2  # the median of the two runs, cell by cell
    assert results.meta.command_line.startswith("course cluster --measure training --hosts 2")
    plan = TRAINING_PLANS["quick"]
    assert {(r.strategy, r.batch_size) for r in results.rows} == {
        (s, b) for s in plan["strategies"] for b in plan["batch_sizes"]}
    assert all(set(row) == ROW_KEYS for row in data["rows"])
    assert results.cluster.hosts == 2 and results.meta.machine.cores > 0
    assert results.cluster.default_tcp and results.meta.command.endswith("--measure training")
    # host 0's link counter saw what the step model says one data-parallel step sends, and up
    # to 200 Mbit/s each frame's headers and the acknowledgements too (step 17: about 1.07)
    dp = strategy_traffic("data_parallel", padded_size(2, PART_FOUR_MLP), Topology(2, 1))
    for row in results.rows:
        assert 1.0 <= row.link_bytes / dp.link_bytes <= 1.08, row
        assert row.step_s == pytest.approx(row.compute_s + row.communication_s)
    assert [r.strategy for r in results.own_work] == ["data_parallel"]  # no scheme in quick
    assert results.flops_per_s > 0
    for curve in results.curves:
        assert len(curve.heldout_loss) == plan["steps"][curve.batch_size] // plan["every"]
        assert curve.heldout_loss[-1][1] < curve.heldout_loss[0][1]
    assert leftovers() == []


@needs_root
def test_the_quick_overlap_plan_writes_overlap_json_and_leaves_nothing(tmp_path):
    done = subprocess.run(
        [*COURSE, "--measure", "overlap", "--hosts", "2", "--devices-per-host", "2",
         "--link-rate", "200mbit,1gbit", "--plan", "quick", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    results = from_json(OverlapResults, json.loads((tmp_path / "overlap.json").read_text()))
    tower = OVERLAP_PLANS["quick"]["tower"]
    assert [(r.link_rate, r.run) for r in results.backward] == [("200mbit", 0), ("1gbit", 0)]
    assert [(r.link_rate, r.run) for r in results.matmul] == [("200mbit", 0), ("1gbit", 0)]
    for row in results.backward:
        # each host sends every bucket once: gloo's two-rank all-reduce, plus TCP's framing
        assert row.link_bytes == pytest.approx(tower.layers * tower.bucket_bytes, rel=0.1)
    assert (results.sizes.layers, results.meta.runs, results.meta.machine.cores) == (
        tower.layers, 1, os.cpu_count())
    assert leftovers() == []


def test_the_saved_overlap_runs_are_three_full_plans_of_the_current_code():
    results = saved_overlap_results()
    plan, setup, sizes = OVERLAP_PLANS["full"], results.cluster, results.sizes
    assert (setup.plan, results.meta.runs, setup.hosts, setup.devices_per_host) == (
        "full", 3, 2, 2)
    assert (sizes.width, sizes.layers, sizes.rows) == (
        plan["tower"].width, plan["tower"].layers, plan["tower"].rows)
    assert tuple(sizes.matmul) == plan["matmul"]
    for rows in (results.backward, results.matmul):
        assert sorted(r.run for r in rows) == sorted(list(range(3)) * len(overlap_rates(results)))
    for row in results.backward:
        assert row.link_bytes == pytest.approx(
            plan["tower"].layers * plan["tower"].bucket_bytes, rel=0.1)


def test_the_saved_links_run_holds_every_rate_the_saved_runs_use_below_its_ceiling():
    from course_utils.results.diloco_cluster import rates as diloco_rates
    from course_utils.results.diloco_cluster import saved_diloco_cluster
    from course_utils.results.links import UNSHAPED, saved_link_results
    from course_utils.results.training import saved_training_results

    links = saved_link_results()
    used = ({r.link_rate for r in saved_training_results().rows}
            | set(overlap_rates(saved_overlap_results()))
            | set(diloco_rates(saved_diloco_cluster()))
            | {run.link_rate for shape in ("2x2", "2x4", "2x2_bbr")
               for run in saved_cluster_results(shape).runs})
    assert used <= set(links.rates()) - {UNSHAPED}
    assert links.meta.runs == 3 and links.cluster.bucket_ms == BUCKET_MS
    for rate in used:
        assert links.bucket_bytes[rate] == bucket_bytes(rate)
        assert links.below_ceiling(rate) and links.held(rate), rate


def test_a_step_or_sync_that_fits_in_the_bucket_says_the_link_did_not_limit_it():
    from course_utils.results.diloco_cluster import SyncRow
    from course_utils.results.training import TrainingRow

    topk = 262_144  # step 20's top-k step: more than 2 ms of bytes at 50 Mbit/s, less at 10 Gbit/s
    assert TrainingRow("topk_ef", "50mbit", 32, 0.1, 0.01, 0.09, topk).link_limited
    assert not TrainingRow("topk_ef", "10gbit", 32, 0.1, 0.01, 0.09, topk).link_limited
    assert TrainingRow("topk_ef", "50mbit", 32, 0.1, 0.01, 0.09).link_limited is None
    assert not SyncRow("streaming_diloco", "1gbit", 0, 0.01, bucket_bytes("1gbit")).link_limited
    assert SyncRow("streaming_diloco", "1gbit", 0, 0.01, bucket_bytes("1gbit") + 1).link_limited
    # a 64 KiB all-reduce on 2 × 2 sends 96 KiB over a host's link: above 2 ms at 200 Mbit/s
    assert RUN.link_limited("all_reduce", 2**16)
    assert not run_with(link_rate="10gbit").link_limited("all_reduce", 2**16)
