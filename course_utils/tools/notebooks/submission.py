"""``course check-submission``: run a student's notebook and report every exercise.

The student's solution cells (tagged ``solution``) are put into a copy of the matching solution
notebook, in order, and that copy runs in a fresh kernel with a per-cell timeout. So the checks that
run are the instructor's, not whatever the submission's check cells say, and the verdict is each
check's in that kernel: passed (a ``PASSED`` line), failed, not verified (the check printed ``NOT
VERIFIED``: it could not judge the whole answer; not passed) or not attempted. The exit status is 0
only when every exercise passed. Neither the submission nor the instructor's notebook is modified.
"""

from __future__ import annotations

import argparse
import copy
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_utils.constants import EXIT_FAILED, EXIT_OK
from course_utils.tools.errors import usage
from course_utils.tools.notebooks.run import run_in_fresh_kernel
from course_utils.tools.notebooks.student import SOLUTION_TAG

CHECK_TAG = "check"
# the course's own solution notebooks, beside the package in a checkout (pip install -e .)
SOLUTIONS = Path(__file__).resolve().parents[3] / "notebooks"
PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
# a check that could not judge the whole answer prints "NOT VERIFIED: …" (checks.helpers), never
# PASSED: graded on its own, not passed (the exit status is 1, as for a failure); "NOT CHECKED"
# is the older spelling of the same line
NOT_VERIFIED = "not verified"
_NOT_VERIFIED_LINES = ("NOT VERIFIED", "NOT CHECKED")
SNAPSHOT = ("_COURSE_NAMES = {k: v for k, v in globals().items() "
            "if k.startswith('check_') or k in ('N_DEVICES', 'mesh', 'cu', 'checks')}\n"
            "_COURSE_CHECKS = dict(getattr(_COURSE_NAMES.get('checks'), '__dict__', {}))")
RESTORE = ("globals().update(_COURSE_NAMES)\n"
           "getattr(_COURSE_NAMES.get('checks'), '__dict__', {}).update(_COURSE_CHECKS)\n")


@dataclass
class ExerciseResult:
    """One exercise of a submission: its check, the status and the message shown to the student."""

    check: str
    status: str
    message: str


def _tagged(nb, tag: str) -> list[int]:
    return [i for i, c in enumerate(nb.cells) if tag in c.get("metadata", {}).get("tags", [])]


def read_submission(path: Path):
    """The submission as a notebook; a usage ``CourseError`` if it is missing or not a notebook."""
    if not path.is_file():
        raise usage(f"{path}: no such file")
    try:
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
    except Exception as exc:  # nbformat raises JSON, validation and version errors of several types
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise usage(f"{path.name} is not a Jupyter notebook ({reason[:120]})") from None
    return nb


def solution_notebook_for(path: Path, solutions: Path) -> Path:
    """The solution notebook with the submission's step number (``07_…`` → ``07_*.ipynb``)."""
    if not solutions.is_dir():
        raise usage(
            f"no solution notebooks: {solutions}/ is not a folder; pass --solutions with the "
            "folder of the course's solution notebooks (notebooks/ in a checkout of the course)"
        )
    step = re.match(r"(\d\d)_", path.name)
    matches = sorted(solutions.glob(f"{step.group(1)}_*.ipynb")) if step else []
    if len(matches) != 1:
        raise usage(
            f"{path.name}: no solution notebook in {solutions}/ has its step number; "
            f"keep the file name's NN_ prefix (e.g. 07_row_permutation_exercise.ipynb)"
        )
    return matches[0]


def merge(submission, solution, name: str):
    """A copy of ``solution`` whose solution cells hold the submission's solution cells,
    in order.
    """
    theirs, ours = _tagged(submission, SOLUTION_TAG), _tagged(solution, SOLUTION_TAG)
    if len(theirs) != len(ours):
        raise usage(
            f"{name} has {len(theirs)} cells tagged {SOLUTION_TAG!r}, the exercise has "
            f"{len(ours)}; keep each exercise's solution cell (do not delete or split it)"
        )
    merged = copy.deepcopy(solution)
    for mine, student in zip(ours, theirs):
        merged.cells[mine].source = submission.cells[student].source
    # a solution cell runs in the course's namespace: the check cells start by putting back the
    # course's checks (the ``checks`` module and its names), ``cu``, N_DEVICES and mesh as they
    # were before any solution ran (an answer that rebinds ``checks.check_…`` to a function
    # printing PASSED does not pass)
    for index in _tagged(merged, CHECK_TAG):
        merged.cells[index].source = RESTORE + merged.cells[index].source
    if ours:
        merged.cells.insert(ours[0], nbformat.v4.new_code_cell(SNAPSHOT))
    return merged


def _error(cell) -> tuple[str, str] | None:
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            # the whole message: JAX puts its explanation on the lines after the first
            return output.get("ename", "Error"), (output.get("evalue") or "").strip()
    return None


def _stdout(cell) -> str:
    return "".join(
        o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream"
    )


def _setup_failure(executed, name: str, timeout: int) -> None:
    """A usage ``CourseError`` if a course cell before the first solution cell raised or timed
    out: the course's own setup failed (an import, a saved file) or the machine was too slow,
    which no answer can cause or fix."""
    solutions = _tagged(executed, SOLUTION_TAG)
    for index, cell in enumerate(executed.cells[: solutions[0] if solutions else None]):
        if (failure := _error(cell)) is not None:
            ename, evalue = failure
            if ename in ("KeyboardInterrupt", "CellTimeoutError"):
                raise usage(
                    f"{name}: the course's own cell {index}, before any exercise, ran longer "
                    f"than {timeout} s and was stopped; not a fault of the submission: on a busy "
                    "machine, try again with a larger --timeout"
                )
            first = evalue.splitlines()[0] if evalue else ""
            raise usage(
                f"{name}: the course's own cell {index}, before any exercise, raised {ename}: "
                f"{first}; not a fault of the submission: reinstall the course with the README's "
                "install command, or tell the instructor"
            )


