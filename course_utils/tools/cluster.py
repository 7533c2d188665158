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


def run_cluster(args: argparse.Namespace, say) -> tuple[int, dict | None]:
    """Set up the hosts, run one worker per host, tear down; ``(exit status, results)``."""
    from course_utils.tools.netns import Cluster, ClusterError, check_can_run, check_rate

    problem = check_can_run()
    if problem:
        say(f"error: {problem}")
        return EXIT_USAGE, None
    try:
        check_rate(args.link_rate)
        cluster = Cluster(args.hosts, args.link_rate)
    except ValueError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE, None
    previous = signal.signal(signal.SIGTERM, _raise_stopped)
    popens, started = [], time.monotonic()
    try:
        with cluster as hosts, tempfile.TemporaryDirectory() as logs:
            coordinator = f"{hosts[0].address}:{PORT}"
            for i, host in enumerate(hosts):
                argv = [sys.executable, "-m", "course_utils.tools.cluster_worker",
                        "--process-id", str(i), "--processes", str(len(hosts)),
                        "--devices", str(args.devices_per_host), "--coordinator", coordinator,
                        "--plan", args.plan]
                out = open(Path(logs) / f"out{i}", "w+")
                err = open(Path(logs) / f"err{i}", "w+")
                popens.append(spawn(cluster.command(host, argv), out, err))
            for done in first_exit(popens, args.timeout):
                if done.returncode != 0:
                    i = popens.index(done)
                    tail = (Path(logs) / f"err{i}").read_text().strip().splitlines()[-3:]
                    say(f"error: host {i}'s process exited with status {done.returncode}"
                        + (f": {' / '.join(tail)}" if tail else "")
                        + "; everything it made was removed")
                    return EXIT_FAILED, None
            lines = (Path(logs) / "out0").read_text().splitlines()
            result = next((json.loads(x) for x in lines if x.startswith("{")), None)
            if result is None:
                say("error: host 0 finished without results; everything was removed")
                return EXIT_FAILED, None
    except TimeoutError:
        say(f"error: the plan ran past --timeout {args.timeout:.0f} s; the processes were "
            "stopped and everything was removed (try --plan quick or a larger --timeout)")
        return EXIT_FAILED, None
    except (KeyboardInterrupt, _Stopped):
        say("interrupted: the processes were stopped and every namespace, link and file removed")
        return EXIT_INTERRUPTED, None
    except ClusterError as exc:
        say(f"error: {exc}")
        return EXIT_FAILED, None
    finally:
        stop(popens)
        signal.signal(signal.SIGTERM, previous)
    result.pop("event")
    return EXIT_OK, {"hosts": args.hosts, "devices_per_host": args.devices_per_host,
                     "link_rate": args.link_rate, "plan": args.plan,
                     "seconds": time.monotonic() - started, **result}


def _run(args: argparse.Namespace) -> int:
    from course_utils.cluster_results import figure_data, summary_lines

    status, results = run_cluster(args, lambda line: print(line, flush=True))
    if results is None:
        return status
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.json").write_text(json.dumps(results, indent=1))
    from course_utils.figures import plot_figure

    plot_figure(figure_data(results)).savefig(out / "cluster.png", dpi=110)
    for line in summary_lines(results):
        print(line)
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
                         help="each host's outgoing link, in tc units (default 200mbit)")
    cluster.add_argument("--plan", choices=("quick", "full"), default="quick",
                         help="quick: 3 sizes up to 4 MiB; full: 5 sizes up to 16 MiB")
    cluster.add_argument("--timeout", type=float, default=900.0,
                         help="stop everything after this many seconds (default 900)")
    cluster.add_argument("--out", default="build/cluster",
                         help="folder for cluster.json and cluster.png (default build/cluster)")
    cluster.set_defaults(handler=_run)
