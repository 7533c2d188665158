"""One host's process of ``course cluster``: join JAX's multi-process runtime (gloo), run the
measurement's plan in step with the other hosts, and (process 0) print host 0's report as one
JSON line.

Run inside a host's namespace: ``python -m course_utils.tools.cluster.worker --process-id I
--processes H --devices D --coordinator 10.77.0.1:PORT --plan quick --measure collectives``.
Every process runs the same programs in the same order (a collective waits for all); each call
is timed from dispatch until its result is ready (``timing``), and process 0's times are
reported. The measurement is the one registered under ``--measure`` (``measurements``).
"""

from __future__ import annotations

import argparse
import json
import sys

from course_utils.tools.cluster.measurements import MEASUREMENTS, PLAN_NAMES, measurement


def _parse(argv):
    parser = argparse.ArgumentParser(prog="cluster_worker")
    parser.add_argument("--process-id", type=int, required=True)
    parser.add_argument("--processes", type=int, required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--coordinator", required=True)
    parser.add_argument("--plan", choices=PLAN_NAMES, default="quick")
    parser.add_argument("--measure", choices=MEASUREMENTS, default="collectives")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = _parse(argv)
    from course_utils.devices.multiprocess import join_runtime
    from course_utils.tools.cluster.timing import timer

    join_runtime(args.coordinator, args.process_id, args.processes, args.devices)
    chosen = measurement(args.measure)
    plan = chosen.plans[args.plan]
    result = chosen.measure(plan, timer(plan["repeats"]))
    if args.process_id == 0:
        print(json.dumps({"event": "result", **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
