"""The records of the course's outline (``outline.py``): a step, its exercise and the common
wrong answers to it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mistake:
    """A common wrong answer to an exercise and what its check says to it
    (``tests/test_mistakes.py`` writes each one out and runs it through the check)."""

    wrong: str
    said: str


@dataclass(frozen=True)
class Exercise:
    """A step's exercise: what the student writes and the self-check that judges it."""

    task: str
    check: str  # the self-check its check cell calls, from course_utils.checks
    # minutes for a student who has read the step: a planning figure set by the authors from the
    # size of the exercise, not measured with a class (the instructor page says so)
    minutes: int
    judges: str = ""  # what the check tests besides the answer's values, if worth saying
    mistakes: tuple[Mistake, ...] = ()


@dataclass(frozen=True)
class StepOutline:
    """One step of the series: its notebook (``notebooks/<notebook>.ipynb``, whose first heading
    is ``# Step <number> — <title>``), its part, one line and its exercise, if it has one."""

    number: int
    notebook: str
    part: str
    title: str
    line: str  # what the student sees
    exercise: Exercise | None = None
