"""The guard of a cluster: a process ``netns.Cluster`` starts that removes everything the
cluster made if the command that made it is killed (``kill -9``), when no code of the command
can run. The kernel sends it SIGTERM when its parent dies (``PR_SET_PDEATHSIG``); it then runs
``netns.teardown``. It holds the cluster's lock (an inherited file) until it is done, so no other
cluster starts meanwhile. On a normal exit the command tears down itself and kills its guard.

``python -m course_utils.tools.cluster.guard PREFIX`` (its parent-death request:
``relay.die_with_parent``)
"""

from __future__ import annotations

import signal
import sys

from course_utils.tools.cluster.relay import die_with_parent


def main(argv: list[str] | None = None) -> int:
    (prefix,) = sys.argv[1:] if argv is None else argv
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    if die_with_parent(signal.SIGTERM):  # else the parent died already: tear down at once
        print("ready", flush=True)
        signal.sigwait({signal.SIGTERM})
    from course_utils.tools.cluster.netns import teardown

    teardown(prefix)
    return 0


if __name__ == "__main__":
    sys.exit(main())
