"""Test setup: four logical CPU devices, configured before any test touches JAX."""

import json
import select
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import network_guard
import pytest
from filelock import FileLock

from course_utils import use_cpu_devices

use_cpu_devices(4)
network_guard.install()

SERVER = Path(__file__).resolve().parent / "device_server.py"
# generous: a machine with two busy processes beside the suite must still pass
STARTUP_TIMEOUT, SNIPPET_TIMEOUT = 180, 600


@pytest.fixture(autouse=True)
def no_network():
    """Fail any test that tried to open a connection off this machine."""
    before = len(network_guard.attempts)
    yield
    tried = network_guard.attempts[before:]
    assert not tried, f"the test tried to reach the network: {tried}"


@pytest.fixture(autouse=True)
def one_cluster_at_a_time(request):
    """``course cluster`` refuses a second run while one holds its lock: the end-to-end tests
    of the cluster's files, spread over xdist's workers by file, take turns."""
    if (request.node.get_closest_marker("e2e") is None
            or not request.node.path.name.startswith("test_cluster")):
        yield
        return
    with FileLock(Path(tempfile.gettempdir()) / "course-cluster-tests.lock"):
        yield


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


class DeviceServers:
    """One ``tests/device_server.py`` process per device count, started on first use."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.running: dict[int, tuple[subprocess.Popen, Path]] = {}

    def _start(self, n: int) -> tuple[subprocess.Popen, Path]:
        log = self.folder / f"devices-{n}.stderr"
        server = subprocess.Popen(
            [sys.executable, str(SERVER), str(n)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
        )
        self.running[n] = server, log
        self._answer(n, timeout=STARTUP_TIMEOUT)  # the "ready" line: JAX started
        return server, log

    def _answer(self, n: int, timeout: float) -> dict:
        server, log = self.running[n]
        ready, _, _ = select.select([server.stdout], [], [], timeout)
        line = server.stdout.readline() if ready else ""
        if not line:
            if ready:
                self.running.pop(n)
                reason = f"stopped with exit status {server.wait(10)}"
            else:
                self.stop(n)
                reason = f"timed out: no answer within {timeout:.0f} s"
            raise AssertionError(
                f"the {n}-device process {reason}; its stderr ends:\n{log.read_text()[-2000:]}"
            )
        return json.loads(line)

    def run(self, n: int, code: str, timeout: float) -> dict:
        server, _ = self.running.get(n) or self._start(n)
        server.stdin.write(json.dumps({"code": code}) + "\n")
        server.stdin.flush()
        return self._answer(n, timeout)

    def stop(self, n: int) -> None:
        server, _ = self.running.pop(n)
        server.stdin.close()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@pytest.fixture(scope="session")
def run_with_devices(tmp_path_factory):
    """Run a Python snippet with n devices; return what its last line prints, read as JSON.

    The snippet sees ``from course_utils import *``, ``json``, ``np`` and ``jax``, in a fresh
    namespace, in one process per device count shared by the session (tests/device_server.py);
    a snippet that raises fails the test with its traceback.
    """
    servers = DeviceServers(tmp_path_factory.mktemp("device-servers"))

    def run(n: int, body: str):
        answer = servers.run(n, textwrap.dedent(body), timeout=SNIPPET_TIMEOUT)
        assert answer["ok"], f"the snippet raised on {n} devices:\n{answer['traceback']}"
        return json.loads(answer["stdout"].strip().splitlines()[-1])

    yield run
    for n in list(servers.running):
        servers.stop(n)
