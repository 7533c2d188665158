"""The one error type of the ``course`` command and its one printer.

Every command raises ``CourseError`` with a one-line message that says what to do, and the exit
status it means; ``course_utils.tools.cli.main`` catches it once, for every command, and prints
``course <command>: error: <message>`` on stderr (the prefix ``argparse`` gives its own usage
errors), so a reader or a script sees the same shape from every command.
"""

from __future__ import annotations

import sys
from typing import TextIO

from course_utils.constants import EXIT_FAILED, EXIT_USAGE


class CourseError(Exception):
    """A ``course`` command cannot go on; the message is one line that says what to do.

    Args:
        message: the line, without the ``course <command>: error:`` prefix.
        status: the command's exit status (``EXIT_FAILED`` by default; ``EXIT_USAGE`` for bad
            input, ``EXIT_INTERRUPTED`` after Ctrl-C).

    Examples:
        >>> error = CourseError("--hosts must be from 2 to 200, got 1", EXIT_USAGE)
        >>> str(error), error.status
        ('--hosts must be from 2 to 200, got 1', 2)
    """

    def __init__(self, message: str, status: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.status = status


def usage(problem: Exception | str) -> CourseError:
    """Bad input (a message, or a ``ValueError``, ``FileNotFoundError``, … to pass on) as a
    ``CourseError`` with the usage status: ``raise usage(exc) from None``.

    Examples:
        >>> usage(ValueError("--repeats must be a positive integer, got 0")).status
        2
    """
    return CourseError(str(problem), EXIT_USAGE)


def report(command: str, error: CourseError, stream: TextIO | None = None) -> int:
    """Print ``error`` as ``course <command>: error: <message>`` (on stderr unless ``stream``);
    return its exit status.

    Examples:
        >>> report("bench", CourseError("no repeats to combine"), sys.stdout)
        course bench: error: no repeats to combine
        1
    """
    print(f"course {command}: error: {error}", file=sys.stderr if stream is None else stream,
          flush=True)
    return error.status
