"""Every bad input a user can give, in one place, each with the short message that says what to do.

The other test modules test each function's behaviour; this one is the catalogue of error messages.
"""

import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from course_utils import (
    all_gather_shards,
    all_reduce_gradient,
    block_collective,
    communication_budget,
    data_mesh,
    plot_figure,
    reduce_scatter_gradient,
    ring_bytes,
    sharded_momentum_step,
    time_completed_calls,
    toy_regression,
    use_cpu_devices,
)
from course_utils.checks import ExerciseFailed, check_joint_permutation

ROOT = Path(__file__).resolve().parents[1]
MESH = data_mesh()
X, Y, W = toy_regression()


CALLS = {
    "device count after JAX started": (
        lambda: use_cpu_devices(8),
        RuntimeError,
        r"JAX already started with 4 CPU device\(s\), not the 8 requested; restart the "
        r"kernel and call use_cpu_devices\(8\) before any other JAX call",
    ),
    "zero devices": (lambda: use_cpu_devices(0), ValueError, "positive integer, got 0"),
    "fractional devices": (lambda: use_cpu_devices(2.5), ValueError, "positive integer, got 2.5"),
    "device count as text": (lambda: use_cpu_devices("4"), ValueError, "positive integer, got '4'"),
    "rows that do not divide": (
        lambda: all_reduce_gradient(MESH)(*toy_regression(10, 8)),
        ValueError,
        r"10 rows do not divide over 4 devices \(x \(10, 8\), y \(10,\), w \(8,\)\); "
        r"use a row count that is a multiple of 4",
    ),
    "features that do not divide": (
        lambda: reduce_scatter_gradient(MESH)(*toy_regression(16, 6)),
        ValueError,
        "6 features do not divide over 4 devices for reduce-scatter",
    ),
    "mismatched x and y": (
        lambda: all_reduce_gradient(MESH)(X, Y[:12], W),
        ValueError,
        r"shapes disagree: x \(16, 8\), y \(12,\), w \(8,\)",
    ),
    "mismatched x and w": (
        lambda: reduce_scatter_gradient(MESH)(X, Y, W[:4]),
        ValueError,
        "shapes disagree",
    ),
    "integer dtype": (
        lambda: all_reduce_gradient(MESH)(X.astype(np.int32), Y, W),
        ValueError,
        r"x has dtype int32; the course expects float32 arrays \(use .astype\(np.float32\)\)",
    ),
    "gather of an odd length": (
        lambda: all_gather_shards(MESH)(np.zeros(5, np.float32)),
        ValueError,
        r"1-D array whose length divides over 4 devices, got shape \(5,\)",
    ),
    "blocks not one per device": (
        lambda: block_collective(MESH, "all_gather")(np.zeros((2, 4), np.float32)),
        ValueError,
        r"one row per device; got \(2, 4\)",
    ),
    "momentum shapes": (
        lambda: sharded_momentum_step(W, W[:4], W),
        ValueError,
        "w, v and g must have one shape",
    ),
    "ring bytes of a negative size": (
        lambda: ring_bytes(-8, 4),
        ValueError,
        "nbytes must be an integer >= 0",
    ),
    "budget that does not divide": (
        lambda: communication_budget(1000, (3,)),
        ValueError,
        "1000 bytes do not divide over 3 ranks",
    ),
    "no panels": (
        lambda: plot_figure({"panels": []}),
        ValueError,
        "'panels' must be a non-empty list",
    ),
    "unknown panel kind": (
        lambda: plot_figure({"panels": [{"kind": "pie"}]}),
        ValueError,
        r"panels\[0\]\.kind",
    ),
    "timing with no samples": (
        lambda: time_completed_calls(lambda: None, n_samples=0),
        ValueError,
        "n_samples",
    ),
    "an unsolved exercise": (
        lambda: check_joint_permutation(None, None, X, Y, W, 4),
        ExerciseFailed,
        r"g_all is not defined \(or is None\); assign your result to g_all",
    ),
}


