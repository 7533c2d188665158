"""The ``course`` command: a registry of subcommands, each registered by the module that runs it."""

from __future__ import annotations

import argparse
import importlib
import sys

from course_utils.constants import EXIT_INTERRUPTED
from course_utils.tools.errors import CourseError, report
from course_utils.validate import positive_int

# Each entry registers one subcommand on the subparsers object. Only the module of the command
# being run is imported (nbformat alone takes over a second to import), so `course launch`
# starts quickly; `course --help` imports them all.
COMMANDS = {
    "run": "course_utils.tools.notebooks.run:add_run_parser",
    "launch": "course_utils.tools.launch.command:add_launch_parser",
    "bench": "course_utils.tools.bench.command:add_bench_parser",
    "student": "course_utils.tools.notebooks.student:add_student_parser",
    "check-submission": "course_utils.tools.notebooks.submission:add_check_parser",
    "book": "course_utils.tools.notebooks.book:add_book_parser",
    "cluster": "course_utils.tools.cluster.command:add_cluster_parser",
}


def positive_int_arg(text: str) -> int:
    """An ``argparse`` type: a positive integer, or the parser's one-line error."""
    try:
        return positive_int("", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None


def positive_seconds_arg(text: str) -> float:
    """An ``argparse`` type: a positive, finite number of seconds, or the parser's one-line
    error.

    Examples:
        >>> positive_seconds_arg("1.5")
        1.5
        >>> positive_seconds_arg("0")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: must be a positive number of seconds, got '0'
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text!r}")
    return seconds


def progress_bar(console, *, with_eta: bool = False):
    """A transient rich progress bar: description, bar, done/total, elapsed (and ETA, last note)."""
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = [TextColumn("{task.description}"), BarColumn(),
               TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn()]
    if with_eta:
        columns += [TimeRemainingColumn(), TextColumn("[dim]{task.fields[last]}")]
    return Progress(*columns, console=console, transient=True)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``course`` parser with ``command`` registered, or every subcommand if it is not one."""
    parser = argparse.ArgumentParser(prog="course", description="The distributed-03 course unit.")
    sub = parser.add_subparsers(dest="command", required=True)
    entries = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for entry in entries:
        module, name = entry.split(":")
        getattr(importlib.import_module(module), name)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``course`` command with ``argv`` (default: the command line); return its exit
    status. A ``CourseError`` from any command is printed here, once, by ``report``; Ctrl-C
    that no command caught exits with ``EXIT_INTERRUPTED`` too.
    """
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return args.handler(args)
    except CourseError as error:
        return report(args.command, error)
    except KeyboardInterrupt:
        return report(args.command, CourseError("interrupted", EXIT_INTERRUPTED))


if __name__ == "__main__":
    sys.exit(main())
