"""``course cluster``: the same collectives timed across hosts that are network namespaces
joined by rate-limited links (``netns``), with one process per host on JAX's multi-process
runtime (gloo). Writes ``cluster.json`` and ``cluster.png``; always removes the namespaces,
links and files it made (on success, a failed or hung process, the time limit and Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

from course_utils.constants import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE
from course_utils.tools.cli import positive_int_arg
from course_utils.tools.processes import first_exit, spawn, stop

PORT = 47301  # the coordinator's port inside host 0's namespace (nothing else listens there)


class _Stopped(Exception):
    """SIGTERM arrived: leave through the same cleanup as Ctrl-C."""


def _raise_stopped(*_) -> None:
    raise _Stopped


class _Failed(Exception):
    """One run failed; the message is the line to print."""


def _one_rate(args: argparse.Namespace, rate: str, deadline: float) -> dict:
    """One cluster shaped at ``rate``: set up, one worker per host, results, torn down."""
    from course_utils.tools.cluster.netns import Cluster, host_command

    popens, files = [], []
    cluster = Cluster(args.hosts, rate, congestion_control=args.tcp)
    try:
        with cluster as hosts, tempfile.TemporaryDirectory() as logs:
            coordinator = f"{hosts[0].address}:{PORT}"
            for i, host in enumerate(hosts):
                argv = [sys.executable, "-m", "course_utils.tools.cluster.worker",
                        "--process-id", str(i), "--processes", str(len(hosts)),
                        "--devices", str(args.devices_per_host), "--coordinator", coordinator,
                        "--plan", args.plan]
                files += [open(Path(logs) / f"out{i}", "w+"), open(Path(logs) / f"err{i}", "w+")]
                popens.append(spawn(host_command(host, argv), *files[-2:]))
            for done in first_exit(popens, max(0.0, deadline - time.monotonic())):
                if done.returncode != 0:
                    i = popens.index(done)
                    tail = (Path(logs) / f"err{i}").read_text().strip().splitlines()[-3:]
                    raise _Failed(f"host {i}'s process exited with status {done.returncode}"
                                  + (f": {' / '.join(tail)}" if tail else ""))
            lines = (Path(logs) / "out0").read_text().splitlines()
            result = next((json.loads(x) for x in lines if x.startswith("{")), None)
            if result is None:
                raise _Failed("host 0 finished without results")
    finally:
        stop(popens)
        for f in files:
            f.close()
    result.pop("event")
    return {"hosts": args.hosts, "devices_per_host": args.devices_per_host, "link_rate": rate,
            "tcp": args.tcp, **result}


def run_cluster(args: argparse.Namespace, say) -> tuple[int, dict | None]:
    """Every rate of ``--link-rate`` in turn; ``(exit status, results)``. Whatever happens,
    nothing the runs made is left."""
    from course_utils.models.links import check_rate
    from course_utils.tools.cluster.netns import (
        ClusterError,
        check_can_run,
        check_congestion_control,
    )

    problem = check_can_run()
    if problem:
        say(f"error: {problem}")
        return EXIT_USAGE, None
    try:
        rates = [check_rate(r) for r in args.link_rate.split(",")]
        check_congestion_control(args.tcp)
        if not 2 <= args.hosts <= 200:
            raise ValueError(f"--hosts must be from 2 to 200, got {args.hosts}")
    except ValueError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE, None
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    started = time.monotonic()
    runs = []
    try:
        for rate in rates:
            runs.append(_one_rate(args, rate, started + args.timeout))
            say(f"{rate}: done")
    except TimeoutError:
        say(f"error: the plan ran past --timeout {args.timeout:.0f} s; the processes were "
            "stopped and everything was removed (try --plan quick or a larger --timeout)")
        return EXIT_FAILED, None
    except (KeyboardInterrupt, _Stopped):
        say("interrupted: the processes were stopped and every namespace, link and file removed")
        return EXIT_INTERRUPTED, None
    except (ClusterError, _Failed) as exc:
        say(f"error: {exc}; everything the run made was removed")
        return EXIT_FAILED, None
    finally:
        signal.signal(signal.SIGTERM, previous)
    return EXIT_OK, {"hosts": args.hosts, "devices_per_host": args.devices_per_host,
                     "plan": args.plan, "tcp": args.tcp, "versions": _versions(),
                     "seconds": time.monotonic() - started, "runs": runs}


def _versions() -> dict:
    """The Python, jax and jaxlib versions the hosts ran (the same interpreter as this one)."""
    from importlib.metadata import version

    return {"python": sys.version.split()[0], "jax": version("jax"), "jaxlib": version("jaxlib")}


def _run(args: argparse.Namespace) -> int:
    from course_utils.figures.plot import plot_figure
    from course_utils.results.cluster import figure_data, summary_lines

    status, results = run_cluster(args, lambda line: print(line, flush=True))
    if results is None:
        return status
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps(results, indent=1))
    (out / "cluster.png").write_bytes(plot_figure(figure_data(results)).png())
    for run in results["runs"]:
        for line in summary_lines(run):
            print(line)
    from course_utils.tools.cluster.netns import leftovers

    left = leftovers()
    if left:
        print(f"error: left behind: {', '.join(left)}; remove them with ip netns del")
        return EXIT_FAILED
    print(f"wrote cluster.json and cluster.png in {out}; no namespace, link or file is left")
    return EXIT_OK


def add_cluster_parser(sub) -> None:
    """Register ``course cluster``."""
    cluster = sub.add_parser(
        "cluster",
        help="time collectives across hosts on one machine (network namespaces, shaped links)",
        description="Create HOSTS network namespaces joined by a bridge, shape each host's link "
        "with tc tbf, run one JAX process per host (gloo) and time the collectives, the "
        "two-level all-reduce, 16-bit against 32-bit rings and bucketing against the link "
        "models. Needs root. Everything it creates is removed when it ends.",
    )
    cluster.add_argument("--hosts", type=positive_int_arg, default=2, help="hosts (default 2)")
    cluster.add_argument("--devices-per-host", type=positive_int_arg, default=2,
                         help="logical CPU devices per host (default 2)")
    cluster.add_argument("--link-rate", default="200mbit",
                         help="each host's outgoing link, in tc units (default 200mbit); "
                         "several, comma-separated, run the plan at each rate")
    cluster.add_argument("--plan", choices=("quick", "full"), default="quick",
                         help="quick: 3 sizes up to 4 MiB; full: 5 sizes up to 16 MiB")
    cluster.add_argument("--tcp", default="reno",
                         help="TCP congestion control between the hosts: reno (default; a "
                         "standing queue keeps the link busy while there is data), cubic or bbr")
    cluster.add_argument("--timeout", type=float, default=900.0,
                         help="stop everything after this many seconds (default 900)")
    cluster.add_argument("--out", default="build/cluster",
                         help="folder for cluster.json and cluster.png (default build/cluster)")
    cluster.set_defaults(handler=_run)
