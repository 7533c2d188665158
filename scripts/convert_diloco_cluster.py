"""Convert a ``diloco_cluster.json`` written before the methods became registry names (0.6.0):
each method kept its dtype, fragments and overlap beside its name; now it keeps its ``name``
and, as a record of what was measured, those settings under ``measured``; the reader reads them
from the registry and refuses a run measured otherwise (``results.diloco_cluster.MethodRow``).
Every other field is left as it is. A method whose saved fields differ from the registry's is
refused.

    python scripts/convert_diloco_cluster.py                         # the saved file, in place
    python scripts/convert_diloco_cluster.py build/diloco/diloco_cluster.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

OLD_FIELDS = ("dtype", "fragments", "overlap")


def converted(old: dict) -> dict:
    """``old`` (a ``diloco_cluster.json``'s content) with each method's settings under
    ``measured``.

    Raises:
        ValueError: a method's saved fields are not its registry entry's ``Sync`` (one line).
    """
    from course_utils.training.strategies import spec

    methods = []
    for m in old["methods"]:
        sync = spec(m["name"]).sync
        saved = {k: m[k] for k in OLD_FIELDS if k in m}
        registered = {k: getattr(sync, k) for k in saved}
        if saved != registered:
            raise ValueError(f"{m['name']}: saved {saved}, the registry's {registered}; "
                             "measure it again (course cluster --measure diloco)")
        methods.append({"name": m["name"], "measured": saved})
    return {**old, "methods": methods}


def main(argv: list[str]) -> int:
    from course_utils.results.records import saved_path

    path = Path(argv[0]) if argv else saved_path("diloco_cluster.json")
    path.write_text(json.dumps(converted(json.loads(path.read_text())), indent=1))
    print(f"converted {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
