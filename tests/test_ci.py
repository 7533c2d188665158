"""CI (``.ci/run``) runs each test once: the end-to-end step leaves out the tests that
``scripts/test_all_notebooks.sh`` runs on every notebook, and no step repeats another."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def every_notebook_tests() -> list[str]:
    """The tests ``test_all_notebooks.sh`` runs with ``COURSE_ALL_NOTEBOOKS=1``."""
    script = (ROOT / "scripts" / "test_all_notebooks.sh").read_text()
    call = script.split("COURSE_ALL_NOTEBOOKS=1 python -m pytest", 1)[1].split("; then", 1)[0]
    return re.findall(r'"(tests/[^"]+)"', call)


def test_the_end_to_end_step_leaves_out_what_the_every_notebook_step_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    deselected = re.findall(r'--deselect "([^"]+)"', ci)
    assert deselected == every_notebook_tests() and len(deselected) == 3
    for node in deselected:  # each names a test file, and a test that is in it
        path, _, name = node.partition("::")
        assert (ROOT / path).is_file(), node
        assert not name or f"def {name}(" in (ROOT / path).read_text(), node


def test_course_cluster_runs_only_in_the_end_to_end_tests():
    ci = (ROOT / ".ci" / "run").read_text()
    assert not re.search(r"^course cluster", ci, re.MULTILINE)
    tests = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_cluster*.py"))
    for name in ("training", "overlap", "diloco"):  # each quick plan, CI's old step
        assert re.search(rf'"--measure", "{name}",[^)]*"--plan", "quick"', tests), name
    assert '"--runs", "2"' in tests  # the median of several runs
