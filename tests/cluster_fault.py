"""Test-only: ``course cluster`` whose last host's process fails on purpose, to see that every
exit path still removes what the run made. The shipped worker has no fault hook; this file is
put on its command line instead.

    python tests/cluster_fault.py die|hang COURSE-CLUSTER-ARGS...    the command, as root
    python tests/cluster_fault.py worker die|hang WORKER-ARGS...     one host's process
"""

import argparse
import sys
import time
from pathlib import Path

FAULTS = ("die", "hang")
DIED = 3  # the exit status of the host that dies


def host(fault: str, argv: list[str]) -> int:
    """One host's process: the last host dies or hangs before it joins; the others run."""
    from course_utils.tools.cluster import worker

    parser = argparse.ArgumentParser()
    parser.add_argument("--process-id", type=int)
    parser.add_argument("--processes", type=int)
    args, _ = parser.parse_known_args(argv)
    if args.process_id == args.processes - 1:
        if fault == "die":
            return DIED
        time.sleep(3600)
    return worker.main(argv)


def course_cluster(fault: str, argv: list[str]) -> int:
    """``course cluster ARGV`` with this file, and ``fault``, as each host's worker."""
    from course_utils.tools.cli import main
    from course_utils.tools.cluster import command

    command.WORKER = (str(Path(__file__).resolve()), "worker", fault)
    return main(["cluster", *argv])


if __name__ == "__main__":
    if sys.argv[1] == "worker" and sys.argv[2] in FAULTS:
        sys.exit(host(sys.argv[2], sys.argv[3:]))
    if sys.argv[1] in FAULTS:
        sys.exit(course_cluster(sys.argv[1], sys.argv[2:]))
    sys.exit(f"usage: see {__doc__}")
