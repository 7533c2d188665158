"""``course cluster``: one of the registered measurements (``measurements``, whose entries write
its help; step 17's collectives by default) timed across hosts that are network namespaces joined
by rate-limited links (``netns``), with one process per host on JAX's multi-process runtime
(gloo). Writes the measurement's files (``cluster.json`` and ``cluster.png`` for the
collectives); always removes the namespaces, links and files it made (on success, a failed or
hung process, the time limit and Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import TypeVar

from course_utils.constants import EXIT_INTERRUPTED, EXIT_OK
from course_utils.results.links import UNSHAPED
from course_utils.results.records import save
from course_utils.tools.cli import positive_int_arg, positive_seconds_arg
from course_utils.tools.cluster.measurements import (
    MEASUREMENTS,
    PLAN_NAMES,
    HostRun,
    Measurement,
    Setup,
    measurement,
)
from course_utils.tools.errors import CourseError, usage
from course_utils.tools.processes import first_exit, spawn, stop

PORT = 47301  # the coordinator's port inside host 0's namespace (nothing else listens there)
# what each host runs, after the interpreter and before ``--process-id I …`` (a test swaps in a
# wrapper that fails on purpose)
WORKER = ("-m", "course_utils.tools.cluster.worker")

Record = TypeVar("Record")


def _host_result(args: argparse.Namespace, rate: str, deadline: float,
                 delay_ms: float | None = None, line: str = "netem") -> dict:
    """One cluster shaped at ``rate`` (with a one-way delay ``delay_ms`` made by the delay
    line ``line``): set up, one worker per host, host 0's results, torn down."""
    from course_utils.tools.cluster.netns import Cluster, host_command

    popens, files = [], []
    cluster = Cluster(args.hosts, None if rate == UNSHAPED else rate,
                      congestion_control=args.tcp, delay_ms=delay_ms, line=line)
    try:
        with cluster as hosts, tempfile.TemporaryDirectory() as logs:
            coordinator = f"{hosts[0].address}:{PORT}"
            for i, host in enumerate(hosts):
                argv = [sys.executable, *WORKER,
                        "--process-id", str(i), "--processes", str(len(hosts)),
                        "--devices", str(args.devices_per_host), "--coordinator", coordinator,
                        "--plan", args.plan, "--measure", args.measure]
                files += [open(Path(logs) / f"out{i}", "w+"), open(Path(logs) / f"err{i}", "w+")]
                popens.append(spawn(host_command(host, argv), *files[-2:]))
            for done in first_exit(popens, max(0.0, deadline - time.monotonic())):
                if done.returncode != 0:
                    i = popens.index(done)
                    tail = (Path(logs) / f"err{i}").read_text().strip().splitlines()[-3:]
                    raise CourseError(f"host {i}'s process exited with status {done.returncode}"
                                      + (f": {' / '.join(tail)}" if tail else ""))
            lines = (Path(logs) / "out0").read_text().splitlines()
            result = next((json.loads(x) for x in lines if x.startswith("{")), None)
            if result is None:
                raise CourseError("host 0 finished without results")
    finally:
        stop(popens)
        for f in files:
            f.close()
    result.pop("event")
    return result


def run_cluster(chosen: Measurement[Record], args: argparse.Namespace, say) -> Record:
    """The measurement ``chosen`` at every rate of ``--link-rate`` in turn, ``--runs`` times
    (every rate, then again), each finished rate passed to ``say``; host 0's reports assembled
    into the measurement's record. Whatever happens, nothing the runs made is left.

    Raises:
        CourseError: bad arguments, no root, a host's process failed or hung past
            ``--timeout``, or Ctrl-C / SIGTERM (the message says everything was removed).
    """
    from course_utils.models.links import check_delay, check_rate
    from course_utils.tools.cluster.delay import choose_line
    from course_utils.tools.cluster.netns import PREFIX, check_can_run, check_congestion_control

    try:  # bad input first, before asking for root or building anything
        rates = [r if r == UNSHAPED else check_rate(r) for r in args.link_rate.split(",")]
        if UNSHAPED in rates and not chosen.unshaped:
            raise ValueError(f"--link-rate {UNSHAPED} is for --measure links; give rates like "
                             "200mbit")
        delays = () if args.delay is None else tuple(map(check_delay, args.delay.split(",")))
        _check_delays(chosen, delays)
    except ValueError as exc:
        raise usage(exc) from None
    problem = check_can_run()
    if problem:
        raise usage(problem)
    try:
        line = choose_line(f"{PREFIX}probe") if delays else None
    except ValueError as exc:
        raise usage(exc) from None
    setup = Setup(hosts=args.hosts, devices_per_host=args.devices_per_host, plan=args.plan,
                  tcp=args.tcp, runs=args.runs, started=time.monotonic(), delays=delays,
                  line=line)
    try:
        check_congestion_control(args.tcp)
        if not 2 <= args.hosts <= 200:
            raise ValueError(f"--hosts must be from 2 to 200, got {args.hosts}")
        problem = chosen.check(setup)
        if problem:
            raise ValueError(problem)
    except ValueError as exc:
        raise usage(exc) from None
    # SIGTERM leaves through the same cleanup as Ctrl-C
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    for warning in _above_ceiling(line, rates):
        say(warning)
    host_runs = []
    cells = [(r, d, rate) for r in range(args.runs) for d in (delays or (None,)) for rate in rates]
    try:
        for run, delay_ms, rate in cells:
            result = _host_result(args, rate, setup.started + args.timeout, delay_ms,
                                  line or "netem")
            host_runs.append(HostRun(run, rate, result, delay_ms))
            say(f"{rate}" + ("" if delay_ms is None else f", {delay_ms:g} ms one way")
                + ": done" + (f" (run {run + 1} of {args.runs})" if args.runs > 1 else ""))
    except TimeoutError:
        raise CourseError(f"the plan ran past --timeout {args.timeout:.0f} s; the processes "
                          "were stopped and everything was removed (try --plan quick or a "
                          "larger --timeout)") from None
    except KeyboardInterrupt:
        raise CourseError("interrupted: the processes were stopped and every namespace, link "
                          "and file removed", EXIT_INTERRUPTED) from None
    except CourseError as exc:
        raise CourseError(f"{exc}; everything the run made was removed", exc.status) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return chosen.assemble(host_runs, setup)


