"""Wall-clock time of a fresh command, shared by the benchmark scripts."""

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def wall(cmd: list[str], env: dict | None = None) -> float:
    """Seconds one command takes, run in the repository with ``env`` added to the environment;
    it must succeed."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})})
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return time.perf_counter() - start
