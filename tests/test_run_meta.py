"""A saved run records the package's version, its commit (and whether the checkout had changes)
and the whole command line; files saved before these fields load unchanged."""

import json
import subprocess
from importlib.metadata import version
from pathlib import Path

from course_utils.results.meta import RunMeta, checkout_state, this_run
from course_utils.results.records import from_json, to_json

ROOT = Path(__file__).resolve().parents[1]
OLD_META = {"command": "course bench", "seconds": 94.0, "runs": 1,
            "machine": {"python": "3.11.7", "jax": "0.10.2", "jaxlib": "0.10.2"}}


def git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def test_a_file_saved_before_the_new_fields_loads_and_writes_back_unchanged():
    meta = from_json(RunMeta, OLD_META)
    assert (meta.package, meta.commit, meta.dirty, meta.command_line) == (None,) * 4
    assert to_json(meta) == OLD_META
    for path in sorted((ROOT / "course_utils/saved").glob("*.json")):  # none records them yet
        saved = json.loads(path.read_text())["meta"]
        assert to_json(from_json(RunMeta, saved, path.name)) == saved, path


def test_the_commit_and_the_changes_are_read_from_the_checkout(tmp_path):
    assert checkout_state(tmp_path) == (None, None)  # not a checkout
    git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    git(tmp_path, "add", "a.py")
    git(tmp_path, "commit", "-qm", "a")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert checkout_state(tmp_path) == (head, False)
    (tmp_path / "a.py").write_text("x = 2\n")
    assert checkout_state(tmp_path) == (head, True)


def test_without_git_the_commit_is_none(tmp_path, monkeypatch):
    git(tmp_path, "init", "-q")
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    assert checkout_state(tmp_path) == (None, None)
    assert this_run("course bench", 1.0).commit is None


def test_this_run_records_the_version_the_commit_and_the_whole_command():
    meta = this_run("course cluster --measure training", 2.5, runs=2,
                    argv=["/venv/bin/course", "cluster", "--measure", "training", "--runs", "2"])
    assert meta.command_line == "course cluster --measure training --runs 2"
    assert (meta.command, meta.seconds, meta.runs) == ("course cluster --measure training", 2.5, 2)
    assert meta.package == version("course-utils") and meta.machine.cores > 0
    if (ROOT / ".git").exists():  # the package runs from this checkout
        assert meta.commit == git(ROOT, "rev-parse", "HEAD") and isinstance(meta.dirty, bool)
    back = from_json(RunMeta, json.loads(json.dumps(to_json(meta))))
    assert back == meta



def test_every_writer_of_a_saved_run_builds_its_meta_with_this_run():
    # a RunMeta built by hand would leave out the version, commit and command line
    built = [f"{path.relative_to(ROOT)}:{i}"
             for folder in ("course_utils", "scripts", "benchmarks")
             for path in sorted((ROOT / folder).rglob("*.py")) if path.name != "meta.py"
             for i, line in enumerate(path.read_text().splitlines(), 1) if "RunMeta(" in line]
    assert built == [], f"use results.meta.this_run in {', '.join(built)}"
    writers = ("course_utils/results/streaming.py", "course_utils/results/strategies.py",
               "scripts/diloco_sweep.py", "course_utils/tools/bench/combine.py")
    assert all("this_run(" in (ROOT / p).read_text() for p in writers)
