"""The ``course`` command: a registry of subcommands, each registered by the module that runs it."""

from __future__ import annotations

import argparse
import importlib
import sys

from course_utils.validate import positive_int

# Each entry registers one subcommand on the subparsers object; modules import lazily inside
# handlers.
COMMANDS = [
    "course_utils.tools.runner:add_run_parser",
    "course_utils.tools.launch:add_launch_parser",
    "course_utils.tools.bench:add_bench_parser",
    "course_utils.tools.student:add_student_parser",
    "course_utils.tools.submission:add_check_parser",
    "course_utils.tools.book:add_book_parser",
]


def positive_int_arg(text: str) -> int:
    """An ``argparse`` type: a positive integer, or the parser's one-line error."""
    try:
        return positive_int("", int(text))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None


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


def build_parser() -> argparse.ArgumentParser:
    """The ``course`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="course", description="The distributed-03 course unit.")
    sub = parser.add_subparsers(dest="command", required=True)
    for entry in COMMANDS:
        module, name = entry.split(":")
        getattr(importlib.import_module(module), name)(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the ``course`` command with ``argv`` (default: the command line); return its exit
    status.
    """
    args = build_parser().parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
