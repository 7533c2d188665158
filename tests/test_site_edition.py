"""What each site shows of a notebook (``course book`` and ``course book --instructor``): the
student site each exercise as the student edition has it, the instructor site the solutions,
both without the harness cells."""

import functools
import re
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest

from course_utils.tools.errors import CourseError
from course_utils.tools.notebooks.chapters import read_step
from course_utils.tools.notebooks.outline import OUTLINE
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


def test_the_instructor_page_gives_each_exercise_its_time_and_check_from_the_outline():
    from course_utils.tools.notebooks.pages import instructor_page

    steps = [read_step(p) for p in SERIES]
    rows = {int(line.split("|")[1]): [cell.strip() for cell in line.split("|")[2:-1]]
            for line in instructor_page(steps).splitlines()
            if line.startswith("| ") and line.split("|")[1].strip().isdigit()}
    assert sorted(rows) == [s.number for s in OUTLINE]
    for entry in OUTLINE:
        title, _, minutes, work = rows[entry.number]
        assert title == entry.title
        if entry.exercise:
            assert minutes == f"{entry.exercise.minutes} min"
            assert work == f"{entry.exercise.task} (`{entry.exercise.check}`, 1 point)"
        else:
            assert (minutes, work) == ("—", "none")


def test_a_step_the_outline_lacks_or_gets_wrong_is_refused_with_where_to_fix_it(monkeypatch):
    from course_utils.tools.notebooks import outline, pages

    steps = [read_step(p) for p in SERIES[:8]]
    monkeypatch.setattr(outline, "OUTLINE", tuple(
        replace(s, exercise=None) if s.number == 7 else s for s in OUTLINE))
    with pytest.raises(CourseError, match=re.escape(
            "07_row_permutation_exercise.ipynb: its check cells call ['check_joint_permutation'],"
            f" its outline entry says no exercise: make them agree ({outline.WHERE})")):
        pages.instructor_page(steps)
    monkeypatch.setattr(outline, "OUTLINE", OUTLINE[:6])
    for page in (pages.instructor_page, functools.partial(pages.landing_page, "title")):
        with pytest.raises(CourseError, match=re.escape(
                f"step 7 is not in the course's outline: add its entry to {outline.WHERE}")):
            page(steps)


def test_the_landing_page_lists_the_steps_by_part_with_their_lines():
    from course_utils.tools.notebooks.outline import parts
    from course_utils.tools.notebooks.pages import landing_page

    page = landing_page("title", [read_step(p) for p in SERIES]).splitlines()
    assert [line[3:] for line in page if line.startswith("## ")] == [
        part for part, _ in parts(list(OUTLINE))]
    assert [line for line in page if line.startswith("| ") and line[2].isdigit()] == [
        f"| {s.number} | [{s.title}]({s.notebook}.ipynb) | {s.line} |" for s in OUTLINE]
