"""How a saved run was made, one record for every saved run (``RunMeta``): the command, the
software and machine it ran on (``Machine``), the seconds it took and the runs it holds, and,
in runs made since 0.7.0, the package's version, its commit (and whether the checkout had
changes) and the whole command line. ``this_run`` fills every field.
What only one kind of run has (a cluster's shape, a plan) sits beside it in that run's record.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence


@dataclass(frozen=True)
class Machine:
    """The software and the machine a run was made on; a field the run that made the file did
    not record is ``None`` (and left out of the file).

    Attributes:
        python: the Python version.
        jax: the jax version.
        jaxlib: the jaxlib version.
        numpy: the NumPy version.
        cores: ``os.cpu_count()``.
        cpus_usable: the CPUs the process could run on.
        cpu_model: the CPU's model name.
        platform: ``platform.platform()``.
    """

    python: str
    jax: str
    jaxlib: str
    numpy: str | None = None
    cores: int | None = None
    cpus_usable: int | None = None
    cpu_model: str | None = None
    platform: str | None = None


@dataclass(frozen=True)
class RunMeta:
    """How a saved run was made.

    Attributes:
        command: the command that made it (``course bench``, ``course cluster --measure
            training``, …).
        machine: what it ran on.
        seconds: how long it took (over all its runs).
        runs: the runs of one plan it holds, or whose medians it holds.
        package: the course-utils version that made it (``None``: not recorded, or the
            package was not installed).
        commit: the git commit of the checkout the package ran from (``None``: not
            recorded, or not a checkout, or no git).
        dirty: whether that checkout had uncommitted changes (``None`` where ``commit`` is).
        command_line: the whole command line, arguments included.
    """

    command: str
    machine: Machine
    seconds: float
    runs: int = 1
    package: str | None = None
    commit: str | None = None
    dirty: bool | None = None
    command_line: str | None = None


def this_run(command: str, seconds: float, runs: int = 1,
             argv: Sequence[str] | None = None) -> RunMeta:
    """How the run this process makes was made: ``command``, this machine, the package's
    version and commit, and the whole command line (``argv``, default ``sys.argv``)."""
    commit, dirty = checkout_state(Path(__file__).resolve().parents[2])
    return RunMeta(command, this_machine(), seconds, runs, package_version(), commit, dirty,
                   command_line(sys.argv if argv is None else argv))


def package_version() -> str | None:
    """The installed course-utils version, or ``None`` where it is not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("course-utils")
    except PackageNotFoundError:
        return None


def checkout_state(folder: Path) -> tuple[str | None, bool | None]:
    """The commit checked out at ``folder`` and whether its tracked or new files changed;
    ``(None, None)`` where it is no git checkout, git is absent or fails."""
    if not (folder / ".git").exists():
        return None, None
    try:
        commit, status = (subprocess.run(["git", "-C", str(folder), *args], capture_output=True,
                                         text=True, timeout=30, check=True).stdout
                          for args in (["rev-parse", "HEAD"], ["status", "--porcelain"]))
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit.strip(), bool(status.strip())


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as one shell line, the program by its name (``course`` for the ``course``
    command, however it was started).

    Examples:
        >>> command_line(["/venv/bin/course", "cluster", "--out", "build/a b"])
        "course cluster --out 'build/a b'"
        >>> command_line(["/repo/course_utils/tools/cli.py", "bench", "--quick"])
        'course bench --quick'
        >>> command_line(["scripts/diloco_sweep.py", "--seeds", "3"])
        'python scripts/diloco_sweep.py --seeds 3'
    """
    program = Path(argv[0])
    if program.name == "course" or program.parts[-3:] == ("course_utils", "tools", "cli.py"):
        name = ["course"]
    elif program.suffix == ".py":
        name = ["python", str(program)]
    else:
        name = [program.name]
    return shlex.join([*name, *argv[1:]])


def this_machine() -> Machine:
    """The ``Machine`` this process runs on."""
    import os
    import platform
    from importlib.metadata import version
    from pathlib import Path

    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    model = next((line.split(":", 1)[1].strip() for line in lines
                  if line.startswith("model name")), platform.processor())
    return Machine(python=platform.python_version(), jax=version("jax"),
                   jaxlib=version("jaxlib"), numpy=version("numpy"), cores=os.cpu_count(),
                   cpus_usable=len(os.sched_getaffinity(0)), cpu_model=model,
                   platform=platform.platform())
