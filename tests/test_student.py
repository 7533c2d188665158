"""The student edition (nbgrader's preprocessors): solutions stripped (nothing else changed),
outputs cleared, bad markers refused, and one line when nbgrader is missing."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from sample import sample

from course_utils.tools.errors import CourseError
from course_utils.tools.notebooks.outline import OUTLINE
from course_utils.tools.notebooks.run import find_notebooks
from course_utils.tools.notebooks.student import (
    BEGIN,
    END,
    NEEDS_NBGRADER,
    build,
    student_edition,
)

pytestmark = pytest.mark.instructor  # nbgrader builds the student edition
ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = find_notebooks(ROOT / "notebooks")
EXERCISES = [p for p in NOTEBOOKS if BEGIN in p.read_text()]
SOLUTION_METADATA = {
    "grade": False,
    "grade_id": "x-solution",
    "locked": False,
    "schema_version": 3,
    "solution": True,
}


def _code_cell(source: str, tagged: bool, nbgrader: bool):
    """A code cell, tagged ``solution`` and/or with nbgrader solution metadata."""
    cell = nbformat.v4.new_code_cell(source)
    if tagged:
        cell.metadata["tags"] = ["solution"]
    if nbgrader:
        cell.metadata["nbgrader"] = dict(SOLUTION_METADATA)
    return cell


def _solution_lines(nb) -> set[str]:
    inside, lines, outside = False, set(), set()
    for cell in nb.cells:
        for line in cell.source.splitlines():
            if line.strip() in (BEGIN, END):
                inside = line.strip() == BEGIN
            elif line.strip():
                (lines if inside else outside).add(line.strip())
    return lines - outside


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    build(NOTEBOOKS, out)
    return out


def test_every_exercise_notebook_has_an_exercise():
    assert [p.stem for p in EXERCISES] == [s.notebook for s in OUTLINE if s.exercise]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_solution_line_leaks_and_everything_else_is_kept(edition, path):
    original = nbformat.read(path, as_version=4)
    student = nbformat.read(edition / path.name, as_version=4)
    text = "\n".join(c.source for c in student.cells)
    assert not [line for line in _solution_lines(original) if line in text]
    assert BEGIN not in text and END not in text
    kept = [
        c
        for c in original.cells
        if not (c.cell_type == "markdown" and "solution" in c.metadata.get("tags", []))
    ]
    assert len(kept) == len(student.cells)
    for before, after in zip(kept, student.cells):
        assert after.metadata.get("tags") == before.metadata.get("tags")
        # kept as it is, so nbgrader can also collect and autograde the student edition
        assert after.metadata.get("nbgrader") == before.metadata.get("nbgrader")
        if BEGIN not in before.source:
            assert after.source == before.source
        else:
            assert "# YOUR CODE HERE\nraise NotImplementedError()" in after.source
        if after.cell_type == "code":
            assert after.outputs == [] and after.execution_count is None


def test_same_input_gives_byte_identical_output(edition, tmp_path):
    build(NOTEBOOKS, tmp_path)
    for path in NOTEBOOKS:
        assert (tmp_path / path.name).read_bytes() == (edition / path.name).read_bytes()


@pytest.mark.parametrize(
    "cell, match",
    [
        (_code_cell(f"a = 1\n{BEGIN}\nb = 2", True, True), ".* is never closed"),
        (_code_cell(f"{BEGIN}\n{BEGIN}\nb = 2\n{END}\n{END}", True, True), "line 2: nested"),
        (_code_cell(f"b = 2\n{END}", True, True), "line 2: .* without"),
        (_code_cell("b = 2", True, True), "tagged 'solution' but has no"),
        (
            _code_cell(f"{BEGIN}\nb = 2\n{END}", False, False),
            "has solution markers but is not tagged 'solution'",
        ),
        (
            _code_cell(f"{BEGIN}\nb = 2\n{END}", True, False),
            "tagged 'solution' but not an nbgrader solution cell; give it the metadata",
        ),
        (_code_cell("b = 2", False, True), "an nbgrader solution cell but not tagged 'solution'"),
        (
            nbformat.v4.new_markdown_cell(f"{BEGIN}\nthe answer\n{END}"),
            "a markdown cell with solution markers; tag it 'solution'",
        ),
    ],
)
def test_bad_markers_name_notebook_and_cell_and_write_nothing(tmp_path, cell, match):
    good = nbformat.read(NOTEBOOKS[0], as_version=4)
    bad = nbformat.v4.new_notebook()
    bad.cells = [nbformat.v4.new_markdown_cell("# title"), cell]
    folder = tmp_path / "in"
    folder.mkdir()
    nbformat.write(good, folder / "01_good.ipynb")
    nbformat.write(bad, folder / "02_bad.ipynb")
    out = tmp_path / "out"
    with pytest.raises(CourseError, match=f"02_bad.ipynb, cell 1: {match}"):
        build(find_notebooks(folder), out)
    assert not out.exists()


def test_indentation_and_markdown_solutions():
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("answer: 42"),
        nbformat.v4.new_markdown_cell("question"),
        _code_cell(f"def f():\n    {BEGIN}\n    return 1\n    {END}\n\nf()", True, True),
    ]
    nb.cells[0].metadata["tags"] = ["solution"]
    nb.cells[2].outputs = [nbformat.v4.new_output("execute_result", {"text/plain": "1"})]
    nb.cells[2].execution_count = 1
    edition = student_edition(nb, "nb")
    assert [c.source for c in edition.cells] == [
        "question",
        "def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()\n\nf()",
    ]
    assert edition.cells[1].outputs == [] and edition.cells[1].execution_count is None
    assert len(nb.cells) == 3 and BEGIN in nb.cells[2].source and nb.cells[2].outputs


def test_hidden_tests_leave_check_cells_and_are_refused_elsewhere(tmp_path):
    hidden = "check(x)\n### BEGIN HIDDEN TESTS\nassert x == 42\n### END HIDDEN TESTS"
    check = nbformat.v4.new_code_cell(hidden)
    check.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": "x-check",
        "locked": True,
        "points": 1,
        "schema_version": 3,
        "solution": False,
    }
    nb = nbformat.v4.new_notebook()
    nb.cells = [check]
    assert [c.source for c in student_edition(nb, "nb").cells] == ["check(x)"]
    del nb.cells[0].metadata["nbgrader"]
    with pytest.raises(CourseError, match="nb: nbgrader's ClearHiddenTests: Hidden test"):
        student_edition(nb, "nb")


def test_course_student_refuses_to_overwrite_the_solutions():
    before = [p.read_bytes() for p in NOTEBOOKS]
    with pytest.raises(CourseError, match="overwrite"):
        build(NOTEBOOKS, NOTEBOOKS[0].parent)
    assert [p.read_bytes() for p in NOTEBOOKS] == before


def test_the_appendix_is_copied_as_it_is_and_not_made_a_graded_step(tmp_path):
    from course_utils.tools.notebooks.student import copy_appendices

    folder = NOTEBOOKS[0].parent
    assert all(p.parent == folder for p in NOTEBOOKS)  # the appendix is no step
    written = copy_appendices(folder, tmp_path)
    names = [p.relative_to(tmp_path).as_posix() for p in written]
    assert names == sorted(f"appendix/{p.name}" for p in (folder / "appendix").glob("*.ipynb"))
    assert "appendix/cluster_method.ipynb" in names
    assert all(p.read_bytes() == (folder / name).read_bytes() for p, name in zip(written, names))


def test_course_student_without_nbgrader_says_how_to_install(course, without_nbgrader, tmp_path):
    status, output = course("student", "--out", str(tmp_path / "student"), cwd=ROOT)
    assert status == 2 and output.strip() == f"course student: error: {NEEDS_NBGRADER}"
    assert NEEDS_NBGRADER == 'needs nbgrader: pip install -e ".[instructor]"'
    assert not (tmp_path / "student").exists()


# run in a kernel: the first exercise after kernels and a figure (03), one whose setup places the
# data the exercise rebinds (07), and the last step, whose exercise follows the saved cluster runs
# (17); every exercise notebook: scripts/test_all_notebooks.sh
STOPS = sample(EXERCISES, {"03", "07", "17"})


@pytest.mark.e2e
@pytest.mark.parametrize("path", STOPS, ids=lambda p: p.stem)
def test_student_notebook_stops_at_its_first_exercise(edition, path):
    nb = nbformat.read(edition / path.name, as_version=4)
    with pytest.raises(CellExecutionError) as err:
        NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    assert err.value.ename == "NotImplementedError"
    first = next(i for i, c in enumerate(nb.cells) if "solution" in c.metadata.get("tags", []))
    ran = [c for c in nb.cells[:first] if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in ran)
    assert not [o for c in ran for o in c.outputs if o["output_type"] == "error"]
