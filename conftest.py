"""Repository-wide pytest hooks."""

import os
import shutil
import tempfile
from pathlib import Path

GUARD = Path(__file__).resolve().parent / "tests" / "network_guard.py"


def pytest_configure(config):
    # every notebook kernel the tests start runs tests/network_guard.py first (an IPython startup
    # file in a private IPYTHONDIR), so a notebook that tries to reach the network fails its cell
    ipython_dir = Path(tempfile.mkdtemp(prefix="course-ipython-"))
    startup = ipython_dir / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00_network_guard.py").write_text(
        f"exec(compile(open({str(GUARD)!r}).read(), 'network_guard', 'exec'))\ninstall()\n"
    )
    config.course_ipython_dir = ipython_dir
    os.environ["IPYTHONDIR"] = str(ipython_dir)


def pytest_unconfigure(config):
    shutil.rmtree(getattr(config, "course_ipython_dir", ""), ignore_errors=True)


def pytest_collectstart(collector):
    # nbval compares stderr too; warnings there carry /tmp/ipykernel_<pid> paths that change
    # every run
    if collector.fspath and collector.fspath.ext == ".ipynb":
        collector.skip_compare += ("stderr",)

