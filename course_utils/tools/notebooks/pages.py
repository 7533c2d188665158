"""The pages written from the course's outline (``outline.py``): the site's landing page (who it
is for, how to start, its parts with one line per step) and instructor page (each exercise, its
check and points, a reading time, how grading works), and the README's series table and
``docs/exercises.md``'s table, which tests keep equal to what these functions write."""

from __future__ import annotations

import re

import nbformat

from course_utils.tools.errors import usage
from course_utils.tools.notebooks.chapters import Step
from course_utils.tools.notebooks.outline import OUTLINE, WHERE, outline_step, parts
from course_utils.tools.notebooks.records import StepOutline
from course_utils.tools.notebooks.site import CHECK_TAG

WHO = """\
**Who it is for.** Students who know NumPy and the basics of JAX (`jit`, arrays) and want to learn
how data-parallel training communicates; instructors who teach it. On one laptop with four
logical CPU devices, the same gradient is moved between the devices with each of JAX's
collectives, placements and bytes are checked, and then the algorithms that make training
communicate less are built and measured.
"""

START = """\
**How to start.** Work in the *student edition* of the notebooks, where each exercise is left
for you: your instructor hands it out, or you make it from the course's repository (Python 3.11
to 3.13; the `notebooks/` folder itself holds the solutions):

```bash
pip install -e ".[instructor]"
course student --out student/
jupyter lab student/
```

Open step 01 and use *Run ▸ Run All Cells*; each exercise has a check cell that says what is
wrong or prints `PASSED`. These pages show each notebook with the outputs it was committed with,
the exercises left open as in the student edition.
"""

# what a self-check is and what grading rests on; the README's instructors' section says the same
FEEDBACK = """\
A self-check is feedback, not a lock: it runs in the student's kernel, names the likely slip (a
unit, a wrong axis, a missed pass of the ring), prints `PASSED` for a right answer and `NOT
VERIFIED` for one it could not judge whole. Grading rests on each check's verdict in the grader's
kernel (autograde, `course check-submission`: not verified is not passed) and on reading the
solution cells.\
"""

WORDS_PER_MINUTE = 200  # a reading pace for prose with code


def _cell(text: str) -> str:
    """``text`` for a markdown table's cell (its own ``|`` escaped)."""
    return text.replace("|", "\\|")


def reading_minutes(nb) -> int:
    """Minutes to read a notebook's prose and code at ``WORDS_PER_MINUTE`` (at least 1)."""
    words = sum(len(cell.source.split()) for cell in nb.cells)
    return max(1, round(words / WORDS_PER_MINUTE))


def graded(nb) -> tuple[list[str], float]:
    """The self-checks a notebook's check cells call, in order, and the points nbgrader gives
    those cells."""
    cells = [c for c in nb.cells if CHECK_TAG in c.metadata.get("tags", [])]
    called = [m[1] for c in cells if (m := re.search(r"(check_\w+)\(", c.source))]
    return called, sum(c.metadata.get("nbgrader", {}).get("points", 0) for c in cells)


def _outlined(step: Step, nb) -> tuple[StepOutline, float]:
    """The outline's entry for a notebook and its points, after checking that the outline names
    the check the notebook calls.

    Raises:
        CourseError: the step is not in the outline, or the outline's exercise and the
            notebook's check cells disagree.
    """
    entry = outline_step(step.number)
    called, points = graded(nb)
    expected = [entry.exercise.check] if entry.exercise else []
    if called != expected:
        raise usage(f"{step.path.name}: its check cells call {called or 'no check'}, its outline "
                    f"entry says {expected or 'no exercise'}: make them agree ({WHERE})")
    return entry, points


def landing_page(title: str, steps: list[Step]) -> str:
    """The MyST source of the landing page: who it is for, how to start, the parts with one line
    per step (its title from the notebook, the rest from the outline)."""
    titles = {s.number: (s.title, s.path.name) for s in steps}
    sections = []
    for part, inside in parts([outline_step(s.number) for s in steps]):
        rows = [f"| {e.number} | [{_cell(titles[e.number][0])}]({titles[e.number][1]}) | "
                f"{_cell(e.line)} |" for e in inside]
        sections.append("\n".join([f"## {part}", "", "| Step | Title | What you see |",
                                   "| ---: | :--- | :--- |", *rows]))
    guide = "For instructors: [objectives, times, grading and common mistakes](instructors.md)."
    return "\n\n".join([f"# {title}", WHO, START, *sections, guide]) + "\n"


