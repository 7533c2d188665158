"""course check-submission: one whole-notebook run per kind of verdict (passed, failed, not
attempted, the solution cell raised, timed out, broken submission, broken course setup, no
exercises). The wrong answers' messages are checked at function level (tests/test_checks.py,
test_algorithm_checks.py, test_training_checks.py), each verdict's wording at the end of this file
without a kernel, and ``scripts/test_all_notebooks.sh`` checks the reference solutions of every
exercise notebook."""

import hashlib
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from sample import sample

from course_utils.tools.errors import CourseError
from course_utils.tools.notebooks.run import find_notebooks
from course_utils.tools.notebooks.student import build
from course_utils.tools.notebooks.submission import (
    FAILED,
    NOT_ATTEMPTED,
    NOT_VERIFIED,
    PASSED,
    ExerciseResult,
    check_submission,
    grade,
)

pytestmark = pytest.mark.instructor  # nbgrader builds the student edition
ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "notebooks"
EXERCISES = [p for p in find_notebooks(SOLUTIONS) if "### BEGIN SOLUTION" in p.read_text()]


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    build(find_notebooks(SOLUTIONS), out)
    return out


def _answer(edition: Path, tmp_path: Path, name: str, code: str) -> Path:
    """The student notebook ``name`` with its (only) solution cell replaced by ``code``."""
    nb = nbformat.read(edition / name, as_version=4)
    cell = next(c for c in nb.cells if "solution" in c.metadata.get("tags", []))
    cell.source = code
    target = tmp_path / name
    nbformat.write(nb, target)
    return target


def _restore_solutions(edition: Path, tmp_path: Path, solution: Path) -> Path:
    theirs = nbformat.read(edition / solution.name, as_version=4)
    ours = [
        c
        for c in nbformat.read(solution, as_version=4).cells
        if "solution" in c.metadata.get("tags", [])
    ]
    for cell, reference in zip(
        [c for c in theirs.cells if "solution" in c.metadata.get("tags", [])], ours
    ):
        cell.source = reference.source
    target = tmp_path / solution.name
    nbformat.write(theirs, target)
    return target


@pytest.mark.parametrize("solution", EXERCISES, ids=lambda p: p.stem)
def test_solutions_put_back_give_the_solution_notebooks_code(edition, tmp_path, solution):
    # strict nbval runs the solution notebooks in the same test run; with their code restored,
    # a submission is that notebook, so only one is also run end to end below
    restored = nbformat.read(_restore_solutions(edition, tmp_path, solution), as_version=4)
    original = nbformat.read(solution, as_version=4)
    assert [c.source for c in restored.cells if c.cell_type == "code"] == [
        c.source for c in original.cells if c.cell_type == "code"
    ]


# the verdict "passed" on one step in the suite; on every exercise notebook with
# COURSE_ALL_NOTEBOOKS=1 (scripts/test_all_notebooks.sh)
@pytest.mark.e2e
@pytest.mark.parametrize("solution", sample(EXERCISES, {"07"}), ids=lambda p: p.stem)
def test_reference_solutions_put_back_pass(edition, tmp_path, solution):
    results = check_submission(_restore_solutions(edition, tmp_path, solution), SOLUTIONS)
    assert results and all(r.status == PASSED for r in results), results


@pytest.mark.e2e
def test_unsolved_is_not_attempted_and_exits_1(course, edition, without_nbgrader):
    # check-submission does not need nbgrader (the instructor extra): here it cannot import it
    path = edition / "07_row_permutation_exercise.ipynb"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    status, output = course("check-submission", str(path), cwd=ROOT)
    assert status == 1
    assert "check_joint_permutation" in output and NOT_ATTEMPTED in output
    assert "0 passed, 0 failed, 1 not attempted" in output
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_check_submission_imports_no_nbgrader():
    code = "import sys, course_utils.tools.notebooks.submission; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'nbgrader'" not in done.stdout


