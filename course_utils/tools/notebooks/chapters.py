"""The chapters of the course's site: each step notebook's number and title read from its first
heading (``# Step N — title``), the appendix notebooks (``notebooks/appendix/``, ``# Appendix to
step N — title``) and the table of contents that puts each appendix right after its step."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_utils.tools.errors import usage

HEADING = re.compile(r"#\s+Step\s+(\d+)\s+[—–-]+\s+(\S.*?)\s*")
APPENDIX = "appendix"
APPENDIX_HEADING = re.compile(r"#\s+Appendix to step\s+(\d+)\s+[—–-]+\s+(\S.*?)\s*")


@dataclass(frozen=True)
class Step:
    """One notebook of the series, as the landing page lists it."""

    number: int
    title: str
    path: Path


def _first_heading(path: Path) -> str:
    """The first line of ``path``'s first markdown cell ("" if it has none)."""
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError) as exc:
        raise usage(f"{path.name}: not a readable notebook ({exc})") from None
    markdown = [c.source for c in nb.cells if c.cell_type == "markdown" and c.source.strip()]
    return markdown[0].strip().splitlines()[0] if markdown else ""


def read_step(path: Path) -> Step:
    """Read a notebook's step number and title from its first markdown heading.

    Args:
        path: a step notebook, ``NN_name.ipynb``, whose first markdown cell starts with
            ``# Step N — title`` and N equals NN.

    Returns:
        The step, its title without the ``Step N —`` prefix.

    Raises:
        CourseError: the notebook cannot be read, has no such heading, or its number is not N.
    """
    match = HEADING.fullmatch(_first_heading(path))
    if not match:
        raise usage(
            f"{path.name}: its first markdown cell does not start with '# Step N — title'"
        )
    number = int(match.group(1))
    if number != int(path.name[:2]):
        raise usage(
            f"{path.name}: its heading says Step {number}, its name says {path.name[:2]}"
        )
    return Step(number, match.group(2), path)


def read_appendix(path: Path) -> Step:
    """An appendix notebook as a ``Step`` whose number is the step it follows (its first
    markdown cell starts with ``# Appendix to step N — title``).

    Raises:
        CourseError: the notebook cannot be read or has no such heading.
    """
    match = APPENDIX_HEADING.fullmatch(_first_heading(path))
    if not match:
        raise usage(f"{path.name}: its first markdown cell does not start with "
                    "'# Appendix to step N — title'")
    return Step(int(match.group(1)), match.group(2), path)


def chapters(steps: list[Step], appendices: list[Step]) -> list[dict]:
    """The site's table of contents: the steps in order, each appendix right after its step.

    Examples:
        >>> steps = [Step(16, "a", Path("16_a.ipynb")), Step(17, "b", Path("17_b.ipynb"))]
        >>> chapters(steps, [Step(17, "m", Path("appendix/m.ipynb"))])
        [{'file': '16_a'}, {'file': '17_b'}, {'file': 'appendix/m'}]
    """
    toc = []
    for step in steps:
        toc.append({"file": step.path.stem})
        after = [a for a in appendices if a.number == step.number]
        toc += [{"file": f"{APPENDIX}/{a.path.stem}"} for a in after]
    return toc
