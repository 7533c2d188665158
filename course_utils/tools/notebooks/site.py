"""What the course's site shows of a notebook: the student site the lesson with its committed
outputs and figures and each exercise as the student edition has it, the instructor site the
solutions too.

On the student site a solution cell shows nbgrader's stub in place of the solution (the same text
``course student`` writes) and no output, a markdown cell tagged ``solution`` is left out, and a
check cell, or a cell tagged ``answer`` (its outputs reveal an exercise's answer: step 08's "your
row", step 14's memory table), keeps its code but loses its outputs. On both sites the harness
cells, the ``parameters`` cell and the closing ``print("PASS: …")``, are removed (Jupyter Book's
``remove-cell`` tag), and each figure gets the alt text its PNG output carries.
"""

from __future__ import annotations

import copy
import re

from course_utils.tools.notebooks.student import BEGIN_DELIMITER, END_DELIMITER, SOLUTION_TAG

ANSWER_TAG = "answer"
CHECK_TAG = "check"
PARAMETERS_TAG = "parameters"
REMOVE = "remove-cell"  # Jupyter Book leaves such a cell out of the page
# what nbgrader's ClearSolutions puts where a solution was (its default for Python)
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
PASS_LINE = re.compile(r'print\(\s*"PASS: [^"]*"\s*\)')


def stub_solutions(source: str) -> str:
    """``source`` with each region from ``### BEGIN SOLUTION`` to ``### END SOLUTION`` replaced
    by nbgrader's stub at the marker's indentation, as ``course student`` does.

    Examples:
        >>> cell = "x = 1\\n    ### BEGIN SOLUTION\\n    y = 2\\n    ### END SOLUTION"
        >>> print(stub_solutions(cell))
        x = 1
            # YOUR CODE HERE
            raise NotImplementedError()
    """
    lines, inside = [], False
    for line in source.splitlines():
        if BEGIN_DELIMITER in line:
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            lines += [indent + stub for stub in STUB]
        elif inside and END_DELIMITER in line:
            inside = False
        elif not inside:
            lines.append(line)
    return "\n".join(lines)


def is_harness(cell) -> bool:
    """The cells a reader has no use for: the ``parameters`` cell and ``print("PASS: …")``."""
    tags = cell.get("metadata", {}).get("tags", [])
    return cell.cell_type == "code" and (
        PARAMETERS_TAG in tags or bool(PASS_LINE.fullmatch(cell.source.strip())))


def site_notebook(nb, *, instructor: bool = False):
    """The notebook as the site shows it (a new object; ``nb`` is not changed).

    Args:
        nb: a solution notebook with its committed outputs.
        instructor: keep the solutions and every output (the instructor site).
    """
    nb = copy.deepcopy(nb)
    kept = []
    for cell in nb.cells:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if not instructor and SOLUTION_TAG in tags and cell.cell_type == "markdown":
            continue
        if is_harness(cell) and REMOVE not in tags:
            tags.append(REMOVE)
        if cell.cell_type == "code":
            if not instructor and SOLUTION_TAG in tags:
                cell.source = stub_solutions(cell.source)
                cell.outputs, cell.execution_count = [], None
            elif not instructor and (CHECK_TAG in tags or ANSWER_TAG in tags):
                cell.outputs = []
            _alt_text(cell)
        kept.append(cell)
    nb.cells = kept
    return nb


def _alt_text(cell) -> None:
    """Give the cell's figures their alt text: the ``alt`` its PNG output's metadata carries
    (``plot_figure`` writes it), as myst-nb's image option for the cell."""
    for output in cell.get("outputs", []):
        alt = output.get("metadata", {}).get("image/png", {}).get("alt")
        if alt:
            image = cell.metadata.setdefault("mystnb", {}).setdefault("image", {})
            image["alt"] = alt
