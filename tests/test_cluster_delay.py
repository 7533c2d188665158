"""course cluster --delay: the delay line (netem's commands, built here since neither this machine
nor CI has netem; the TUN relay, run end to end as root), bad input before anything is built,
what the latency measurement reads, and nothing left behind, also after a killed parent. Nothing
here asserts a speed: the figures are the saved run's (docs/benchmarks.md)."""

import json
import signal
import subprocess
import time

import pytest
from test_cluster import COURSE, needs_root

from course_utils.models.links import rate_bytes_per_s
from course_utils.results.latency import (
    SAVED_COMMAND,
    LatencyResults,
    goals,
    latency_lines,
    round_trip_held,
    saved_latency_results,
)
from course_utils.results.links import LinkResults, saved_link_results
from course_utils.results.records import from_json, load, load_saved, to_json
from course_utils.tools.cli import main
from course_utils.tools.cluster import delay, netns
from course_utils.tools.cluster.command import _above_ceiling
from course_utils.tools.cluster.netns import leftovers, teardown


@pytest.mark.parametrize("rate", ["50mbit", "1gbit", None])
@pytest.mark.parametrize("delay_ms", [1.0, 50.0])
def test_netem_holds_the_delay_with_tbf_under_it_and_room_for_the_packets_in_flight(rate, delay_ms):
    commands = delay.netem_commands("d03h0", "eth0", delay_ms, rate, 50000)
    assert all(c[:4] == ["ip", "netns", "exec", "d03h0"] for c in commands)
    netem = commands[0][4:]
    assert netem[:8] == ["tc", "qdisc", "add", "dev", "eth0", "root", "handle", "1:"]
    assert netem[8:11] == ["netem", "delay", f"{delay_ms}ms"]
    packets_in_flight = (rate_bytes_per_s(rate) if rate else 1.25e9) * delay_ms / 1e3 / 1500
    assert int(netem[netem.index("limit") + 1]) >= 2 * packets_in_flight
    if rate is None:
        assert len(commands) == 1
    else:  # the rate: tbf as netem's child, with the one bucket rule's burst
        assert commands[1][4:] == ["tc", "qdisc", "add", "dev", "eth0", "parent", "1:1",
                                   "handle", "10:", "tbf", "rate", rate, "burst", "50000",
                                   "latency", "500ms"]


@pytest.mark.parametrize("rate", ["10mbit", "200mbit", "1gbit", None])
@pytest.mark.parametrize("delay_ms", [1.0, 25.0, 50.0])
def test_tcp_may_grow_its_buffers_to_twice_the_bandwidth_delay_product(rate, delay_ms):
    buffer = delay.socket_buffer_bytes(rate, delay_ms)
    bdp = (rate_bytes_per_s(rate) if rate else 1.25e9) * 2 * delay_ms / 1e3
    assert buffer >= 2 * bdp and buffer >= delay.MIN_SOCKET_BUFFER
    for command in delay.sysctl_commands("d03h1", buffer):
        assert command[:4] == ["ip", "netns", "exec", "d03h1"]
        assert command[-1].endswith(f" {buffer}")


def test_the_line_is_netem_where_the_kernel_has_it_else_the_relay_else_one_line(monkeypatch,
                                                                              tmp_path):
    monkeypatch.setattr(delay, "has_netem", lambda namespace: True)
    assert delay.choose_line("d03probe", tmp_path / "no-tun") == "netem"
    monkeypatch.setattr(delay, "has_netem", lambda namespace: False)
    (tmp_path / "tun").touch()
    assert delay.choose_line("d03probe", tmp_path / "tun") == "tun"
    with pytest.raises(ValueError, match="needs the netem qdisc .* or .*no-tun.*neither"):
        delay.choose_line("d03probe", tmp_path / "no-tun")