def grade(executed, timeout: int) -> list[ExerciseResult]:
    """Read each check cell (and the solution cell before it) of an executed merged notebook."""
    results = []
    solutions = _tagged(executed, SOLUTION_TAG)
    for index in _tagged(executed, CHECK_TAG):
        cell = executed.cells[index]
        name = re.search(r"check_\w+", cell.source)
        check = name.group(0) if name else f"cell {index}"
        before = [i for i in solutions if i < index]
        attempt = _error(executed.cells[before[-1]]) if before else None
        if attempt and attempt[0] == "NotImplementedError":
            results.append(
                ExerciseResult(
                    check, NOT_ATTEMPTED, "the solution cell still raises NotImplementedError"
                )
            )
        elif attempt and attempt[0] in ("KeyboardInterrupt", "CellTimeoutError"):
            results.append(
                ExerciseResult(
                    check, FAILED, f"the solution cell ran longer than {timeout} s and was stopped"
                )
            )
        elif attempt:
            results.append(
                ExerciseResult(
                    check, FAILED, f"the solution cell raised {attempt[0]}: {attempt[1]}"
                )
            )
        elif (failure := _error(cell)) is not None:
            ename, evalue = failure
            message = evalue if ename == "ExerciseFailed" else f"{ename}: {evalue}"
            results.append(ExerciseResult(check, FAILED, message))
        else:
            lines = _stdout(cell).splitlines()
            unsure = [line for line in lines if line.startswith(_NOT_VERIFIED_LINES)]
            passed = [line for line in lines if line.startswith("PASSED")]
            if unsure:  # whatever else it printed: part of the answer was not judged
                results.append(ExerciseResult(check, NOT_VERIFIED, unsure[0]))
            elif passed:
                results.append(ExerciseResult(check, PASSED, passed[0]))
            else:
                results.append(ExerciseResult(check, FAILED, "the check printed no PASSED line"))
    return results


def check_submission(
    path: Path, solutions: Path = SOLUTIONS, timeout: int = 120
) -> list[ExerciseResult]:
    """Run ``path`` (the student's notebook) against the matching solution notebook's checks.

    Args:
        path: the returned notebook.
        solutions: the folder of solution notebooks.
        timeout: seconds any one cell may run.

    Returns:
        One ``ExerciseResult`` per exercise (per cell tagged ``check``).

    Raises:
        CourseError: (usage status) not a notebook, no matching exercise, cells missing, the
            kernel died, or the course's own setup cells failed.
    """
    from nbclient.exceptions import DeadKernelError

    submission = read_submission(path)
    solution_path = solution_notebook_for(path, solutions)
    merged = merge(submission, nbformat.read(solution_path, as_version=4), path.name)
    with tempfile.TemporaryDirectory(prefix="course-check-") as folder:
        try:
            run_in_fresh_kernel(
                merged, Path(folder), timeout, allow_errors=True, interrupt_on_timeout=True
            )
        except DeadKernelError:
            raise usage(
                f"{path.name}: the kernel died while running it (did the code exit Python?)"
            ) from None
        except RuntimeError as exc:  # nbclient: the kernel did not start in time
            text = str(exc).strip()
            first = text.splitlines()[0] if text else type(exc).__name__
            raise usage(
                f"{path.name}: the kernel did not run it ({first}); on a busy machine, check "
                "fewer notebooks at once and try again"
            ) from None
    _setup_failure(merged, path.name, timeout)
    return grade(merged, timeout)


def _run_check(args: argparse.Namespace) -> int:
    results = check_submission(Path(args.notebook), Path(args.solutions), args.timeout)
    if not results:
        print(
            f"{args.notebook}: this step has no exercises (no cell tagged {CHECK_TAG!r}); "
            "nothing to check"
        )
        return EXIT_OK
    print(f"{args.notebook}:")
    for r in results:
        message = r.message.replace("\n", "\n" + " " * 50)  # a long message stays in its column
        print(f"  {r.check:32s} {r.status:14s} {message}")
    counts = {
        status: sum(r.status == status for r in results)
        for status in (PASSED, FAILED, NOT_VERIFIED, NOT_ATTEMPTED)
    }
    print(", ".join(f"{n} {status}" for status, n in counts.items()
                    if n or status != NOT_VERIFIED))
    # 0 only when every exercise passed: "not verified" is not passed, so it exits 1 (read it)
    return EXIT_OK if counts[PASSED] == len(results) else EXIT_FAILED


def add_check_parser(sub) -> None:
    """Register ``course check-submission``."""
    check = sub.add_parser(
        "check-submission", help="run a returned notebook and report each exercise",
        description="Run the student's solution cells inside the solution notebook (its own "
        "setup, parameters and checks, so N_DEVICES is the course's, whatever the student "
        "set) in a fresh kernel, and report each exercise: passed, failed, not verified (the "
        "check could not judge all of it: read its line) or not attempted. Exit status 0 only "
        "if every exercise passed.",
    )
    check.add_argument("notebook", help="the student's notebook (NN_name.ipynb)")
    check.add_argument("--solutions", default=str(SOLUTIONS),
                       help="the solution notebooks (default: the course's notebooks/ folder)")
    check.add_argument("--timeout", type=int, default=120, help="seconds per cell (default: 120)")
    check.set_defaults(handler=_run_check)
