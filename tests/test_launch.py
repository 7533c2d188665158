"""``course launch``: real worker processes on loopback, and each way a launch can fail."""

import os
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from terminal import as_from_a_terminal

from course_utils import data_mesh, placements, shard_error
from course_utils.tools.errors import CourseError
from course_utils.tools.launch.command import (
    Worker,
    free_port,
    stop_workers,
    wait_for_workers,
)

COURSE = [sys.executable, "-m", "course_utils.tools.cli", "launch"]
TWO_BY_TWO = ["--processes", "2", "--devices-per-process", "2"]


def course_launch(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([*COURSE, *args], capture_output=True, text=True, timeout=timeout)


def workers_on(port: int) -> list[int]:
    """Live processes running ``course_utils.tools.launch.worker`` with ``--port port``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").split("\0")
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if "course_utils.tools.launch.worker" in argv and f"{port}" in argv and state != "Z":
            found.append(int(pid))
    return found


def one_line_error(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def test_two_processes_of_two_devices_pass_every_check():
    done = course_launch(*TWO_BY_TWO)
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "2 processes × 2 CPU devices = 4 global devices" in out
    assert "coordinator 127.0.0.1:" in out and "gloo on 127.0.0.1" in out
    for kernel in (
        "all_reduce_gradient",
        "reduce_scatter_gradient",
        "all_gather_shards",
        "sharded_momentum_step",
    ):
        row = next(line for line in out.splitlines() if line.strip().startswith(kernel))
        assert row.split()[2] == "ok", out
    assert "all checks passed: 20 shards" in out and "wall time" in out


WRONG_PROGRAM = """
import jax
from course_utils.devices.multiprocess import global_inputs as right, join_runtime as join

def global_inputs(mesh):
    arrays = right(mesh)
    return {**arrays, "w": arrays["w"] + 1}  # not the problem's weights
"""


OWN_CHECK = """
from course_utils import all_gather_shards, reduce_scatter_gradient

def run_kernels(mesh, arrays):
    g = reduce_scatter_gradient(mesh)(arrays["x"], arrays["y"], arrays["w"])
    return {"all_gather_shards": (all_gather_shards(mesh), (g,), all_gather_shards(mesh)(g))}

def check_shards(mesh, results):
    return {"all_gather_shards": {"max_error": 7.0, "passed": False, "shards_checked": 2}}
"""


def test_a_program_file_replaces_the_join_and_the_inputs(tmp_path, course):
    # notebook 09 writes its own per-process program; every process must use it, checks included
    wrong = tmp_path / "wrong.py"
    wrong.write_text(WRONG_PROGRAM)
    status, output = course("launch", *TWO_BY_TWO, "--program", str(wrong))
    assert status == 1 and "wrong values on this process's shards" in output, output
    own = tmp_path / "own_check.py"  # the program's own kernels and check are the ones used
    own.write_text(WRONG_PROGRAM.replace("+ 1", "") + OWN_CHECK)
    status, output = course("launch", *TWO_BY_TWO, "--program", str(own))
    assert status == 1 and "all_gather_shards 7.00e+00" in output, output
    half = tmp_path / "half.py"
    half.write_text(WRONG_PROGRAM + "def run_kernels(mesh, arrays):\n    return {}\n")
    status, output = course("launch", *TWO_BY_TWO, "--program", str(half))
    assert status == 1 and "both run_kernels and check_shards, or neither" in output, output
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    status, output = course("launch", *TWO_BY_TWO, "--program", str(empty))
    assert status == 1 and "defines no function join or global_inputs" in output, output
    status, output = course("launch", *TWO_BY_TWO, "--program", str(tmp_path / "none.py"))
    assert status == 2 and "no such file" in output, output


def test_a_taken_port_is_named_and_nothing_starts(course):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        status, output = course("launch", *TWO_BY_TWO, "--port", str(port))
    assert status == 1 and len(output.strip().splitlines()) == 1
    assert f"port {port}" in output and "omit --port" in output
    assert not workers_on(port)


def test_a_dying_process_stops_the_launch_quickly(course):
    port = free_port()
    start = time.monotonic()
    status, output = course(
        "launch", *TWO_BY_TWO, "--port", str(port), "--timeout", "60", "--fail-rank", "1"
    )
    assert time.monotonic() - start < 60
    assert status == 1
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output, output
    assert output.startswith("course launch: error: process 1 failed") and "on purpose" in output
    assert not workers_on(port)


# a program whose processes join and then wait: a launch of it is still running when the test
# interrupts it, however fast the machine (the package's own check can finish first)
WAITING = """
import time

from course_utils.devices.multiprocess import global_inputs as _inputs
from course_utils.devices.multiprocess import join_runtime as join


def global_inputs(mesh):
    time.sleep(120)
    return _inputs(mesh)
"""


def test_interrupt_stops_the_workers_and_exits_130(tmp_path):
    port = free_port()
    program = tmp_path / "waiting.py"
    program.write_text(WAITING)
    launch = subprocess.Popen(
        as_from_a_terminal([*COURSE, *TWO_BY_TWO, "--port", str(port), "--program", str(program)]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while len(workers_on(port)) < 2 and launch.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    launch.send_signal(signal.SIGINT)
    _, err = launch.communicate(timeout=30)
    assert launch.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert not workers_on(port)


@pytest.mark.parametrize(
    "args, words",
    [
        (
            ["--processes", "0", "--devices-per-process", "2"],
            "--processes: must be a positive integer, got '0'",
        ),
        (
            ["--processes", "2", "--devices-per-process", "x"],
            "--devices-per-process: must be a positive integer",
        ),
        (["--processes", "8", "--devices-per-process", "9"], "72 devices; use at most 64"),
        ([*TWO_BY_TWO, "--port", "70000"], "port must be an integer in 1..65535"),
    ],
)
def test_invalid_arguments_exit_2_with_a_message(course, args, words):
    status, output = course("launch", *args)
    assert status == 2
    assert words in output and "Traceback" not in output


@pytest.mark.parametrize("value", ["-1", "2"])
def test_a_bad_fail_rank_is_rejected_before_launching(course, value):
    status, output = course("launch", *TWO_BY_TWO, "--fail-rank", value)
    assert status == 2
    assert (
        f"--fail-rank {value} names no process" in output and len(output.strip().splitlines()) == 1
    )


def test_a_worker_alone_gives_up_joining_with_one_line():
    port = free_port()
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "course_utils.tools.launch.worker",
            "--process-id",
            "1",
            "--processes",
            "2",
            "--devices-per-process",
            "1",
            "--port",
            str(port),
            "--timeout",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - start < 30
    assert done.returncode == 3
    assert (
        "did not all join" in done.stderr.strip().splitlines()[-1]
        and "Traceback" not in done.stderr
    )


def dummy_workers(tmp_path, *codes: str) -> list[Worker]:
    """Stand-in workers: each runs one line of Python, its stderr captured like a real worker's."""
    workers = []
    for i, code in enumerate(codes):
        out, err = tmp_path / f"{i}.out", tmp_path / f"{i}.err"
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            popen = subprocess.Popen([sys.executable, "-c", code], stdout=stdout, stderr=stderr)
        workers.append(Worker(i, popen, out, err))
    return workers


def test_the_overall_deadline_stops_a_hanging_launch(tmp_path):
    workers = dummy_workers(tmp_path, "import time; time.sleep(60)", "import time; time.sleep(60)")
    start = time.monotonic()
    try:
        with pytest.raises(
            CourseError, match=r"did not finish within 1 s \(still running: process 0, 1\)"
        ):
            wait_for_workers(workers, 1)
    finally:
        stop_workers(workers)
    assert time.monotonic() - start < 10 and all(w.popen.returncode is not None for w in workers)


def test_a_crashed_worker_is_reported_by_its_last_meaningful_line(tmp_path):
    glog = (
        "F0000 client.h:80] Terminating process\\n*** Check failure stack trace: ***\\n"
        "    @ 0x7f PyObject_Call\\n"
    )
    crash = f"import os, sys; sys.stderr.write('{glog}'); sys.stderr.flush(); os.abort()"
    workers = dummy_workers(tmp_path, "import time; time.sleep(60)", crash)
    try:
        with pytest.raises(
            CourseError, match=r"process 1 failed \(killed by SIGABRT\): F0000 client.h:80\] Term"
        ):
            wait_for_workers(workers, 30)
    finally:
        stop_workers(workers)


def test_the_shard_check_catches_one_wrong_value():
    expected = np.linspace(-1, 1, 8, dtype=np.float32)
    g = jax.device_put(expected, placements(data_mesh()).sliced)
    assert shard_error(g, expected) == (0.0, True, 4)
    wrong = expected.copy()
    wrong[7] += 1e-4
    error, passed, shards = shard_error(g, wrong)
    assert not passed and shards == 4 and error == pytest.approx(1e-4, rel=1e-2)


def test_private_jax_missing_is_one_clear_error(monkeypatch):
    import jax.extend.backend

    from course_utils.tools.launch.jax_private import TESTED_JAX, bind_gloo_to

    monkeypatch.delattr(jax.extend.backend, "register_backend_factory")
    with pytest.raises(RuntimeError, match=f"tested on {TESTED_JAX[0]}.*install a tested jax"):
        bind_gloo_to("127.0.0.1")