@pytest.mark.parametrize("argv, message", [
    (["--measure", "links", "--delay", "-5"], "--delay must be above 0 ms"),
    (["--measure", "links", "--delay", "0"], "--delay must be above 0 ms"),
    (["--measure", "links", "--delay", "soon"], "--delay must be a one-way delay in millisec"),
    (["--measure", "links", "--delay", "5,10"], "--measure links takes one delay at a time"),
    (["--delay", "5"], "--measure collectives cannot use a delay line; --delay is for"),
])
def test_bad_delays_get_one_line_before_anything_is_built(monkeypatch, capsys, argv, message):
    built = []
    monkeypatch.setattr(netns.Cluster, "__enter__", lambda self: built.append(self))
    assert main(["cluster", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("course cluster: error: "), err
    assert message in err
    assert built == []


def test_no_netem_and_no_tun_is_one_line_before_anything_is_built(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(netns, "check_can_run", lambda: None)
    monkeypatch.setattr(delay, "has_netem", lambda namespace: False)
    monkeypatch.setattr(delay, "TUN", tmp_path / "no-tun")
    built = []
    monkeypatch.setattr(netns.Cluster, "__enter__", lambda self: built.append(self))
    assert main(["cluster", "--measure", "latency", "--delay", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs the netem qdisc" in err and built == []


def test_a_rate_above_the_relay_s_ceiling_is_named_in_a_warning():
    above = f"{rate_bytes_per_s(delay.TUN_CEILING) * 8 / 1e6 * 2:g}mbit"
    warned = _above_ceiling("tun", ["10mbit", above, "unshaped"])
    assert len(warned) == 2 and all(delay.TUN_CEILING in w for w in warned)
    assert above in warned[0] and _above_ceiling("netem", [above]) == []


def _row(rate, delay_ms, run, step_alpha_ms):
    sizes = (64, 16384, 262144)
    per_byte_ms = 1e3 / rate_bytes_per_s(rate)
    tcp = {"window": 65536, "window_seen": 131070, "connections": 4, "sync_bytes": 2**20,
           "idle_gap_s": 3.0, "warm_up_s": 1.0, "one_clamped": 1e6, "several_clamped": 4e6,
           "one_open": 5e6, "fresh_s": [0.3], "warm_s": [0.1], "idle_s": [0.25]}
    return {"link_rate": rate, "delay_ms": delay_ms, "run": run,
            "udp_round_trips_ms": [2 * delay_ms + 0.1 * k for k in range(5)],
            "pingpong_ms": 2 * delay_ms + 0.2, "sizes": list(sizes),
            "step_ms": [step_alpha_ms + s * per_byte_ms for s in sizes],
            "allreduce_sizes": [16384], "allreduce_ms": {"ring": [7.0], "doubling": [5.0],
                                                         "psum": [7.0], "swap": [3.0]},
            "tcp": tcp}


def _results(rows):
    saved = saved_link_results()  # any saved run's meta and cluster
    return from_json(LatencyResults, {"meta": to_json(saved.meta),
                                      "cluster": to_json(saved.cluster), "rows": rows})


def test_the_readers_fit_alpha_per_message_step_and_its_slope_against_the_delay():
    # a step that waits for the receiver's ready notice: two one-way delays and 0.3 ms
    rows = [_row("200mbit", d, run, 2 * d + 0.3 + 0.01 * run) for d in (1.0, 5.0, 25.0)
            for run in range(3)]
    results = _results(rows)
    assert results.alpha_ms("200mbit", 25.0).median == pytest.approx(50.31, abs=1e-6)
    assert results.alpha_slope("200mbit") == pytest.approx(2.0)
    assert results.pingpong_slope("200mbit") == pytest.approx(1.0)
    named = dict(goals(results))
    assert named["round trip at 200mbit, 25 ms"].met
    assert named["α slope at 200mbit"].met  # against gloo's two delays per step
    assert "α" in "\n".join(latency_lines(results))
    one_delay = _results([_row("200mbit", 5.0, 0, 10.3)])
    with pytest.raises(ValueError, match="at least two delays"):
        one_delay.alpha_slope("200mbit")


def test_a_round_trip_is_held_within_a_tenth_and_a_third_of_a_millisecond():
    assert round_trip_held(2.5, 1.0) and not round_trip_held(2.51, 1.0)
    assert round_trip_held(109.7, 50.0) and not round_trip_held(89.6, 50.0)


def test_host_0_s_reports_of_every_run_and_delay_become_one_record():
    from course_utils.tools.cluster.latency import assemble_latency
    from course_utils.tools.cluster.measurements import HostRun, Setup

    setup = Setup(hosts=2, devices_per_host=1, plan="quick", tcp="reno", runs=2,
                  started=time.monotonic(), delays=(1.0, 25.0), line="tun")
    runs = [HostRun(run, "200mbit", {k: v for k, v in _row("200mbit", d, run, 2 * d).items()
                                     if k not in ("link_rate", "delay_ms", "run")}, d)
            for run in range(2) for d in (1.0, 25.0)]
    results = assemble_latency(runs, setup)
    assert results.cluster.delay_line == "tun" and results.cluster.delay_ms is None
    assert results.delays() == [1.0, 25.0] and len(results.rows) == 4
    assert from_json(LatencyResults, to_json(results)) == results


def test_the_saved_runs_carry_the_line_the_delays_and_their_command():
    latency = saved_latency_results()
    assert latency.cluster.delay_line in delay.LINES and latency.meta.runs == 3
    assert SAVED_COMMAND.removeprefix("sudo ") in latency.meta.command_line  # the regenerate hint
    assert latency.meta.commit and not latency.meta.dirty
    assert sorted(latency.delays()) == [1.0, 5.0, 25.0, 50.0] and len(latency.rates()) == 2
    assert latency.cluster.hosts == 4  # recursive doubling in two steps
    links = load_saved(LinkResults, "links_delay.json", "course cluster --measure links")
    assert links.cluster.delay_line == latency.cluster.delay_line and links.cluster.delay_ms
    assert links.meta.runs == 3 and links.cluster.hosts == 4
    # the stated ceiling: every rate up to it held with every link busy; the next one measured
    # above it not
    above = [r for r in links.rates()
             if rate_bytes_per_s(r) > rate_bytes_per_s(delay.TUN_CEILING)]
    assert above and not links.held(above[0])
    assert all(links.held(r) for r in links.rates()
               if rate_bytes_per_s(r) <= rate_bytes_per_s(delay.TUN_CEILING))
    assert rate_bytes_per_s(delay.TUN_CEILING) >= rate_bytes_per_s("200mbit")  # the goal


@needs_root
def test_the_quick_latency_plan_delays_every_message_and_leaves_nothing(tmp_path):
    done = subprocess.run([*COURSE, "--measure", "latency", "--hosts", "2",
                           "--devices-per-host", "1", "--delay", "1,25", "--link-rate",
                           "200mbit", "--plan", "quick", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    results = load(LatencyResults, tmp_path / "latency.json")
    assert to_json(results) == json.loads((tmp_path / "latency.json").read_text())
    assert results.cluster.delay_line in delay.LINES and results.delays() == [1.0, 25.0]
    for delay_ms in (1.0, 25.0):  # the line holds each message at least the delay, each way
        assert min(results.rows[results.delays().index(delay_ms)].udp_round_trips_ms) \
            >= 2 * delay_ms
        assert results.pingpong_ms("200mbit", delay_ms).median >= 2 * delay_ms
    assert "goal round trip at 200mbit, 25 ms" in done.stdout
    row = results.rows[0]  # the all-reduces at every size, and the connection's figures
    assert set(row.allreduce_ms) == {"ring", "doubling", "psum", "swap"}
    assert all(len(ms) == len(row.allreduce_sizes) and min(ms) > 0
               for ms in row.allreduce_ms.values())
    assert row.tcp.window_seen >= row.tcp.window and row.tcp.one_open > 0
    assert len(row.tcp.fresh_s) == len(row.tcp.idle_s) > 0
    assert "crossover" in done.stdout and "fresh sync" in done.stdout
    assert leftovers() == []


@needs_root
def test_a_killed_command_leaves_nothing_its_guard_removes_the_hosts_and_the_relay(tmp_path):
    popen = subprocess.Popen([*COURSE, "--measure", "links", "--hosts", "2",
                              "--devices-per-host", "1", "--delay", "25", "--plan", "full",
                              "--out", str(tmp_path)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(x.startswith("relay") for x in leftovers()) or not any(
                x.endswith("h1") for x in leftovers()):
            assert time.monotonic() < deadline and popen.poll() is None
            time.sleep(0.1)
        popen.send_signal(signal.SIGKILL)
        popen.wait(timeout=30)
        deadline = time.monotonic() + 60
        while leftovers() and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        if popen.poll() is None:
            popen.kill()
        left = leftovers()
        teardown()  # a later cluster test needs the lock and a clean machine
    assert left == []
    assert popen.returncode == -signal.SIGKILL
