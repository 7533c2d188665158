"""What the course's site shows of a notebook: the student site the lesson with its committed
outputs and figures and each exercise as the student edition has it, the instructor site the
solutions too.

On the student site a solution cell shows nbgrader's stub in place of the solution (the same text
``course student`` writes) and no output, a markdown cell tagged ``solution`` is left out, and a
check cell, or a cell tagged ``answer`` (its outputs reveal an exercise's answer: step 08's "your
row", step 14's memory table, step 16's trade-off figure), keeps its code but loses its outputs,
and a line says so. On both sites the ``parameters`` cell is folded (``hide-cell``: later cells
use its ``N_DEVICES``) and the closing ``print("PASS: …")`` removed (``remove-cell``), both
without outputs, and each figure gets the alt text its PNG output carries.
"""

from __future__ import annotations

import copy
import re

import nbformat

from course_utils.tools.notebooks.student import BEGIN_DELIMITER, END_DELIMITER, SOLUTION_TAG

ANSWER_TAG = "answer"
CHECK_TAG = "check"
PARAMETERS_TAG = "parameters"
REMOVE = "remove-cell"  # Jupyter Book leaves such a cell out of the page
FOLD = "hide-cell"  # Jupyter Book folds such a cell behind a "show" toggle
# what the student site says where it left out a cell's outputs
LEFT_OUT = ("*The output of the cell above is not shown on this site: it would give an "
            "exercise's answer away. Run the notebook to see it.*")
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
        if is_harness(cell):  # the parameters folded (later cells use them), PASS removed
            tags.append(FOLD if PARAMETERS_TAG in tags else REMOVE)
            cell.outputs = []
        kept.append(cell)
        if cell.cell_type != "code":
            continue
        if not instructor and SOLUTION_TAG in tags:
            cell.source = stub_solutions(cell.source)
            cell.outputs, cell.execution_count = [], None
        elif not instructor and {CHECK_TAG, ANSWER_TAG} & set(tags):
            cell.outputs = []
            if ANSWER_TAG in tags:
                kept.append(nbformat.v4.new_markdown_cell(LEFT_OUT))
        _alt_text(cell)
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
