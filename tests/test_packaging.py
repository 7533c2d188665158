import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_environment_yml_mirrors_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    assert "python=3.11" in env["dependencies"]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    assert sorted(pip) == sorted(wanted + ["-e ."])


def test_import_configures_nothing():
    code = ("import jax, matplotlib; before = dict(matplotlib.rcParams); import course_utils; "
            "from jax._src import xla_bridge; assert not xla_bridge.backends_are_initialized(); "
            "assert dict(matplotlib.rcParams) == before; assert jax.config.jax_num_cpu_devices in (None, -1)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]


def test_console_script_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["course"] == "course_utils.cli:main"


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in ('pip install -e ".[dev]"', "pytest"):
        assert f"```bash\n{command}\n```" in readme
        assert command in ci
