"""``course student``: the student edition of the series, made by nbgrader's own preprocessors.

nbgrader's ``ClearSolutions`` replaces each region from ``### BEGIN SOLUTION`` to
``### END SOLUTION`` by ``# YOUR CODE HERE`` + ``raise NotImplementedError()`` (at the marker's
indentation), ``ClearHiddenTests`` removes any ``### BEGIN HIDDEN TESTS`` region of a check cell,
and ``ClearOutput`` clears all outputs and execution counts. Markdown cells tagged ``solution`` are
removed (nbgrader has no such step). Nothing else changes: the cells keep their tags and their
nbgrader metadata, so a student notebook can also be collected and autograded by nbgrader. The same
input gives byte-identical output.

Every notebook is checked before anything is written, here rather than by nbgrader, whose errors
name neither the notebook nor the cell: the tag ``solution``, the solution markers and the nbgrader
metadata ``"solution": true`` must agree on every code cell, and the markers must pair up.

nbgrader is imported only by this command (it is the ``instructor`` extra); ``course
check-submission`` and the rest of the course tools do not need it.
"""

from __future__ import annotations

import argparse
import copy
import shutil
from pathlib import Path

import nbformat

from course_utils.constants import EXIT_OK
from course_utils.tools.errors import CourseError, usage

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SOLUTION_TAG = "solution"
NEEDS_NBGRADER = 'needs nbgrader: pip install -e ".[instructor]"'
# nbgrader's delimiters: a line that contains one of these is a marker (as nbgrader reads it)
BEGIN_DELIMITER, END_DELIMITER = BEGIN.removeprefix("### "), END.removeprefix("### ")
# ClearOutput removes these cell metadata fields as well (per-cell timing from JupyterLab)
OUTPUT_METADATA = {"collapsed", "scrolled", "execution"}


def check_markers(source: str, where: str) -> None:
    """Check that the solution markers of one cell's source pair up.

    Args:
        source: the cell's source.
        where: the notebook and cell, for the error message.

    Raises:
        CourseError: a nested ``### BEGIN SOLUTION``, an ``### END SOLUTION`` without
            one, or a region that is never closed.
    """
    inside = False
    for number, line in enumerate(source.splitlines(), start=1):
        if BEGIN_DELIMITER in line:
            if inside:
                raise usage(f"{where}: line {number}: nested {BEGIN}")
            inside = True
        elif END_DELIMITER in line:
            if not inside:
                raise usage(f"{where}: line {number}: {END} without {BEGIN}")
            inside = False
    if inside:
        raise usage(f"{where}: {BEGIN} is never closed by {END}")


def check_cell(cell, where: str) -> None:
    """Check that a code cell's tag, solution markers and nbgrader metadata agree.

    Args:
        cell: one code cell.
        where: the notebook and cell, for the error message.

    Raises:
        CourseError: the three disagree, or the markers do not pair up.
    """
    tagged = SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])
    has_markers = BEGIN_DELIMITER in cell.source or END_DELIMITER in cell.source
    nbgrader_solution = bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))
    if tagged and not has_markers:
        raise usage(
            f"{where}: tagged {SOLUTION_TAG!r} but has no {BEGIN} / {END} markers"
        )
    if has_markers and not tagged:
        raise usage(
            f"{where}: has solution markers but is not tagged {SOLUTION_TAG!r}"
        )
    if nbgrader_solution and not tagged:
        raise usage(
            f"{where}: an nbgrader solution cell but not tagged {SOLUTION_TAG!r}"
        )
    check_markers(cell.source, where)
    if tagged and not nbgrader_solution:
        raise usage(
            f"{where}: tagged {SOLUTION_TAG!r} but not an nbgrader solution cell; give it the "
            'metadata "nbgrader": {"solution": true, "grade": false, "locked": false, '
            '"grade_id": "<unique id>", "schema_version": 3}'
        )


def _preprocessors() -> list:
    """nbgrader's preprocessors for the student edition, in the order ``generate_assignment``
    runs them (its ``LockCells``, checksums and database steps are for its own release only)."""
    from nbgrader.preprocessors import ClearHiddenTests, ClearOutput, ClearSolutions

    return [
        ClearSolutions(
            begin_solution_delimeter=BEGIN_DELIMITER, end_solution_delimeter=END_DELIMITER
        ),
        ClearOutput(remove_metadata_fields=OUTPUT_METADATA),
        ClearHiddenTests(),
    ]


