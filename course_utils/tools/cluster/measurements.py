"""The measurements ``course cluster`` can make, each one description (``Measurement``)
registered once in ``MEASUREMENTS`` with what the help says of it (``About``): ``--measure``'s
choices, the command's help, the command and each host's process read it, and nothing else names
a measurement.

A measurement is its plans, what host 0 measures and reports (``measure``, in every host's
process, on the global devices), how the command assembles host 0's reports of every run and
link rate into one record (``assemble``: what its median over ``--runs`` is), the file it
writes and the lines it prints. Adding one is a module with its description (and the record it
writes) and its ``About`` here.
"""

from __future__ import annotations

import importlib
import statistics
import time
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, Callable, Generic, Mapping, NamedTuple, Sequence, TypeVar

from course_utils.results.cluster import ClusterSetup
from course_utils.results.meta import RunMeta, this_run
from course_utils.tools.cluster.timing import Timed


class About(NamedTuple):
    """What ``course cluster --help`` says of a measurement, beside where its description
    (``Measurement``) is: what it times, its quick and full plans, the files it writes (its
    ``output`` first), whether its file keeps every run of ``--runs`` (its readers take the
    median) rather than their median, and how many delays ``--delay`` may give it."""

    where: str
    what: str
    quick: str
    full: str
    files: tuple[str, ...]
    keeps_runs: bool = False
    delays: int = 0  # how many one-way delays --delay may give it (0: it takes no delay line)


# A description's module imports JAX: only the measurement being run is imported (as
# ``cli.COMMANDS`` does), and the help is written from these entries.
MEASUREMENTS = {
    "collectives": About(
        "course_utils.tools.cluster.collectives:MEASUREMENT",
        "step 17's collectives, two-level all-reduce, 16- against 32-bit rings, bucketing and "
        "two training steps against the link models (the default)",
        "3 sizes up to 4 MiB", "5 sizes up to 16 MiB", ("cluster.json", "cluster.png")),
    "training": About(
        "course_utils.tools.cluster.training:MEASUREMENT",
        "part four's training steps and held-out curves",
        "data parallelism, accumulation and HSDP at batch 64, curves of 1 seed",
        "every part-four strategy at batch 32, 128, 512 and 1024, curves of 3 seeds",
        ("training.json",)),
    "overlap": About(
        "course_utils.tools.cluster.overlap:MEASUREMENT",
        "step 19's backward pass with its buckets' all-reduce, and its collective matmul "
        "(needs --devices-per-host 2)",
        "a 4-layer tower of width 256", "step 19's 16-layer tower of width 512",
        ("overlap.json",), keeps_runs=True),
    "links": About(
        "course_utils.tools.cluster.links:MEASUREMENT",
        "every host sending to the next at once: the rate each link delivers against the "
        "configured one (tbf's bucket rule), and the unshaped ceiling (--link-rate unshaped)",
        "2 s a rate", "6 s a rate", ("links.json",), keeps_runs=True, delays=1),
    "diloco": About(
        "course_utils.tools.cluster.diloco:MEASUREMENT",
        "part five's DiLoCo and Streaming DiLoCo rounds against data parallelism (needs "
        "--devices-per-host 2)",
        "H = 16", "H = 16 and 32", ("diloco_cluster.json",), keeps_runs=True, delays=1),
    "latency": About(
        "course_utils.tools.cluster.latency:MEASUREMENT",
        "what a one-way delay (--delay) costs a message: the idle round trip, a ppermute "
        "ping-pong and a ring message step, with α fitted per step; the ring against "
        "recursive doubling and psum; one TCP connection's window, slow start and idle gap",
        "3 sizes up to 256 KiB, all-reduces up to 256 KiB",
        "6 sizes up to 1 MiB, all-reduces up to 4 MiB", ("latency.json",),
        keeps_runs=True, delays=16),
}
PLAN_NAMES = ("quick", "full")  # every measurement has these plans

Record = TypeVar("Record")


class HostRun(NamedTuple):
    """What host 0 reported (``result``, its JSON) for one run of the plan at one link rate and
    one-way delay (``None``: no delay line)."""

    run: int  # from 0
    link_rate: str
    result: dict
    delay_ms: float | None = None


