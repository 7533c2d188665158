"""How a saved run was made, one record for every saved run (``RunMeta``): the command, the
software and machine it ran on (``Machine``), the seconds it took and the runs it holds.
What only one kind of run has (a cluster's shape, a plan) sits beside it in that run's record.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    """

    command: str
    machine: Machine
    seconds: float
    runs: int = 1


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
