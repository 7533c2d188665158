"""Test setup: four logical CPU devices, configured before any test touches JAX."""

import json
import subprocess
import sys
import textwrap

import network_guard
import pytest

from course_utils import use_cpu_devices

use_cpu_devices(4)
network_guard.install()


@pytest.fixture(autouse=True)
def no_network():
    """Fail any test that tried to open a connection off this machine."""
    before = len(network_guard.attempts)
    yield
    tried = network_guard.attempts[before:]
    assert not tried, f"the test tried to reach the network: {tried}"


@pytest.fixture
def course(capsys, monkeypatch):
    """Run ``course`` in this process (in ``cwd`` if given): ``(exit status, all output)``."""
    from course_utils.tools.cli import main

    def run(*argv: str, cwd=None) -> tuple[int, str]:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            status = main(list(argv))
        except SystemExit as exc:  # argparse's own errors
            status = exc.code
        captured = capsys.readouterr()
        return status, captured.out + captured.err

    return run


@pytest.fixture
def without_nbgrader(monkeypatch):
    """Make ``import nbgrader`` (and any of its submodules) fail in this process, as if it were
    not installed; the modules already imported come back after the test."""
    for name in [n for n in sys.modules if n == "nbgrader" or n.startswith("nbgrader.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "nbgrader", None)


@pytest.fixture(scope="session")
def run_with_devices():
    """Run a Python snippet in a fresh process with n devices; return what it prints as JSON."""

    def run(n: int, body: str):
        script = (
            f"from course_utils import *\nimport json, numpy as np, jax\nuse_cpu_devices({n})\n"
        )
        script += textwrap.dedent(body)
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    return run
