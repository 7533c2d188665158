"""What each site shows of a notebook (``course book`` and ``course book --instructor``): the
student site each exercise as the student edition has it, the instructor site the solutions,
both without the harness cells."""

from pathlib import Path

import nbformat
import pytest

from course_utils.tools.notebooks.site import FOLD, LEFT_OUT, REMOVE, site_notebook

ROOT = Path(__file__).resolve().parents[1]
SERIES = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _tagged(nb, tag):
    return [c for c in nb.cells if tag in c.metadata.get("tags", [])]


@pytest.mark.parametrize("path", SERIES, ids=lambda p: p.stem)
def test_the_student_site_hides_solutions_checks_answers_and_harness(path):
    nb = nbformat.read(path, as_version=4)
    shown = site_notebook(nb)
    left_out = [c for c in shown.cells if c.cell_type == "markdown" and c.source == LEFT_OUT]
    assert len(left_out) == len(_tagged(nb, "answer"))  # each cleared answer cell says so
    assert len(nb.cells) - len(shown.cells) + len(left_out) == len(
        [c for c in _tagged(nb, "solution") if c.cell_type == "markdown"])
    for cell in _tagged(shown, "solution"):
        assert "BEGIN SOLUTION" not in cell.source and cell.outputs == []
        assert "raise NotImplementedError()" in cell.source
    assert all(c.outputs == [] for c in _tagged(shown, "check") + _tagged(shown, "answer"))
    assert [c.source for c in _tagged(shown, REMOVE)] == [
        c.source for c in nb.cells if c.source.startswith('print("PASS: ')]
    assert [c.source for c in _tagged(shown, FOLD)] == [c.source for c in _tagged(nb, "parameters")]
    assert all(c.outputs == [] for c in _tagged(shown, REMOVE) + _tagged(shown, FOLD))
    assert nbformat.read(path, as_version=4) == nb  # the notebook itself is unchanged


def test_the_instructor_site_keeps_solutions_and_their_outputs():
    path = ROOT / "notebooks" / "03_collectives.ipynb"
    nb = nbformat.read(path, as_version=4)
    shown = site_notebook(nb, instructor=True)
    assert [c.source for c in _tagged(shown, "solution")] == [
        c.source for c in _tagged(nb, "solution")]
    assert [c.outputs for c in _tagged(shown, "check")] == [c.outputs for c in _tagged(nb, "check")]
    assert len(_tagged(shown, REMOVE)) == len(_tagged(shown, FOLD)) == 1  # PASS; parameters


def test_every_figure_carries_its_alt_text_to_the_site():
    path = ROOT / "notebooks" / "03_collectives.ipynb"
    shown = site_notebook(nbformat.read(path, as_version=4), instructor=True)
    figures = [c for c in shown.cells if any("image/png" in o.get("data", {})
                                             for o in c.get("outputs", []))]
    assert figures and all(c.metadata["mystnb"]["image"]["alt"].startswith("Grid ")
                           for c in figures)


@pytest.mark.instructor
@pytest.mark.parametrize("path", SERIES, ids=lambda p: p.stem)
def test_the_student_site_shows_the_stub_the_student_edition_has(path):
    from course_utils.tools.notebooks.student import student_edition

    nb = nbformat.read(path, as_version=4)
    edition = [c.source for c in _tagged(student_edition(nb, path.name), "solution")]
    assert [c.source for c in _tagged(site_notebook(nb), "solution")] == edition


def test_the_instructor_page_gives_each_exercise_a_time_and_asks_for_a_missing_one(monkeypatch):
    from course_utils.tools.notebooks import outline
    from course_utils.tools.notebooks.chapters import Step

    steps = [Step(int(p.name[:2]), p.stem, p) for p in SERIES]
    rows = {int(line.split("|")[1]): line.split("|")[4].strip()
            for line in outline.instructor_page(steps).splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    for step in steps:
        has_exercise = bool(outline.exercises(step, nbformat.read(step.path, as_version=4)))
        assert rows[step.number] == (
            f"{outline.EXERCISE_MINUTES[step.number]} min" if has_exercise else "—")
    monkeypatch.delitem(outline.EXERCISE_MINUTES, 7)
    with pytest.raises(ValueError, match="step 7 has an exercise but no time"):
        outline.instructor_page(steps)