@pytest.mark.parametrize("name", CALLS)
def test_bad_call(name):
    call, error, message = CALLS[name]
    with pytest.raises(error, match=message):
        call()


def test_labels_permuted_alone():
    w2 = W + np.float32(0.17)
    wrong = all_reduce_gradient(MESH)(X, Y[::-1].copy(), w2)
    with pytest.raises(
        ExerciseFailed, match="reorder the rows of x and the labels y with the same permutation"
    ):
        check_joint_permutation(wrong, wrong, X, Y, w2, 4)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--devices", "two"], "argument --devices: must be a positive integer, got 'two'"),
        (
            ["launch", "--processes", "2", "--devices-per-process", "-1"],
            "must be a positive integer",
        ),
        (["bench", "--repeats", "0"], "repeats"),
        # before any host is built (no root needed to be told)
        (["cluster", "--timeout", "0"], "--timeout: must be a positive number of seconds, got '0'"),
        (["cluster", "--timeout", "-5"], "must be a positive number of seconds, got '-5'"),
        (["cluster", "--timeout", "soon"], "must be a positive number of seconds, got 'soon'"),
        (["check-submission", "missing.ipynb"], "missing.ipynb: no such file"),
        (["student"], "the following arguments are required: --out"),
        (["teleport"], "invalid choice: 'teleport'"),
    ],
)
def test_bad_command_lines(course, argv, message):
    status, output = course(*argv, cwd=ROOT)
    assert status == 2 and message in output


def test_a_taken_port(course):
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        status, output = course(
            "launch", "--processes", "2", "--devices-per-process", "1", "--port", str(port)
        )
    assert status == 1 and f"port {port} on 127.0.0.1 is already taken" in output
    assert len(output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "garbage, message",
    [
        ("one", "invalid int value: 'one'"),
        ("7", "--fail-rank 7 names no process"),
        ("1.5", "invalid int value: '1.5'"),
    ],
)
def test_garbage_fail_rank(course, garbage, message):
    status, output = course(
        "launch", "--processes", "2", "--devices-per-process", "1", "--fail-rank", garbage
    )
    assert status == 2 and message in output


def test_no_environment_variable_changes_what_launch_does(monkeypatch, course):
    monkeypatch.setenv("COURSE_LAUNCH_FAIL_RANK", "7")  # the old test hook: read by nothing now
    status, output = course(
        "launch", "--processes", "2", "--devices-per-process", "1", "--fail-rank", "9"
    )
    assert status == 2 and "--fail-rank 9 names no process" in output and "COURSE_" not in output


def test_a_broken_submission(course, tmp_path):
    path = tmp_path / "07_broken.ipynb"
    path.write_text("{not json")
    status, output = course("check-submission", str(path))
    assert status == 2 and "07_broken.ipynb is not a Jupyter notebook" in output


def test_the_device_count_in_a_fresh_process_after_jax_started():
    code = "import jax, course_utils; jax.devices(); course_utils.use_cpu_devices(4)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "JAX already started with 1 CPU device(s), not the 4 requested" in done.stderr
    assert jax.device_count() == 4


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["run"], "--folder"),
        (["student", "--out", "student"], "--folder"),
        (["check-submission", str(ROOT / "notebooks" / "07_row_permutation_exercise.ipynb"),
          "--solutions", "no-such-folder"], "--solutions"),
    ],
)
def test_commands_outside_the_course_folder_say_where_to_run(course, tmp_path, argv, flag):
    status, output = course(*argv, cwd=tmp_path)
    assert status == 2 and flag in output and ("root folder" in output or "checkout" in output)
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output


def test_check_submission_finds_the_solutions_from_any_folder(course, tmp_path):
    status, output = course("check-submission", str(ROOT / "notebooks" / "01_mesh_setup.ipynb"),
                            cwd=tmp_path)
    assert status == 0 and "this step has no exercises" in output
