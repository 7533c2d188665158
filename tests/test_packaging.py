import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
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
    code = (
        "import jax, matplotlib; before = dict(matplotlib.rcParams); import course_utils; "
        "from jax._src import xla_bridge; assert not xla_bridge.backends_are_initialized(); "
        "assert dict(matplotlib.rcParams) == before; "
        "assert jax.config.jax_num_cpu_devices in (None, -1)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]


def test_importing_the_package_imports_no_jax():
    """PEP 562: ``import course_utils`` and listing its names load no sub-module; the first
    ``cu.<name>`` loads that name's module."""
    code = ("import sys, course_utils; dir(course_utils); "
            "assert not [m for m in sys.modules if m.split('.')[0] == 'jax'], 'jax imported'; "
            "assert 'course_utils.results.overlap' not in sys.modules; "
            "course_utils.overlap_runs; assert 'course_utils.results.overlap' in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]


def test_the_core_never_imports_the_tools():
    package = ROOT / "course_utils"
    core = sorted(
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for p in package.rglob("*.py")
        if "tools" not in p.relative_to(package).parts
    )
    assert "course_utils.checks.helpers" in core and "course_utils.models.cost" in core
    code = (
        "import importlib, sys\n"
        f"for name in {core!r}:\n"
        "    importlib.import_module(name)\n"
        "print(sorted(m for m in sys.modules if m.startswith('course_utils.tools')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-1500:]
    assert done.stdout.strip() == "[]"


def test_notebooks_import_only_the_core():
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        code = "\n".join(
            "".join(c["source"])
            for c in json.loads(path.read_text())["cells"]
            if c["cell_type"] == "code"
        )
        assert "course_utils" in code and "course_utils.tools" not in code, path.name
        assert "jax._src" not in code, path.name


def _notebook_code(path):
    """Each code cell's source, magic lines blanked, with its whole source."""
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            lines = ["" if line.startswith(("%", "!")) else line for line in source.splitlines()]
            yield source, "\n".join(lines)


def test_notebooks_read_the_package_at_the_call_site():
    """Every notebook imports ``course_utils as cu`` (an appendix of prose alone need not) and the
    self-checks as one module
    (``from course_utils import checks``), and each ``cu.<name>`` / ``checks.<name>`` it uses is
    public: a name of ``course_utils.__all__`` (a module namespace's own names too)."""
    import ast

    import course_utils
    from course_utils import checks

    for path in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        imported = set()
        for _, code in _notebook_code(path):
            for node in ast.walk(ast.parse(code)):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.startswith("course_utils"):
                            assert (alias.name, alias.asname) == ("course_utils", "cu"), path.name
                            imported.add("cu")
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                        "course_utils"):
                    assert node.module == "course_utils", (path.name, ast.unparse(node))
                    assert [a.name for a in node.names] == ["checks"], (
                        path.name, ast.unparse(node))
                    imported.add("checks")
                if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                        and node.value.id in imported):  # 09's own ``checks`` is a dict
                    public = course_utils.__all__ if node.value.id == "cu" else checks.__all__
                    assert node.attr in public, (path.name, ast.unparse(node))
                    space = getattr(course_utils, node.attr) if node.value.id == "cu" else None
                    if isinstance(space, ModuleType):
                        assert node.attr in course_utils._NAMESPACES, (path.name, node.attr)
        # a step uses the package; an appendix page of prose alone (its one cell says PASS) need not
        uses = path.parent.name != "appendix" or any(
            "course_utils" in code for _, code in _notebook_code(path))
        assert "cu" in imported or not uses, path.name


def test_each_notebook_s_import_cell_is_short():
    """The cell that imports the package: at most 15 non-blank lines (its imports and the
    device setup; what the step builds goes in the cells after it)."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cell = next(source for source, _ in _notebook_code(path)
                    if "import course_utils as cu" in source)
        lines = [line for line in cell.splitlines() if line.strip()]
        assert len(lines) <= 15, (path.name, len(lines))


def test_the_facade_holds_at_most_170_names_each_documented_once():
    import course_utils

    assert len(course_utils.__all__) <= 170
    assert not set(course_utils._API) & set(course_utils._NAMESPACES)
    for name, module in course_utils._NAMESPACES.items():
        assert isinstance(getattr(course_utils, name), ModuleType), name
        assert getattr(course_utils, name).__name__ == f"course_utils.{module}"


def test_private_jax_lives_in_one_module():
    users = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "course_utils").rglob("*.py")
        if "jax._src" in p.read_text()
    )
    assert users == ["course_utils/tools/launch/jax_private.py"]


def test_no_module_is_over_400_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "course_utils").rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 400
    }
    assert not long, long


def test_train_runs_its_programs_in_a_loop_of_at_most_60_lines():
    import ast

    tree = ast.parse((ROOT / "course_utils/training/train.py").read_text())
    train = next(f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == "train")
    (loop,) = [node for node in train.body if isinstance(node, ast.For)]
    # the loop and what it returns: from the lists it fills to the TrainingRun
    assert train.body[-1].end_lineno - loop.lineno + 1 <= 60
    assert "build_programs(" in ast.unparse(train)  # its programs come built


def test_console_script_is_declared():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["scripts"]["course"] == "course_utils.tools.cli:main"


def test_ci_runs_the_readme_commands():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    quick_start = readme.split("## Quick start", 1)[1].split("```bash\n", 1)[1].split("```")[0]
    commands = [line.split("#")[0].strip() for line in quick_start.splitlines()]
    assert commands[0].startswith("git clone ")
    for command in ('pip install -e ".[dev]"', "course run", "pytest"):
        assert command in commands
    for command in ('pip install -e ".[dev]"', "pytest"):
        assert command in ci


def test_the_network_guard_refuses_other_hosts_and_allows_loopback(tmp_path):
    import socket

    import network_guard

    with socket.socket() as s:
        with pytest.raises(ConnectionRefusedError, match="never reach the network"):
            s.connect(("192.0.2.1", 80))  # TEST-NET-1: refused before any packet is sent
    assert network_guard.attempts.pop() == ("192.0.2.1", 80)
    assert network_guard.is_local(("127.0.0.1", 1)) and network_guard.is_local(("::1", 1, 0, 0))
    assert not network_guard.is_local(("example.org", 80))


def test_notebook_kernels_start_with_the_guard():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("import socket\nprint(socket.socket.connect.network_guard)")
    ]
    NotebookClient(nb, kernel_name="python3").execute()
    assert nb.cells[0].outputs[0]["text"] == "True\n"


def test_no_committed_file_holds_a_token_or_a_machine_path():
    import re

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    leak = re.compile(r"/(root|home|work|Users)/[A-Za-z]|token=[0-9a-f]{16,}")
    found = [
        name
        for name in tracked
        if (ROOT / name).is_file() and leak.search((ROOT / name).read_text(errors="ignore"))
    ]
    assert not found, f"machine paths or tokens in {found}"


def test_the_built_wheel_holds_every_sub_package_and_the_saved_runs(tmp_path):
    # the wheel, not the editable checkout: unpacked into a folder that comes first on the path,
    # imported from a folder outside the repository
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(tmp_path / "wheel"), str(ROOT)],
        capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, built.stderr[-1500:]
    (wheel,) = (tmp_path / "wheel").glob("course_utils-*.whl")
    target = tmp_path / "site"
    unpacked = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        capture_output=True, text=True, timeout=600,
    )
    assert unpacked.returncode == 0, unpacked.stderr[-1500:]
    code = (
        "import importlib, pkgutil, course_utils\n"
        f"assert course_utils.__file__.startswith({str(target)!r}), course_utils.__file__\n"
        "names = [m.name for m in pkgutil.walk_packages(course_utils.__path__, 'course_utils.')]\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "from course_utils.results.bench import saved_results\n"
        "assert saved_results()\n"
        "print(len(names))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)},
    )
    assert done.returncode == 0, done.stderr[-1500:]
    assert int(done.stdout) >= 60  # every module of every sub-package, tools included


def test_the_range_script_tests_the_jax_floor():
    floor = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
                 ["dependencies"] if d.startswith("jax>="))
    script = (ROOT / "scripts" / "test_jax_range.sh").read_text()
    oldest = floor.split(">=")[1].split(",")[0]
    assert f'ends=("3.11 ${{1:-{oldest}}}")' in script
    assert oldest == "0.10.0"  # the first JAX with all_gather(..., to="invarying")