def student_edition(nb, name: str):
    """The student edition of one notebook (a new object; ``nb`` is not changed).

    Args:
        nb: the solution notebook.
        name: the notebook's name, for error messages.

    Returns:
        The notebook with solutions stripped and outputs cleared.

    Raises:
        CourseError: a cell's tag, markers and nbgrader metadata disagree (the message
            names the notebook and the cell).
        ImportError: nbgrader is not installed.
    """
    nb = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        if cell.cell_type == "code":
            check_cell(cell, where)
        elif SOLUTION_TAG in cell.get("metadata", {}).get("tags", []):
            continue
        elif BEGIN_DELIMITER in cell.source or END_DELIMITER in cell.source:
            raise usage(
                f"{where}: a {cell.cell_type} cell with solution markers; tag it "
                f"{SOLUTION_TAG!r} to leave it out of the student edition"
            )
        cells.append(cell)
    nb.cells = cells
    resources: dict = {}
    for preprocessor in _preprocessors():
        try:
            nb, resources = preprocessor.preprocess(nb, resources)
        except RuntimeError as exc:  # e.g. a hidden-test region outside a check cell
            step = type(preprocessor).__name__
            raise usage(f"{name}: nbgrader's {step}: {exc}") from None
    return nb


def build(notebooks: list[Path], out: Path) -> list[Path]:
    """Write the student edition of ``notebooks`` into ``out``; check all of them first.

    Args:
        notebooks: the solution notebooks.
        out: the folder for the student notebooks (created if missing).

    Returns:
        The notebooks written.

    Raises:
        CourseError: a notebook's markers are wrong, or ``out`` is the notebooks' own
            folder; nothing is written.
        ImportError: nbgrader is not installed.
    """
    editions = [
        (path, student_edition(nbformat.read(path, as_version=4), path.name)) for path in notebooks
    ]
    for path, _ in editions:
        if (out / path.name).resolve() == path.resolve():
            raise usage(
                f"{path}: the student edition would overwrite the solution notebook; "
                f"choose another --out"
            )
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path, nb in editions:
        nbformat.write(nb, out / path.name)
        written.append(out / path.name)
    return written


def copy_appendices(folder: Path, out: Path) -> list[Path]:
    """Copy the appendix notebooks (``folder/appendix/*.ipynb``: reading, no exercise, not
    graded) into ``out/appendix`` as they are, outputs kept, so that the steps' links to them
    work in the student edition."""
    written = []
    for path in sorted((folder / "appendix").glob("*.ipynb")):
        (out / "appendix").mkdir(parents=True, exist_ok=True)
        written.append(Path(shutil.copy2(path, out / "appendix" / path.name)))
    return written


def _run_student(args: argparse.Namespace) -> int:
    from course_utils.tools.notebooks.run import find_notebooks

    try:
        import nbgrader.preprocessors  # noqa: F401
    except ImportError:
        raise usage(NEEDS_NBGRADER) from None
    try:
        notebooks = find_notebooks(Path(args.folder))
        written = build(notebooks, Path(args.out))
    except (CourseError, FileNotFoundError) as exc:
        raise usage(f"{exc}; nothing was written") from None
    appendices = copy_appendices(Path(args.folder), Path(args.out))
    print(
        f"student edition of {len(written)} notebooks written to {args.out}/ "
        "(solutions stripped, outputs cleared)"
        + (f", and {len(appendices)} appendix notebook(s), not graded, in appendix/"
           if appendices else "")
    )
    return EXIT_OK


def add_student_parser(sub) -> None:
    """Register ``course student``.

    Args:
        sub: the ``course`` parser's subparsers.
    """
    student = sub.add_parser(
        "student",
        help="write the student edition (solutions stripped, outputs cleared)",
        description="Write the student edition of the solution notebooks: solutions stripped, "
        "outputs cleared, by nbgrader's own preprocessors. Needs the instructor extra: "
        'pip install -e ".[instructor]".',
    )
    student.add_argument("--out", required=True, help="folder for the student notebooks")
    student.add_argument(
        "--folder", default="notebooks", help="the solution notebooks (default: notebooks)"
    )
    student.set_defaults(handler=_run_student)