WRONG_CROSSOVER = """def rd_crossover_bytes(p, alpha_s, bytes_per_s):  # the ring as 2p steps
    extra_bytes = math.log2(p) - 2
    if extra_bytes <= 0:
        return math.inf
    return alpha_s * bytes_per_s * (2 * p - math.log2(p)) / extra_bytes"""


def _tiny_step(folder: Path, setup: str, solution: str, check: bool = True) -> Path:
    """A one-exercise step ``50_tiny.ipynb`` in ``folder``: a setup cell, a solution cell and
    (if ``check``) a check cell that prints PASSED; cheap to run, so only what a test puts in
    it can be slow or fail."""
    folder.mkdir(parents=True, exist_ok=True)
    nb = nbformat.v4.new_notebook()
    cells = [nbformat.v4.new_code_cell(setup), nbformat.v4.new_code_cell(solution)]
    cells[1].metadata["tags"] = ["solution"]
    if check:
        cells.append(nbformat.v4.new_code_cell("print('PASSED: tiny')"))
        cells[2].metadata["tags"] = ["check"]
    nb.cells = [nbformat.v4.new_markdown_cell("# Step 50 — tiny"), *cells]
    nbformat.write(nb, folder / "50_tiny.ipynb")
    return folder / "50_tiny.ipynb"


@pytest.mark.e2e
def test_a_loop_is_stopped_by_the_timeout_and_the_check_after_it_runs(tmp_path):
    # the only test with a short cell timeout: its setup cell cannot take 10 s, the solution
    # cell never ends
    solutions = tmp_path / "solutions"
    _tiny_step(solutions, "x = 0", "### BEGIN SOLUTION\nx = 1\n### END SOLUTION")
    submission = _tiny_step(tmp_path / "student", "x = 0", "while True:\n    pass")
    (result,) = check_submission(submission, solutions, timeout=10)
    assert result.status == FAILED
    assert result.message == "the solution cell ran longer than 10 s and was stopped"


@pytest.mark.e2e
def test_the_submissions_checks_are_not_the_ones_that_run(edition, tmp_path):
    path = _answer(edition, tmp_path, "08_communication_budget.ipynb", WRONG_CROSSOVER)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "check" in cell.metadata.get("tags", []):
            cell.source = "print('PASSED: trust me')"
    nbformat.write(nb, path)
    (result,) = check_submission(path, SOLUTIONS)
    assert result.status == FAILED and "PASSED" not in result.message
    assert "p − 1, not p" in result.message


@pytest.mark.e2e
@pytest.mark.parametrize("rebound", ["checks.check_predicted_shard_shapes", "checks"])
def test_a_solution_that_rebinds_the_check_does_not_pass(edition, tmp_path, rebound):
    fake = "lambda *args: print('PASSED: trust me')"
    if rebound == "checks":
        fake = f"__import__('types').SimpleNamespace(check_predicted_shard_shapes={fake})"
    cheat = f"predicted = [(0, 0)]\n{rebound} = {fake}"
    path = _answer(edition, tmp_path, "04_placement_checks.ipynb", cheat)
    (result,) = check_submission(path, SOLUTIONS)
    assert result.status == FAILED and "PASSED" not in result.message


@pytest.mark.parametrize(
    "content, name, message",
    [
        ("this is not json", "07_x.ipynb", "is not a Jupyter notebook"),
        ('{"cells": 3}', "07_x.ipynb", "is not a Jupyter notebook"),
        (None, "99_unknown.ipynb", "no solution notebook"),
        ("no file", "missing.ipynb", "no such file"),
    ],
)
def test_broken_submissions_get_one_line(course, tmp_path, content, name, message):
    path = tmp_path / name
    if content is None:
        nbformat.write(nbformat.v4.new_notebook(), path)
    elif content != "no file":
        path.write_text(content)
    status, output = course("check-submission", str(path), cwd=ROOT)
    assert status == 2
    assert message in output and len(output.strip().splitlines()) == 1


