"""Run step 13's check of a student's per-device function on a 2 × 3 ``("node", "local")`` mesh in
a short subprocess with 6 CPU devices, for a process whose devices only make a 2 × 2 mesh, where
nodes and local coincide and a reorder that swaps them gives the right program. The function
travels as its source (``inspect.getsource``, which also reads a function defined in a notebook
cell); it sees ``jax``, ``jnp``, ``np``, ``P``, ``cu`` and the names step 13's setup cell defines,
as the 2 × 3 mesh's values (``page_names``: ``mesh``, ``NODES``, ``LOCAL``, ``p``, ``N_DEVICES``,
``rows``), and nothing else of the caller's process: a function that reads another name of the
notebook cannot run there, and the check says so (``NOT VERIFIED``)."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import NamedTuple

SUBPROCESS_SECONDS = 180.0


class OtherMesh(NamedTuple):
    """What the subprocess found: whether the function ran on 2 × 3, and the slip it showed
    there (``""`` for none) or why it could not run."""

    ran: bool
    message: str


def page_names(mesh) -> dict:
    """The names step 13's setup cell defines (``p``, ``NODES``, ``mesh``, ``LOCAL``; ``rows``
    below it), as their values on ``mesh``: a function that reads ``mesh.shape["node"]`` or
    ``LOCAL`` runs on 2 × 3 as it would in a notebook started with 6 devices."""
    from jax import P

    p = mesh.size
    return {"mesh": mesh, "NODES": mesh.shape["node"], "LOCAL": mesh.shape["local"], "p": p,
            "N_DEVICES": p, "rows": P(("node", "local"), None)}


def run_on_two_by_three(fn, judge: str, timeout: float = SUBPROCESS_SECONDS) -> OtherMesh:
    """Run ``judge(fn, 2 × 3 mesh)`` in a subprocess with 6 CPU devices and report what it
    found; ``judge`` is ``"module:function"`` (the check's own values test, named rather than
    imported, so this module imports no check)."""
    name = getattr(fn, "__name__", "")
    if not name.isidentifier():
        return OtherMesh(False, "only a function defined with def can be sent to it")
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        return OtherMesh(False, "the function's source could not be read")
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    try:
        request = json.dumps({"source": source, "name": name, "judge": judge})
        done = subprocess.run([sys.executable, "-m", __name__], input=request,
                              capture_output=True, text=True, timeout=timeout, env=env,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        return OtherMesh(False, f"the subprocess did not finish: {type(error).__name__}")
    try:
        return OtherMesh(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (ValueError, IndexError, TypeError):
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return OtherMesh(False, f"the subprocess stopped: {last[:160]}")


def _main() -> None:
    request = json.loads(sys.stdin.read())
    from course_utils import use_cpu_devices

    use_cpu_devices(6)
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax import P
    from jax.sharding import Mesh

    import course_utils as cu
    from course_utils.display import error_line

    module, function = request["judge"].split(":")
    values_slip = getattr(importlib.import_module(module), function)

    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 3), ("node", "local"))
    namespace = {"jax": jax, "jnp": jnp, "np": np, "P": P, "cu": cu, **page_names(mesh)}
    try:
        exec(request["source"], namespace)  # noqa: S102 - the student's own function, alone
        fn = namespace[request["name"]]
    except Exception as error:  # noqa: BLE001 - a source that needs the notebook: say so
        answer = OtherMesh(False, f"its source alone raised {error_line(error)}")
        print(json.dumps(answer._asdict()))
        return
    message = values_slip(fn, mesh)[2]
    if "NameError" in message:  # it reads a name of the notebook the subprocess does not have
        print(json.dumps(OtherMesh(False, message.split("raised ")[-1])._asdict()))
        return
    print(json.dumps(OtherMesh(True, message)._asdict()))


if __name__ == "__main__":
    _main()
