"""``course student``: the student edition of the series, with nbgrader's solution convention.

In every code cell, each region from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` becomes
``# YOUR CODE HERE`` + ``raise NotImplementedError()`` (at the marker's indentation); markdown cells
tagged ``solution`` are removed; all outputs and execution counts are cleared. Nothing else changes,
and the same input gives byte-identical output. Every notebook is checked before anything is
written.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
SOLUTION_TAG = "solution"
PLACEHOLDER = ("# YOUR CODE HERE", "raise NotImplementedError()")


class SolutionMarkerError(ValueError):
    """Solution markers that cannot be stripped safely; the message names the notebook and cell."""


def strip_solution(source: str, where: str) -> str:
    """Replace each marked solution region of one cell's source by the placeholder.

    Examples:
        >>> source = "a = 1\\n    ### BEGIN SOLUTION\\n    b = 2\\n    ### END SOLUTION\\nc = 3"
        >>> print(strip_solution(source, "x"))
        a = 1
            # YOUR CODE HERE
            raise NotImplementedError()
        c = 3
    """
    out, inside = [], False
    for number, line in enumerate(source.splitlines(), start=1):
        marker = line.strip()
        if marker == BEGIN:
            if inside:
                raise SolutionMarkerError(f"{where}: line {number}: nested {BEGIN}")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out.extend(indent + text for text in PLACEHOLDER)
        elif marker == END:
            if not inside:
                raise SolutionMarkerError(f"{where}: line {number}: {END} without {BEGIN}")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise SolutionMarkerError(f"{where}: {BEGIN} is never closed by {END}")
    return "\n".join(out)


def student_edition(nb, name: str):
    """The student edition of one notebook (a new object; ``nb`` is not changed)."""
    nb = copy.deepcopy(nb)
    cells = []
    for index, cell in enumerate(nb.cells):
        where = f"{name}, cell {index}"
        tagged = SOLUTION_TAG in cell.get("metadata", {}).get("tags", [])
        if cell.cell_type == "markdown" and tagged:
            continue
        if cell.cell_type == "code":
            has_markers = BEGIN in cell.source or END in cell.source
            if tagged and not has_markers:
                raise SolutionMarkerError(
                    f"{where}: tagged {SOLUTION_TAG!r} but has no {BEGIN} / {END} markers"
                )
            if has_markers and not tagged:
                raise SolutionMarkerError(
                    f"{where}: has solution markers but is not tagged {SOLUTION_TAG!r}"
                )
            cell.source = strip_solution(cell.source, where)
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("execution", None)
        cells.append(cell)
    nb.cells = cells
    return nb


def build(notebooks: list[Path], out: Path) -> list[Path]:
    """Write the student edition of ``notebooks`` into ``out``; check all of them
    before writing any.
    """
    editions = [
        (path, student_edition(nbformat.read(path, as_version=4), path.name)) for path in notebooks
    ]
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path, nb in editions:
        target = out / path.name
        if target.resolve() == path.resolve():
            raise SolutionMarkerError(
                f"{path}: the student edition would overwrite the solution notebook; "
                f"choose another --out"
            )
        nbformat.write(nb, target)
        written.append(target)
    return written


def _run_student(args: argparse.Namespace) -> int:
    from course_utils.tools.runner import find_notebooks

    try:
        notebooks = find_notebooks(Path(args.folder))
        written = build(notebooks, Path(args.out))
    except (SolutionMarkerError, FileNotFoundError) as exc:
        print(f"course student: error: {exc}; nothing was written", file=sys.stderr)
        return 2
    print(
        f"student edition of {len(written)} notebooks written to {args.out}/ "
        "(solutions stripped, outputs cleared)"
    )
    return 0


def add_student_parser(sub) -> None:
    """Register ``course student``."""
    student = sub.add_parser(
        "student", help="write the student edition (solutions stripped, outputs cleared)"
    )
    student.add_argument("--out", required=True, help="folder for the student notebooks")
    student.add_argument(
        "--folder", default="notebooks", help="the solution notebooks (default: notebooks)"
    )
    student.set_defaults(handler=_run_student)
