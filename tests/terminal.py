"""Start a command as a shell starts one that a user can stop with Ctrl-C.

A child keeps its parent's ignored and blocked signals, and a pytest worker may have either (a
background job of a script ignores SIGINT), so a command it starts would never see the test's
Ctrl-C. The prefix below sets SIGINT to its default and unblocks it, then execs the command in the
same process (no fork in the multithreaded test process)."""

import sys

_RESET = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
          "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
          "os.execv(sys.argv[1], sys.argv[1:])")


def as_from_a_terminal(argv: list[str]) -> list[str]:
    """``argv`` (its first item a path to an executable) run with SIGINT handled and unblocked."""
    return [sys.executable, "-c", _RESET, *argv]