def test_a_deleted_solution_cell_is_reported(edition, tmp_path):
    nb = nbformat.read(edition / "07_row_permutation_exercise.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if "solution" not in c.metadata.get("tags", [])]
    nbformat.write(nb, tmp_path / "07_row_permutation_exercise.ipynb")
    with pytest.raises(CourseError, match="has 0 cells tagged 'solution', the exercise has 1"):
        check_submission(tmp_path / "07_row_permutation_exercise.ipynb", SOLUTIONS)


def test_a_broken_course_setup_is_not_blamed_on_the_submission(tmp_path):
    solutions = tmp_path / "solutions"
    _tiny_step(solutions, "from course_utils import no_such_name", "### BEGIN SOLUTION\n"
               "x = 1\n### END SOLUTION")
    submission = _tiny_step(tmp_path / "student", "x = 0", "x = 1")  # its setup is not used
    with pytest.raises(CourseError, match=r"the course's own cell 1, before any exercise, "
                       r"raised ImportError: cannot import name 'no_such_name'.*not a fault of "
                       r"the submission: reinstall the course"):
        check_submission(submission, solutions)


def test_a_step_without_exercises_has_nothing_to_check(course, tmp_path):
    step = _tiny_step(tmp_path, "x = 0", "x = 1", check=False)
    step_nb = nbformat.read(step, as_version=4)
    step_nb.cells[2].metadata["tags"] = []  # no solution cell either, as in step 01
    nbformat.write(step_nb, step)
    status, output = course("check-submission", str(step), "--solutions", str(tmp_path), cwd=ROOT)
    assert status == 0 and "this step has no exercises" in output


SCATTER_INTO_P = """def my_kernel(x_block, y_block, w):
    partial = cu.local_contribution(x_block, y_block, w, n_rows)
    return jax.lax.psum_scatter(partial, "data", tiled=True)

specs = (P("data", None), P("data"), P())
my_reduce_scatter = jax.jit(
    jax.shard_map(my_kernel, mesh=mesh, in_specs=specs, out_specs=P())
)
g_mine = my_reduce_scatter(x, y, w)"""


@pytest.mark.e2e
def test_a_jax_error_is_shown_whole(edition, tmp_path):
    (result,) = check_submission(_answer(edition, tmp_path, "03_collectives.ipynb", SCATTER_INTO_P))
    assert result.status == FAILED and result.message.startswith("the solution cell raised")
    assert len(result.message.splitlines()) > 1, result.message  # JAX explains on later lines


def test_a_kernel_that_does_not_start_gets_one_line(edition, tmp_path, monkeypatch, capsys):
    from course_utils.tools.cli import main
    from course_utils.tools.notebooks import submission

    def slow_start(*args, **kwargs):
        raise RuntimeError("Kernel didn't respond in 60 seconds")

    monkeypatch.setattr(submission, "run_in_fresh_kernel", slow_start)
    path = _answer(edition, tmp_path, "07_row_permutation_exercise.ipynb", "pass")
    assert main(["check-submission", str(path)]) == 2
    out = capsys.readouterr().err.strip()
    assert out.count("\n") == 0 and out.startswith("course check-submission: error: ")
    assert "Kernel didn't respond in 60 seconds" in out
    assert "check fewer notebooks at once and try again" in out


def _executed(solution_error=None, check_error=None, printed="PASSED: fine\n"):
    """An executed merged notebook: one solution cell and its check, with these outputs."""
    nb = nbformat.v4.new_notebook()
    solution, check = nbformat.v4.new_code_cell("x = 1"), nbformat.v4.new_code_cell("check_x(x)")
    solution.metadata["tags"], check.metadata["tags"] = ["solution"], ["check"]
    for cell, error in ((solution, solution_error), (check, check_error)):
        if error:
            cell.outputs = [nbformat.v4.new_output("error", ename=error[0], evalue=error[1],
                                                   traceback=[])]
    if not check_error:
        check.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
    nb.cells = [solution, check]
    return nb


@pytest.mark.parametrize(
    "outputs, status, message",
    [
        ({}, PASSED, "PASSED: fine"),
        ({"printed": "all good\n"}, FAILED, "the check printed no PASSED line"),
        ({"solution_error": ("NotImplementedError", "")}, NOT_ATTEMPTED,
         "the solution cell still raises NotImplementedError"),
        ({"solution_error": ("CellTimeoutError", "")}, FAILED,
         "the solution cell ran longer than 7 s and was stopped"),
        ({"solution_error": ("KeyboardInterrupt", "")}, FAILED,
         "the solution cell ran longer than 7 s and was stopped"),
        ({"solution_error": ("ZeroDivisionError", "division by zero")}, FAILED,
         "the solution cell raised ZeroDivisionError: division by zero"),
        ({"check_error": ("ExerciseFailed", "x: it is 2× too large")}, FAILED,
         "x: it is 2× too large"),
        ({"check_error": ("NameError", "name 'x' is not defined")}, FAILED,
         "NameError: name 'x' is not defined"),
        ({"printed": "NOT VERIFIED: x (its order could not be run)\n"}, NOT_VERIFIED,
         "NOT VERIFIED: x (its order could not be run)"),
        ({"printed": "PASSED: x\nNOT VERIFIED: x (a part not run)\n"}, NOT_VERIFIED,
         "NOT VERIFIED: x (a part not run)"),
        ({"printed": "NOT CHECKED: x: on 1 node\n"}, NOT_VERIFIED, "NOT CHECKED: x: on 1 node"),
    ],
)
def test_each_verdict_read_off_an_executed_notebook(outputs, status, message):
    # what every whole-notebook run above ends in, without a kernel: the check's name, the
    # status and the message shown to the student
    (result,) = grade(_executed(**outputs), timeout=7)
    assert (result.check, result.status, result.message) == ("check_x", status, message)


@pytest.mark.parametrize(
    "ename, says",
    [("ImportError", "raised ImportError: no module; not a fault of the submission: reinstall"),
     ("KeyboardInterrupt", "ran longer than 7 s and was stopped; not a fault of the submission: "
      "on a busy machine, try again with a larger --timeout")],
)
def test_a_failed_course_cell_before_the_exercise_is_named_without_a_kernel(ename, says):
    from course_utils.tools.notebooks.submission import _setup_failure

    nb = _executed()
    setup = nbformat.v4.new_code_cell("import course_utils")
    setup.outputs = [nbformat.v4.new_output("error", ename=ename, evalue="no module", traceback=[])]
    nb.cells.insert(0, setup)
    with pytest.raises(CourseError, match=re.escape(f"07.ipynb: the course's own cell 0, before "
                                                    f"any exercise, {says}")):
        _setup_failure(nb, "07.ipynb", 7)
    _setup_failure(_executed(), "07.ipynb", 7)  # no failure before the exercise: nothing raised


@pytest.mark.parametrize("statuses, exit_status, counted", [
    ((PASSED, PASSED), 0, "2 passed, 0 failed, 0 not attempted"),
    ((PASSED, NOT_VERIFIED), 1, "1 passed, 0 failed, 1 not verified, 0 not attempted"),
])
def test_not_verified_is_counted_on_its_own_and_is_not_a_pass(statuses, exit_status, counted,
                                                              monkeypatch, capsys):
    # a check that could not judge all of an answer is graded "not verified": never passed, so
    # the exit status is 1 unless every exercise passed
    from course_utils.tools.notebooks import submission

    results = [ExerciseResult(f"check_{i}", s, f"{s} line") for i, s in enumerate(statuses)]
    monkeypatch.setattr(submission, "check_submission", lambda *args: results)
    args = type("Args", (), {"notebook": "13.ipynb", "solutions": ".", "timeout": 7})
    assert submission._run_check(args) == exit_status
    out = capsys.readouterr().out
    assert out.rstrip().endswith(counted)
    assert "not verified" in out if NOT_VERIFIED in statuses else "not verified" not in out
