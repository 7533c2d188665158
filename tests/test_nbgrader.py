"""nbgrader end to end, offline, in a fresh course folder: the exercise notebooks are nbgrader
source notebooks.

``generate_assignment`` releases a few exercise notebooks (every one with
``COURSE_ALL_NOTEBOOKS=1``, as ``scripts/test_all_notebooks.sh`` runs it) without a line of their
solutions. Two students
return 02 and 07: one with the reference solutions put back, one with wrong answers (and 07's check
cell rewritten to print ``PASSED``); ``autograde`` and ``export`` score them 2 of 2 and 0 of 2.
"""

import csv
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from sample import sample
from test_student import _solution_lines

from course_utils.tools.notebooks.run import find_notebooks
from course_utils.tools.notebooks.student import BEGIN, END, build
from course_utils.tools.notebooks.submission import FAILED, check_submission

# nbgrader builds the student edition; the round trip is end to end (CI's `pytest -m e2e`)
pytestmark = [pytest.mark.instructor, pytest.mark.e2e]
ROOT = Path(__file__).resolve().parents[1]
EXERCISES = [p for p in find_notebooks(ROOT / "notebooks") if BEGIN in p.read_text()]
# released: solutions that define a kernel (03), a dict (08) and numbers (17), besides the two
# autograded here (02, 07)
RELEASED = sample(EXERCISES, {"03", "08", "17"})
ALL, GRADED = "all_steps", "ps1"  # the assignments: the released sample, and the two autograded
# the wrong student's answers (their messages are checked at function level in test_checks.py)
PERMUTE_LABELS_ONLY = """def reorder(n_rows, p):
    return np.roll(np.arange(n_rows), n_rows // p)


x2 = jax.device_put(xh, rows)
y2 = jax.device_put(yh[reorder(n_rows, N_DEVICES)], sliced)
w2 = jax.device_put(w2h, replicated)
g_all = all_reduce(x2, y2, w2)
g_gathered = all_gather(reduce_scatter(x2, y2, w2))"""
EVERY_FACTOR_ONE = """def pmean_weights(counts):
    return np.ones(len(counts))"""
WRONG = {
    "02_partial_gradients": EVERY_FACTOR_ONE,
    "07_row_permutation_exercise": PERMUTE_LABELS_ONLY,
}
STUDENTS = {"right": "Reference", "wrong": "Mistaken"}
CONFIG = """c = get_config()
c.CourseDirectory.course_id = "distributed-03"
c.Execute.timeout = 600  # seconds per cell (nbgrader's default is 30)
"""


def _nbgrader(course: Path, *args: str) -> None:
    """Run ``nbgrader *args`` in the course folder, as an instructor would (alembic on PATH)."""
    env = dict(
        os.environ,
        PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""),
        JUPYTER_CONFIG_DIR=str(course / ".jupyter"),  # no nbgrader_config.py from this machine
    )
    done = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, f"nbgrader {' '.join(args)}:\n{done.stderr[-3000:]}"


def _tagged(nb, tag: str) -> list:
    return [c for c in nb.cells if tag in c.metadata.get("tags", [])]


def _submit(course: Path, student: str, release: Path) -> None:
    """The student's copy of a released notebook, answered, in ``submitted/``."""
    name = release.stem
    nb = nbformat.read(release, as_version=4)
    (solution,) = _tagged(nb, "solution")
    if student == "right":
        source = nbformat.read(course / "source" / GRADED / release.name, as_version=4)
        solution.source = _tagged(source, "solution")[0].source
    else:
        solution.source = WRONG[name]
        if name.startswith("07"):
            _tagged(nb, "check")[0].source = "print('PASSED: trust me')"
    folder = course / "submitted" / student / GRADED
    folder.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, folder / release.name)


@pytest.fixture(scope="module")
def course_folder(tmp_path_factory):
    """A course folder after generate, collect (by copying), autograde and export."""
    from nbgrader.api import Gradebook

    course = tmp_path_factory.mktemp("course")
    (course / "nbgrader_config.py").write_text(CONFIG)
    for assignment, notebooks in [
        (ALL, RELEASED),
        (GRADED, [ROOT / "notebooks" / f"{n}.ipynb" for n in WRONG]),
    ]:
        folder = course / "source" / assignment
        folder.mkdir(parents=True)
        for path in notebooks:
            (folder / path.name).write_bytes(path.read_bytes())
    _nbgrader(course, "generate_assignment", "*")  # both assignments, one command
    # the students, as `nbgrader db student import` adds them (in this process: one command less)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        for student, last_name in STUDENTS.items():
            gradebook.update_or_create_student(student, last_name=last_name)
    for student in STUDENTS:
        for release in sorted((course / "release" / GRADED).glob("*.ipynb")):
            _submit(course, student, release)
    _nbgrader(course, "autograde", GRADED)
    _nbgrader(course, "export")
    return course


def test_the_release_has_no_solution_and_matches_course_student(course_folder, tmp_path):
    build(RELEASED, tmp_path)
    released = sorted((course_folder / "release" / ALL).glob("*.ipynb"))
    assert [p.name for p in released] == [p.name for p in RELEASED]
    for path, release in zip(RELEASED, released):
        lines = _solution_lines(nbformat.read(path, as_version=4))
        nb = nbformat.read(release, as_version=4)
        text = "\n".join(c.source for c in nb.cells)
        assert BEGIN not in text and END not in text
        assert not [line for line in lines if line in text], release.name
        (check,) = _tagged(nb, "check")
        assert check.metadata["editable"] is False and check.metadata["deletable"] is False
        student = nbformat.read(tmp_path / path.name, as_version=4)
        assert [c.source for c in nb.cells] == [c.source for c in student.cells], release.name


def test_grades_csv_scores_the_right_and_the_wrong_student(course_folder):
    with open(course_folder / "grades.csv", newline="") as f:
        rows = {r["student_id"]: r for r in csv.DictReader(f) if r["assignment"] == GRADED}
    assert {s: (float(r["score"]), float(r["max_score"])) for s, r in rows.items()} == {
        "right": (2.0, 2.0),
        "wrong": (0.0, 2.0),
    }
    assert rows["wrong"]["last_name"] == "Mistaken"


def test_each_notebook_scores_its_own_check_and_the_check_cell_is_the_instructors(course_folder):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course_folder / 'gradebook.db'}") as gradebook:
        scores = {
            (student, name): gradebook.find_submission_notebook(name, GRADED, student).score
            for student in STUDENTS
            for name in WRONG
        }
    assert scores == {
        ("right", "02_partial_gradients"): 1.0,
        ("right", "07_row_permutation_exercise"): 1.0,
        ("wrong", "02_partial_gradients"): 0.0,
        ("wrong", "07_row_permutation_exercise"): 0.0,
    }
    graded = nbformat.read(
        course_folder / "autograded" / "wrong" / GRADED / "07_row_permutation_exercise.ipynb",
        as_version=4,
    )
    (check,) = _tagged(graded, "check")
    assert check.source.startswith("checks.check_joint_permutation(")  # restored from the source
    (error,) = [o for o in check.outputs if o.output_type == "error"]
    assert error.ename == "ExerciseFailed"
    assert "in their original order while y2 is reordered" in error.evalue  # named in step 7


def test_course_check_submission_agrees_on_an_nbgrader_submission(course_folder):
    submitted = course_folder / "submitted" / "wrong" / GRADED / "07_row_permutation_exercise.ipynb"
    (result,) = check_submission(submitted, ROOT / "notebooks")
    assert result.status == FAILED
    assert "in their original order while y2 is reordered" in result.message