def instructor_page(steps: list[Step]) -> str:
    """The MyST source of the instructor page: prerequisites, each step's reading time and
    exercise with its check and points, how grading works. No solution is shown.

    Raises:
        CourseError: a step is not in the outline, or its exercise there and its notebook's
            check cells disagree.
    """
    rows, entries = [], []
    for step in steps:
        nb = nbformat.read(step.path, as_version=4)
        entry, points = _outlined(step, nb)
        entries.append(entry)
        work, minutes = "none", "—"
        if entry.exercise:
            work = (f"{entry.exercise.task} (`{entry.exercise.check}`, {points:g} point"
                    f"{'' if points == 1 else 's'})")
            minutes = f"{entry.exercise.minutes} min"
        rows.append(f"| {step.number} | {_cell(step.title)} | {reading_minutes(nb)} min | "
                    f"{minutes} | {_cell(work)} |")
    table = "\n".join(["| Step | Title | Reading | Exercise time | Exercise (check, points) |",
                       "| ---: | :--- | ---: | ---: | :--- |", *rows])
    mistakes = "\n".join(f"- Step {e.number}, {m.wrong}: *{m.said}*" for e in entries
                         if e.exercise for m in e.exercise.mistakes)
    return f"""# For instructors

**Prerequisites.** NumPy and the basics of JAX (`jit`, arrays, `jax.numpy`); for part two on,
`jax.shard_map`. No accelerator: every step runs on four logical CPU devices of one laptop.

**Objectives.** A student who finishes the unit can place arrays on a mesh and say who holds
what; write a collective inside `jax.shard_map` and check its values and placement; read the
collectives and their bytes off the compiled program; derive the ring's payload and latency; and
build, measure and compare the algorithms that communicate less: buckets, the two-level
all-reduce, ZeRO and FSDP, compression with error feedback, local SGD and DiLoCo's inner and
outer optimizers across replicas.

**Time.** The reading time below counts the words of each notebook's prose and code at
{WORDS_PER_MINUTE} words a minute. The exercise time is a suggestion for a student who has read the
step, set from the size of each exercise, not measured with a class; running the cells adds a
minute or two a step.

{table}

**Grading.** {FEEDBACK}

`course student --out student/` makes the student edition (each solution replaced by a stub,
outputs cleared); `course check-submission <notebook>` runs a returned notebook and reports each
check; with nbgrader, the check cells are its autograded tests, worth the points above. A check
names the likely mistake without giving the answer away. Some common wrong answers and what their
check says (`tests/test_*checks.py` tests many more):

{mistakes or "- (none of this site's steps has an exercise)"}

This page and the student site show no reference solution; the instructor site
(`course book --instructor`) adds them. Some lessons show code close to an exercise's answer on
purpose (the package's copy a step compares with); the checks still test each answer at inputs
no page shows.
"""


def series_table(outline: tuple[StepOutline, ...] = OUTLINE) -> str:
    """The README's table of the series: step, notebook, what the student sees."""
    rows = [f"| {s.number:02d} | `{s.notebook}` | {_cell(s.line)} |" for s in outline]
    return "\n".join(["| step | notebook | what the student sees |", "|---|---|---|", *rows])


def exercise_table(outline: tuple[StepOutline, ...] = OUTLINE) -> str:
    """``docs/exercises.md``'s table: each exercise, its self-check and what that check tests."""
    rows = []
    for s in outline:
        if s.exercise:
            judges = f" ({s.exercise.judges})" if s.exercise.judges else ""
            rows.append(f"| {s.number:02d} | {_cell(s.exercise.task)} | "
                        f"`{s.exercise.check}`{_cell(judges)} |")
    return "\n".join(["| step | exercise | self-check |", "|---|---|---|", *rows])


def with_table(text: str, table: str) -> str:
    """``text`` (markdown) with the table that has ``table``'s header line replaced by ``table``.

    Examples:
        >>> with_table("a\\n\\n| x |\\n|---|\\n| 1 |\\n\\nb\\n", "| x |\\n|---|\\n| 2 |")
        'a\\n\\n| x |\\n|---|\\n| 2 |\\n\\nb\\n'

    Raises:
        ValueError: ``text`` has no table with that header line.
    """
    header = table.splitlines()[0]
    lines = text.splitlines(keepends=True)
    starts = [i for i, line in enumerate(lines) if line.rstrip("\n") == header]
    if len(starts) != 1:
        raise ValueError(f"{len(starts)} tables start with {header!r}; expected one")
    end = starts[0]
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "".join(lines[:starts[0]]) + table + "\n" + "".join(lines[end:])