def _check_delays(chosen: Measurement, delays: tuple[float, ...]) -> None:
    """A ``ValueError`` if ``chosen`` cannot take that many delays."""
    takes = MEASUREMENTS[chosen.name].delays
    if delays and not takes:
        named = [name for name, a in MEASUREMENTS.items() if a.delays]
        raise ValueError(f"--measure {chosen.name} cannot use a delay line; --delay is for "
                         f"--measure {' or '.join(named)}")
    if len(delays) > takes:
        raise ValueError(f"--measure {chosen.name} takes "
                         + ("one delay at a time" if takes == 1 else f"at most {takes} delays")
                         + f", got {len(delays)}")


def _above_ceiling(line: str | None, rates: list[str]) -> list[str]:
    """A warning for each rate above the relay's measured ceiling (``delay.TUN_CEILING``)."""
    from course_utils.models.links import rate_bytes_per_s
    from course_utils.tools.cluster.delay import TUN_CEILING

    if line != "tun":
        return []
    return [f"warning: {rate} is above the relay's ceiling of {TUN_CEILING} (every link busy "
            "at once): the links may deliver less than it" for rate in rates
            if rate == UNSHAPED or rate_bytes_per_s(rate) > rate_bytes_per_s(TUN_CEILING)]


def _run(args: argparse.Namespace) -> int:
    from course_utils.tools.cluster.netns import leftovers

    chosen = measurement(args.measure)
    results = run_cluster(chosen, args, lambda line: print(line, flush=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    save(results, out / chosen.output)
    written = [chosen.output]
    if chosen.figure is not None:
        from course_utils.figures.plot import plot_figure

        figure = Path(chosen.output).with_suffix(".png").name
        (out / figure).write_bytes(plot_figure(chosen.figure(results)).png())
        written.append(figure)
    for line in chosen.lines(results):
        print(line)
    left = leftovers()
    if left:
        raise CourseError(f"left behind: {', '.join(left)}; remove them with ip netns del")
    print(f"wrote {' and '.join(written)} in {out}; no namespace, link or file is left")
    return EXIT_OK


def add_cluster_parser(sub) -> None:
    """Register ``course cluster``; its help is written from the measurements' ``About``."""
    about = MEASUREMENTS.items()
    kept = [name for name, a in about if a.keeps_runs]
    cluster = sub.add_parser(
        "cluster",
        help="time collectives and training across hosts on one machine (network namespaces, "
        "shaped links)",
        description="Create HOSTS network namespaces joined by a bridge, shape each host's link "
        "with tc tbf, run one JAX process per host (gloo) and time one measurement (--measure): "
        + "; ".join(f"{name}: {a.what}" for name, a in about)
        + ". Needs root. Everything it creates is removed when it ends.",
    )
    cluster.add_argument("--hosts", type=positive_int_arg, default=2, help="hosts (default 2)")
    cluster.add_argument("--devices-per-host", type=positive_int_arg, default=2,
                         help="logical CPU devices per host (default 2)")
    cluster.add_argument("--link-rate", default="200mbit",
                         help="each host's outgoing link, in tc units (default 200mbit); "
                         "several, comma-separated, run the plan at each rate; "
                         f"{UNSHAPED}: not shaped (--measure links)")
    cluster.add_argument("--delay", default=None, metavar="MS",
                         help="a one-way delay between any two hosts, in milliseconds, applied "
                         "once per direction (netem where the kernel has it, else TUN devices "
                         "and a relay); several, comma-separated, run the plan at each "
                         "(--measure " + " and ".join(
                             name for name, a in about if a.delays) + ")")
    cluster.add_argument("--plan", choices=PLAN_NAMES, default="quick",
                         help="quick (the default) or full: " + "; ".join(
                             f"{name}: {a.quick}, or {a.full}" for name, a in about))
    cluster.add_argument("--measure", choices=MEASUREMENTS, default="collectives",
                         help=f"what to time: {', '.join(MEASUREMENTS)} (default collectives)")
    cluster.add_argument("--runs", type=positive_int_arg, default=1,
                         help="run the plan this many times, every rate in turn each time "
                         "(default 1); the file holds the median of the runs, cell by cell"
                         + (f" ({', '.join(kept[:-1])} and {kept[-1]} keep every run, and their "
                            "readers take the median)" if len(kept) > 1 else ""))
    cluster.add_argument("--tcp", default="reno",
                         help="TCP congestion control between the hosts: reno (default; a "
                         "standing queue keeps the link busy while there is data), cubic or bbr")
    cluster.add_argument("--timeout", type=positive_seconds_arg, default=900.0,
                         help="stop everything after this many seconds (default 900)")
    cluster.add_argument("--out", default="build/cluster",
                         help="folder for the measurement's files (" + "; ".join(
                             f"{name}: {' and '.join(a.files)}" for name, a in about)
                         + "; default build/cluster)")
    cluster.set_defaults(handler=_run)
