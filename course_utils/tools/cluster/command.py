"""``course cluster``: the same collectives timed across hosts that are network namespaces
joined by rate-limited links (``netns``), with one process per host on JAX's multi-process
runtime (gloo). Writes ``cluster.json`` and ``cluster.png``; always removes the namespaces,
links and files it made (on success, a failed or hung process, the time limit and Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from course_utils.constants import EXIT_INTERRUPTED, EXIT_OK
from course_utils.results.cluster import ClusterResults, ClusterRun, ClusterSetup
from course_utils.results.meta import RunMeta, this_machine
from course_utils.results.records import from_json, save, to_json
from course_utils.tools.cli import positive_int_arg
from course_utils.tools.errors import CourseError, usage
from course_utils.tools.processes import first_exit, spawn, stop

PORT = 47301  # the coordinator's port inside host 0's namespace (nothing else listens there)
# what each host runs, after the interpreter and before ``--process-id I …`` (a test swaps in a
# wrapper that fails on purpose)
WORKER = ("-m", "course_utils.tools.cluster.worker")


def _host_result(args: argparse.Namespace, rate: str, deadline: float) -> dict:
    """One cluster shaped at ``rate``: set up, one worker per host, host 0's results, torn
    down."""
    from course_utils.tools.cluster.netns import Cluster, host_command

    popens, files = [], []
    cluster = Cluster(args.hosts, rate, congestion_control=args.tcp)
    try:
        with cluster as hosts, tempfile.TemporaryDirectory() as logs:
            coordinator = f"{hosts[0].address}:{PORT}"
            for i, host in enumerate(hosts):
                argv = [sys.executable, *WORKER,
                        "--process-id", str(i), "--processes", str(len(hosts)),
                        "--devices", str(args.devices_per_host), "--coordinator", coordinator,
                        "--plan", args.plan, "--measure", _measure(args)]
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


def _measure(args: argparse.Namespace) -> str:
    return getattr(args, "measure", "collectives")


def run_cluster(args: argparse.Namespace, say) -> ClusterResults | list[dict]:
    """Every rate of ``--link-rate`` in turn, each finished rate passed to ``say``; the results
    (for ``--measure training``, the rows of every rate and the median over the rates of one
    device's FLOP rate while every device computed). Whatever happens, nothing the runs
    made is left.

    Raises:
        CourseError: bad arguments, no root, a host's process failed or hung past
            ``--timeout``, or Ctrl-C / SIGTERM (the message says everything was removed).
    """
    from course_utils.models.links import check_rate
    from course_utils.tools.cluster.netns import (
        check_can_run,
        check_congestion_control,
    )

    problem = check_can_run()
    if problem:
        raise usage(problem)
    try:
        rates = [check_rate(r) for r in args.link_rate.split(",")]
        check_congestion_control(args.tcp)
        if not 2 <= args.hosts <= 200:
            raise ValueError(f"--hosts must be from 2 to 200, got {args.hosts}")
        if _measure(args) == "overlap" and args.devices_per_host != 2:
            raise ValueError("--measure overlap needs --devices-per-host 2: each host computes "
                             "on one device and sends from the other")
        if getattr(args, "runs", 1) > 1 and _measure(args) != "overlap":
            raise ValueError("--runs is for --measure overlap; the other measurements run "
                             "their plan once (see scripts/median_training_runs.py)")
    except ValueError as exc:
        raise usage(exc) from None
    # SIGTERM leaves through the same cleanup as Ctrl-C
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    started = time.monotonic()
    runs, flops = [], []
    repeats = getattr(args, "runs", 1)
    try:
        for run, rate in ((r, rate) for r in range(repeats) for rate in rates):
            result = _host_result(args, rate, started + args.timeout)
            if _measure(args) == "overlap":  # the runs interleave: every rate, then again
                runs.append({"link_rate": rate, "run": run, **result})
            elif _measure(args) == "training":
                runs += [{**row, "link_rate": rate} for row in result["rows"]]
                flops.append(result["flops_per_s"])
            else:
                runs.append(from_json(ClusterRun, {
                    "hosts": args.hosts, "devices_per_host": args.devices_per_host,
                    "link_rate": rate, "tcp": args.tcp, **result}, "host 0's results"))
            say(f"{rate}: done" + (f" (run {run + 1} of {repeats})" if repeats > 1 else ""))
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
    if _measure(args) == "training":
        return runs, statistics.median(flops)
    if _measure(args) == "overlap":
        return runs
    return ClusterResults(meta=_meta(args, started), cluster=_setup(args), runs=tuple(runs))


def _meta(args: argparse.Namespace, started: float) -> RunMeta:
    """How the run was made: the hosts run this interpreter on this machine."""
    return RunMeta(f"course cluster --measure {_measure(args)}", this_machine(),
                   time.monotonic() - started, getattr(args, "runs", 1))


def _setup(args: argparse.Namespace) -> ClusterSetup:
    from course_utils.tools.cluster.netns import default_congestion_control

    return ClusterSetup(args.hosts, args.devices_per_host, args.plan, args.tcp,
                        default_congestion_control())


def _run(args: argparse.Namespace) -> int:
    from course_utils.figures.plot import plot_figure
    from course_utils.results.cluster import figure_data, summary_lines

    started = time.monotonic()
    results = run_cluster(args, lambda line: print(line, flush=True))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.measure == "overlap":
        results = _overlap_results(args, results, started)
        save(results, out / "overlap.json")
        written = "overlap.json"
        for row in results.backward:
            print(f"{row.link_rate:>8s} run {row.run + 1}: backward {row.compute_s * 1e3:7.1f} "
                  f"ms, all-reduces {row.communication_s * 1e3:7.1f} ms, one after the other "
                  f"{row.serial_s * 1e3:7.1f} ms, overlapped {row.overlapped_s * 1e3:7.1f} ms")
    elif args.measure == "training":
        results = _training_results(args, *results, started)
        save(results, out / "training.json")
        written = "training.json"
        for row in results.rows:
            print(f"{row.strategy:14s} {row.link_rate:>8s} batch {row.batch_size:5d}: step "
                  f"{row.step_s * 1e3:8.1f} ms, compute {row.compute_s * 1e3:7.1f} ms")
    else:
        save(results, out / "cluster.json")
        (out / "cluster.png").write_bytes(plot_figure(figure_data(results)).png())
        written = "cluster.json and cluster.png"
        for run in results.runs:
            for line in summary_lines(run):
                print(line)
    from course_utils.tools.cluster.netns import leftovers

    left = leftovers()
    if left:
        raise CourseError(f"left behind: {', '.join(left)}; remove them with ip netns del")
    print(f"wrote {written} in {out}; no namespace, link or file is left")
    return EXIT_OK


def _training_results(args: argparse.Namespace, rows: list[dict], flops_per_s: float,
                      started: float):
    """The training rows of every rate, with the held-out curves and each scheme's own work
    (measured here, without the links) and how the run was made."""
    from course_utils.results.training import TrainingResults
    from course_utils.tools.cluster.training import (
        TRAINING_PLANS,
        heldout_curves,
        measure_own_work,
    )
    from course_utils.tools.cluster.worker import _timer

    plan = TRAINING_PLANS[args.plan]
    curves = heldout_curves(plan, args.hosts * args.devices_per_host)  # sets up the devices
    timed = _timer(plan["repeats"])[1]
    own_work = measure_own_work(plan, timed)
    return from_json(TrainingResults, {
        "meta": to_json(_meta(args, started)), "cluster": to_json(_setup(args)),
        "flops_per_s": flops_per_s, "rows": rows, "curves": curves, "own_work": own_work},
        "the training run")


def _overlap_results(args: argparse.Namespace, runs: list[dict], started: float):
    """Every run's backward and matmul rows, and how the runs were made."""
    from course_utils.results.overlap import OverlapResults
    from course_utils.tools.cluster.overlap import OVERLAP_PLANS

    plan = OVERLAP_PLANS[args.plan]
    tower = plan["tower"]
    sizes = {"width": tower.width, "layers": tower.layers, "rows": tower.rows,
             "matmul": list(plan["matmul"])}
    keys = ("link_rate", "run")
    return from_json(OverlapResults, {
        "meta": to_json(_meta(args, started)), "cluster": to_json(_setup(args)), "sizes": sizes,
        "backward": [{**{k: r[k] for k in keys}, **r["backward"]} for r in runs],
        "matmul": [{**{k: r[k] for k in keys}, **r["matmul"]} for r in runs]},
        "the overlap run")


def add_cluster_parser(sub) -> None:
    """Register ``course cluster``."""
    cluster = sub.add_parser(
        "cluster",
        help="time collectives across hosts on one machine (network namespaces, shaped links)",
        description="Create HOSTS network namespaces joined by a bridge, shape each host's link "
        "with tc tbf, run one JAX process per host (gloo) and time the collectives, the "
        "two-level all-reduce, 16-bit against 32-bit rings and bucketing against the link "
        "models, or (--measure training) part four's training steps. Needs root. Everything "
        "it creates is removed when it ends.",
    )
    cluster.add_argument("--hosts", type=positive_int_arg, default=2, help="hosts (default 2)")
    cluster.add_argument("--devices-per-host", type=positive_int_arg, default=2,
                         help="logical CPU devices per host (default 2)")
    cluster.add_argument("--link-rate", default="200mbit",
                         help="each host's outgoing link, in tc units (default 200mbit); "
                         "several, comma-separated, run the plan at each rate")
    cluster.add_argument("--plan", choices=("quick", "full"), default="quick",
                         help="quick: 3 sizes up to 4 MiB (training: data parallelism and "
                         "accumulation at one batch size); full: 5 sizes up to 16 MiB "
                         "(training: every strategy at 4 batch sizes)")
    cluster.add_argument("--measure", choices=("collectives", "training", "overlap"),
                         default="collectives",
                         help="collectives (default): step 17's timings, cluster.json; "
                         "training: part four's training steps and held-out curves, "
                         "training.json; overlap: step 19's backward pass and collective "
                         "matmul, overlap.json (needs --devices-per-host 2)")
    cluster.add_argument("--runs", type=positive_int_arg, default=1,
                         help="--measure overlap: run the plan this many times, every rate "
                         "in turn each time (default 1)")
    cluster.add_argument("--tcp", default="reno",
                         help="TCP congestion control between the hosts: reno (default; a "
                         "standing queue keeps the link busy while there is data), cubic or bbr")
    cluster.add_argument("--timeout", type=float, default=900.0,
                         help="stop everything after this many seconds (default 900)")
    cluster.add_argument("--out", default="build/cluster",
                         help="folder for cluster.json and cluster.png (default build/cluster)")
    cluster.set_defaults(handler=_run)
