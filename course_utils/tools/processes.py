"""Worker processes: start them, wait for them under one deadline, stop them.

``course launch`` and ``course bench`` both start workers (``python -m course_utils.tools.…``) that
run JAX, so the parent never starts a JAX backend; both use these helpers.
"""

from __future__ import annotations

import queue
import subprocess
import threading
import time
from typing import IO, Sequence

STOP_SECONDS = 5  # a terminated worker gets this long before it is killed


def spawn(command: Sequence[str], stdout: IO | int, stderr: IO | int) -> subprocess.Popen:
    """Start ``command`` with no stdin; ``stdout``/``stderr`` are files or ``subprocess.PIPE``."""
    return subprocess.Popen(
        list(command),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=stderr,
        text=stdout == subprocess.PIPE,
    )


def stop(popens: Sequence[subprocess.Popen], grace_s: float = STOP_SECONDS) -> None:
    """Terminate the processes still running (only these), then kill any that linger."""
    running = [p for p in popens if p.poll() is None]
    for p in running:
        p.terminate()
    deadline = time.monotonic() + grace_s
    for p in running:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def first_exit(popens: Sequence[subprocess.Popen], seconds: float):
    """Yield each process as it exits, in exit order; raise ``TimeoutError`` at the deadline.

    The caller decides what an exit means (and stops the rest, e.g. at the first failure).
    """
    exited: queue.Queue[subprocess.Popen] = queue.Queue()
    for p in popens:
        threading.Thread(target=lambda p=p: (p.wait(), exited.put(p)), daemon=True).start()
    deadline = time.monotonic() + seconds
    for _ in popens:
        try:
            yield exited.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError(f"still running after {seconds:.0f} s") from None
