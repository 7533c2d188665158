"""The student edition: solutions stripped (nothing else changed), outputs cleared, bad markers
refused."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from course_utils.tools.runner import find_notebooks
from course_utils.tools.student import (
    BEGIN,
    END,
    SolutionMarkerError,
    build,
    strip_solution,
    student_edition,
)

NOTEBOOKS = find_notebooks(Path(__file__).resolve().parents[1] / "notebooks")
EXERCISES = [p for p in NOTEBOOKS if BEGIN in p.read_text()]


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


def test_every_exercise_notebook_from_02_to_08_has_an_exercise():
    assert [p.name[:2] for p in EXERCISES] == ["02", "03", "04", "05", "06", "07", "08"]


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
    "source, tagged, match",
    [
        (f"a = 1\n{BEGIN}\nb = 2", True, ".* is never closed"),
        (f"{BEGIN}\n{BEGIN}\nb = 2\n{END}\n{END}", True, "line 2: nested"),
        (f"b = 2\n{END}", True, "line 2: .* without"),
        ("b = 2", True, "tagged 'solution' but has no"),
        (f"{BEGIN}\nb = 2\n{END}", False, "has solution markers but is not tagged 'solution'"),
    ],
)
def test_bad_markers_name_notebook_and_cell_and_write_nothing(tmp_path, source, tagged, match):
    good = nbformat.read(NOTEBOOKS[0], as_version=4)
    bad = nbformat.v4.new_notebook()
    bad.cells = [nbformat.v4.new_markdown_cell("# title"), nbformat.v4.new_code_cell(source)]
    if tagged:
        bad.cells[1].metadata["tags"] = ["solution"]
    folder = tmp_path / "in"
    folder.mkdir()
    nbformat.write(good, folder / "01_good.ipynb")
    nbformat.write(bad, folder / "02_bad.ipynb")
    out = tmp_path / "out"
    with pytest.raises(SolutionMarkerError, match=f"02_bad.ipynb, cell 1: {match}"):
        build(find_notebooks(folder), out)
    assert not out.exists()


def test_indentation_and_markdown_solutions():
    assert strip_solution(f"def f():\n    {BEGIN}\n    return 1\n    {END}", "nb") == (
        "def f():\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("answer: 42"),
        nbformat.v4.new_markdown_cell("question"),
    ]
    nb.cells[0].metadata["tags"] = ["solution"]
    assert [c.source for c in student_edition(nb, "nb").cells] == ["question"]
    assert len(nb.cells) == 2


def test_course_student_refuses_to_overwrite_the_solutions():
    with pytest.raises(SolutionMarkerError, match="overwrite"):
        build(NOTEBOOKS[:1], NOTEBOOKS[0].parent)


@pytest.mark.parametrize("path", EXERCISES, ids=lambda p: p.stem)
def test_student_notebook_stops_at_its_first_exercise(edition, path):
    nb = nbformat.read(edition / path.name, as_version=4)
    with pytest.raises(CellExecutionError) as err:
        NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    assert err.value.ename == "NotImplementedError"
    first = next(i for i, c in enumerate(nb.cells) if "solution" in c.metadata.get("tags", []))
    ran = [c for c in nb.cells[:first] if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in ran)
    assert not [o for c in ran for o in c.outputs if o["output_type"] == "error"]
