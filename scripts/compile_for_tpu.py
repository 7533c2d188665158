"""Compile step 19's one-program backward pass for a TPU topology and print the saved record
(``course_utils/saved/tpu_compiled.json``) that step 19 reads: which all-reduces XLA:TPU makes of
the layers' ``psum``s, and where it schedules them.

Run on a machine with a TPU chip (a chip compiles ahead of time for a topology larger than itself,
https://docs.jax.dev/en/latest/aot.html), from the repository's root::

    PYTHONPATH=. python scripts/compile_for_tpu.py --commit "$(git rev-parse HEAD)" \
        > course_utils/saved/tpu_compiled.json

Nothing runs on the chip: each program is lowered and compiled, and its optimized HLO's entry
computation (metadata dropped) is saved with the topology, the chip and the software.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import replace

import jax
import numpy as np
from jax.experimental import topologies
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.collectives.overlap import one_program_backward
from course_utils.observe.ir import entry_computation
from course_utils.results.compiled import CompiledProgram, CompiledRun
from course_utils.results.meta import this_run
from course_utils.results.records import dumps

TOWERS = ((8, 128), (8, 512), (16, 2048), (8, 4096))  # (layers, width): 64 KiB to 64 MiB a layer
ROWS = 256  # per host


def without_metadata(entry: str) -> str:
    """``entry`` without each instruction's ``metadata={…}`` (source lines, op names)."""
    return re.sub(r", metadata=\{[^}]*\}", "", entry)


def compile_tower(mesh: Mesh, layers: int, width: int) -> CompiledProgram:
    hosts = mesh.shape["host"]
    rows = NamedSharding(mesh, P("host", None))
    whole = NamedSharding(mesh, P())
    act = jax.ShapeDtypeStruct((hosts * ROWS, width), np.float32, sharding=rows)
    w = jax.ShapeDtypeStruct((width, width), np.float32, sharding=whole)
    program = one_program_backward(mesh, hosts * ROWS)
    hlo = program.lower([act] * (layers + 1), [w] * layers, act).compile().as_text()
    return CompiledProgram(layers=layers, width=width, rows_per_host=ROWS,
                           entry=without_metadata(entry_computation(hlo)))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", default="v5e:2x2", help="TPU topology to compile for")
    parser.add_argument("--commit", default=None, help="the commit of the checkout copied here")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    chip = jax.devices()[0]
    if chip.platform != "tpu":
        print(f"compile_for_tpu: needs a TPU chip; this machine's JAX has {chip.platform}",
              file=sys.stderr)
        return 2
    topology = topologies.get_topology_desc(platform="tpu", topology_name=args.topology)
    mesh = Mesh(np.array(topology.devices), ("host",))
    programs = tuple(compile_tower(mesh, layers, width) for layers, width in TOWERS)
    meta = this_run("python scripts/compile_for_tpu.py", time.perf_counter() - started,
                    argv=["scripts/compile_for_tpu.py", *argv])
    if args.commit:  # the copy on the chip's machine is no checkout
        meta = replace(meta, commit=args.commit, dirty=None)  # changes: not known there
    print(dumps(CompiledRun(meta=meta, compiled_on=chip.device_kind, topology=args.topology,
                            devices=len(topology.devices), programs=programs)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
