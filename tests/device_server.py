"""One Python process with n logical CPU devices that runs snippets for the tests.

The ``run_with_devices`` fixture (tests/conftest.py) starts one per device count per session,
instead of a fresh interpreter (and a fresh JAX start, 5-21 s) per call. Each request is one JSON
line on stdin, ``{"code": "..."}``; the server runs the code in a fresh namespace (the names of
``from course_utils import *``, ``json``, ``np``, ``jax``) and answers one JSON line: ``{"ok":
true, "stdout": "..."}``, or ``{"ok": false, "stdout": "...", "traceback": "..."}`` if it raised.
Anything written to the process's own stdout below Python (XLA's C++ logs) goes to stderr, so
the answers' channel carries answers only.

    python tests/device_server.py N
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import traceback

PREAMBLE = "from course_utils import *\nimport json, numpy as np, jax\nuse_cpu_devices({n})\n"


def serve(n: int) -> None:
    """Answer requests on stdin until it closes."""
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray C-level output must not reach the answers
    preamble = PREAMBLE.format(n=n)
    exec(compile(preamble, "<preamble>", "exec"), {})  # start JAX once, before any request
    answers.write(json.dumps({"ok": True, "stdout": "ready\n"}) + "\n")
    answers.flush()
    for line in sys.stdin:
        code = preamble + json.loads(line)["code"]
        captured = io.StringIO()
        answer: dict = {"ok": True}
        try:
            with contextlib.redirect_stdout(captured):
                exec(compile(code, "<snippet>", "exec"), {"__name__": "__snippet__"})
        except BaseException:  # noqa: B036 - a snippet's SystemExit is reported, not obeyed
            answer = {"ok": False, "traceback": traceback.format_exc()}
        answer["stdout"] = captured.getvalue()
        answers.write(json.dumps(answer) + "\n")
        answers.flush()


if __name__ == "__main__":
    serve(int(sys.argv[1]))