@dataclass(frozen=True)
class Setup:
    """How the runs were made: the cluster's shape, the plan, the TCP congestion control between
    the hosts, how many times the plan ran (every rate each time), when the command started
    (``time.monotonic()``), and the one-way delays of ``--delay`` with the kind of delay line
    that made them (``delay.LINES``; none without ``--delay``)."""

    hosts: int
    devices_per_host: int
    plan: str
    tcp: str
    runs: int
    started: float
    delays: tuple[float, ...] = ()
    line: str | None = None

    def run_meta(self, name: str) -> RunMeta:
        """How measurement ``name`` was made: the command, the machine the hosts ran on (this
        interpreter), the seconds since the command started, the runs, and the package's
        version, commit and whole command line (``meta.this_run``)."""
        return this_run(f"course cluster --measure {name}", time.monotonic() - self.started,
                        self.runs)

    def cluster(self) -> ClusterSetup:
        """The cluster it ran on: the shape, the plan, the TCP congestion control between the
        hosts and the machine's default, the links' bucket (``links.BUCKET_MS``), and the delay
        line's kind and its delay (when the run used one delay; rows carry several)."""
        from course_utils.models.links import BUCKET_MS
        from course_utils.tools.cluster.netns import default_congestion_control

        return ClusterSetup(self.hosts, self.devices_per_host, self.plan, self.tcp,
                            default_congestion_control(), BUCKET_MS, self.line,
                            self.delays[0] if len(self.delays) == 1 else None)


def any_setup(setup: Setup) -> str | None:
    """A measurement that runs on any cluster: no problem with ``setup``."""
    return None


@dataclass(frozen=True)
class Measurement(Generic[Record]):
    """One cluster measurement.

    ``plans`` by name (each with the ``repeats`` a timed call is repeated); ``measure(plan,
    timed)`` runs in every host's process on the global devices and returns host 0's report
    (JSON), ``timed`` being ``timing.timer(plan["repeats"])``; ``assemble(host_runs, setup)``
    turns host 0's reports of every run and rate into the record written to ``output``;
    ``lines(record)`` is what the command prints; ``figure(record)``, if any, the figure data
    drawn beside ``output`` (same name, ``.png``); ``check(setup)`` a problem with the cluster
    asked for, or ``None``; ``unshaped`` whether ``--link-rate unshaped`` (links left as they
    are) may be among its rates."""

    name: str
    plans: Mapping[str, dict]
    measure: Callable[[dict, Timed], dict]
    assemble: Callable[[Sequence[HostRun], Setup], Record]
    output: str
    lines: Callable[[Record], list[str]]
    figure: Callable[[Record], dict] | None = None
    check: Callable[[Setup], str | None] = any_setup
    unshaped: bool = False


def measurement(name: str) -> Measurement:
    """The measurement registered as ``name``.

    Raises:
        ValueError: no measurement has that name (the message lists those that do).
    """
    if name not in MEASUREMENTS:
        raise ValueError(f"no cluster measurement is called {name!r}; the measurements are "
                         f"{', '.join(MEASUREMENTS)}")
    module, attribute = MEASUREMENTS[name].where.split(":")
    return getattr(importlib.import_module(module), attribute)


def median_of_records(records: Sequence[Any]) -> Any:
    """The cell-by-cell median of several runs' records (frozen dataclasses, and the tuples,
    dicts and numbers inside them): a float cell is the median over the runs, and every other
    cell (a size, a count, a name, ``None``) is the same in every run.

    Raises:
        ValueError: a cell other than a float differs between the runs (runs of different
            plans or shapes).

    Examples:
        >>> median_of_records([(8, 1.0, "a"), (8, 3.0, "a"), (8, 2.0, "a")])
        (8, 2.0, 'a')
        >>> median_of_records([{"bytes": 8}, {"bytes": 16}])
        Traceback (most recent call last):
        ...
        ValueError: the runs differ at bytes (8, 16): they must be runs of one plan and shape
    """
    return _median(list(records), "")


def _median(values: list, where: str) -> Any:
    first = values[0]
    if all(isinstance(v, float) for v in values):
        return statistics.median(values)
    if is_dataclass(first) and all(type(v) is type(first) for v in values):
        return replace(first, **{f.name: _median([getattr(v, f.name) for v in values],
                                                 f"{where}.{f.name}".lstrip("."))
                                 for f in fields(first)})
    if isinstance(first, tuple) and all(isinstance(v, tuple) and len(v) == len(first)
                                        for v in values):
        cells = [_median(list(c), f"{where}[{i}]") for i, c in enumerate(zip(*values))]
        return type(first)(*cells) if hasattr(first, "_fields") else tuple(cells)
    if isinstance(first, dict) and all(isinstance(v, dict) and v.keys() == first.keys()
                                       for v in values):
        return {k: _median([v[k] for v in values], f"{where}.{k}".lstrip(".")) for k in first}
    if any(v != first for v in values):
        shown = ", ".join(map(repr, values))
        raise ValueError(f"the runs differ at {where or 'the top'} ({shown}): they must be runs "
                         "of one plan and shape")
    return first
