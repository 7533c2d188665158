"""Self-check for step 13's exercise: a two-level reduce-scatter in one program, the case the page
never shows (its all-reduce ends with an all-gather; here each device keeps only its 1/p slice,
and which slice depends on the order of the two scatters)."""

from __future__ import annotations

import jax
import numpy as np
from jax import P
from jax.sharding import Mesh

from course_utils.checks.forbidden import kernel_reached, uses_forbidden
from course_utils.checks.helpers import fail, function_given, not_verified, passed, tiled_hint
from course_utils.checks.mesh_order import run_on_two_by_three
from course_utils.collectives.hierarchy import hierarchical_all_reduce
from course_utils.collectives.kernels import Kernel, reduce_scatter_gradient
from course_utils.collectives.ring import ring_scatter_sum
from course_utils.display import error_line
from course_utils.observe.ir import collectives_in

_REFUSAL = ("my_two_level_scatter uses the package's {}: write the two reduce-scatters "
            "yourself, with jax.lax.psum_scatter")


def _kernel(fn, mesh: Mesh):
    spec = P(("node", "local"), None)
    return jax.jit(jax.shard_map(lambda b: fn(b[0])[None], mesh=mesh, in_specs=spec,
                                 out_specs=spec))


def check_two_level_scatter(fn, mesh: Mesh) -> None:
    """Exercise 13: ``fn(x)``, this device's f32[m] → its f32[m/p] slice of the sum over all
    devices, slice k on the k-th device of the mesh's order (as a flat ``psum_scatter`` over
    ``("node", "local")`` gives), in two levels: a reduce-scatter inside the node on the whole
    vector, then one across the nodes on 1/local of it. Checked on every device and through the
    compiled program's collectives, their device groups and bytes; on a mesh of nodes = local
    (2 × 2 at 4 devices, where a reorder with nodes and local swapped is the right program) the
    values also on 2 nodes of 3, in a subprocess with 6 CPU devices when this process has fewer,
    the function given the page's ``mesh``, ``NODES`` and ``LOCAL`` as that mesh's. What it
    cannot run there (a lambda, another name of the notebook), or on nodes of one device, it
    does not pass: it prints ``NOT VERIFIED``, never ``PASSED``."""
    exercise = "two-level reduce-scatter"
    function_given(exercise, "my_two_level_scatter", fn)
    if isinstance(fn, Kernel) or (name := uses_forbidden(
            fn, [hierarchical_all_reduce, reduce_scatter_gradient, ring_scatter_sum])) is not None:
        fail(exercise, _REFUSAL.format(name if not isinstance(fn, Kernel) else "kernels"))
    if kernel_reached(fn):  # a kernel the package built, held in a global, a default or a cell
        fail(exercise, _REFUSAL.format("kernels (one built by hierarchical_all_reduce or the "
                                       "like)"))
    nodes, local = mesh.shape["node"], mesh.shape["local"]
    kernel, blocks, message = values_slip(fn, mesh)
    if message:
        fail(exercise, message)
    if nodes < 2 or local < 2:
        not_verified(exercise, f"the values are right on every device, but on {nodes} node(s) "
                     f"of {local} device(s) the two levels are one, so the schedule cannot be "
                     "checked; run with N_DEVICES = 4, 6 or 8")
        return
    _judge_program(exercise, collectives_in(kernel, blocks).hlo, nodes, local, blocks.shape[1])
    slip, unsure = _order_of_nodes_and_local(fn) if nodes == local else ("", "")
    if slip:
        fail(exercise, slip)
    if unsure:
        not_verified(exercise, f"the values and the program are right on {nodes} nodes of "
                     f"{local}, where a reorder with nodes and local swapped gives them too; the "
                     f"order could not be run on 2 nodes of 3: {unsure}")
        return
    passed(exercise, f"reduce-scatter in {nodes} nodes of {local} on the whole vector, then "
                     "across the nodes on 1/local of it, each device its own slice")


def _order_of_nodes_and_local(fn) -> tuple[str, str]:
    """(the slip, why the order could not be checked; ``""`` each when it was and is right) from
    ``fn`` run on 2 nodes of 3, where a reorder with nodes and local swapped goes wrong: on this
    process's devices when there are 6 or more, else in a subprocess with 6 CPU devices."""
    if len(jax.devices()) >= 6:
        other = Mesh(np.asarray(jax.devices()[:6]).reshape(2, 3), ("node", "local"))
        message = values_slip(fn, other)[2]
        return (f"on 2 nodes of 3 devices: {message}" if message else ""), ""
    run = run_on_two_by_three(fn, judge=f"{__name__}:values_slip")
    if not run.ran:
        timed_out = "did not finish" in run.message
        todo = ("run the check again, or the step with N_DEVICES = 6 or 8" if timed_out else
                "write my_two_level_scatter as one function with def that reads only jax, "
                "jnp, np, P and the page's mesh, NODES, LOCAL and p, since the check sends its "
                "source alone, or run the step with N_DEVICES = 6 or 8")
        return "", f"{run.message}; {todo}"
    where = "on 2 nodes of 3 devices (6 CPU devices, in a subprocess)"
    return (f"{where}: {run.message}" if run.message else ""), ""


def values_slip(fn, mesh: Mesh):
    """Run ``fn`` on every device of ``mesh`` against NumPy: (the compiled kernel, its input,
    a message naming the slip or ``""`` when every device holds its own slice of the sum)."""
    nodes, local = mesh.shape["node"], mesh.shape["local"]
    p = nodes * local
    blocks = np.random.default_rng(13).standard_normal((p, 3 * p)).astype(np.float32)
    kernel = _kernel(fn, mesh)
    try:
        got = np.asarray(kernel(blocks))
    except Exception as error:  # noqa: BLE001 - the student's function failed: say how, in a line
        text = str(error)
        if "context mesh" in text or ("mesh" in text and hasattr(fn, "__wrapped__")):
            return kernel, blocks, (
                "my_two_level_scatter must be the function ONE device runs, x: f32[m] → "
                "f32[m/p]; the check puts it in jax.shard_map on the mesh itself: pass the "
                "plain per-device function, not a jax.shard_map (or jax.jit of one) of it "
                f"({error_line(error)})")
        sizes = ("; a size typed in? read them with jax.lax.axis_size('node') and "
                 "jax.lax.axis_size('local')" if "reshape" in text and (nodes, local) != (2, 2)
                 else "")
        return kernel, blocks, (f"running my_two_level_scatter on every device raised "
                                f"{error_line(error)}{tiled_hint(error, 'local or node')}{sizes}")
    chunks = blocks.sum(axis=0).reshape(p, -1)  # chunk k: what device k should hold
    if got.shape != chunks.shape:
        return kernel, blocks, (
            f"each device should end with m/p = {chunks.shape[1]} values (its slice of the "
            f"sum), yours end with {got.shape[1:]}"
            + (": across the nodes too, reduce-scatter (psum_scatter), not psum"
               if got.shape[1:] == (3 * p // local,) else ""))
    close = lambda a, b: np.allclose(a, b, rtol=1e-4, atol=1e-4)  # noqa: E731
    if close(got, chunks):
        return kernel, blocks, ""
    scatter_order = [j * nodes + i for i in range(nodes) for j in range(local)]
    # x.reshape(local, nodes, s).transpose(1, 0, 2): device (i, j) gets chunk a·nodes + b of
    # q = j·nodes + i = b·local + a; the same as the right order only when nodes == local
    swapped = [(q % local) * nodes + q // local for q in scatter_order]
    if close(got, chunks[scatter_order]):
        return kernel, blocks, (
            "every device holds a slice of the sum, but not its own: the device of node i, "
            "place j should hold slice i·local + j, as the flat reduce-scatter gives; yours "
            "follow the order of your two scatters (slice j·nodes + i). Put the vector's slices "
            "in the order the two scatters hand them out before you scatter")
    if close(got, chunks[swapped]):
        return kernel, blocks, (
            "every device holds a slice of the sum, but not its own: nodes and local swapped "
            "in the reorder (the vector's slices are indexed [node, local] before you reorder "
            "them)")
    node_sums = np.concatenate([  # device (i, j): its slice summed over node i's devices only
        blocks[i * local:(i + 1) * local].sum(axis=0).reshape(p, -1)[i * local:(i + 1) * local]
        for i in range(nodes)])
    if close(got, node_sums):
        return kernel, blocks, (
            "every device holds its own slice summed over its node only: the sum across the "
            "nodes is missing; after the scatter inside the node, reduce-scatter across 'node'")
    if close(got * nodes, chunks) or close(got * p, chunks) or close(got * local, chunks):
        return kernel, blocks, "every device holds a mean, not the sum: use psum_scatter, not pmean"
    return kernel, blocks, ("the values are wrong on some devices: each device must end with "
                            "its slice of the sum over all devices of all nodes")


def _judge_program(exercise: str, program, nodes: int, local: int, m: int) -> None:
    """Fail unless the compiled program reduce-scatters the whole vector inside the nodes and
    only 1/local of it across them."""
    p = nodes * local
    inside = [list(range(n * local, (n + 1) * local)) for n in range(nodes)]
    across = [list(range(i, p, local)) for i in range(local)]
    ops = [(o.op, o.replica_groups, o.bytes) for o in program]
    if any(groups == [] or (len(groups) == 1 and sorted(groups[0]) == list(range(p)))
           for _, groups, _ in ops):  # one group of every device, in any order
        fail(exercise, "the right slices, but through one collective over all devices: that is "
                       "the flat schedule; use the axes 'local' and 'node' one at a time")
    crossing = [b for op, groups, b in ops if groups == across]
    if any(op == "all-reduce" for op, _, _ in ops):
        fail(exercise, "the right slices, but with an all-reduce in the program: every device "
                       "sends its whole share again; two reduce-scatters are the schedule")
    if not any(op == "reduce-scatter" and groups == inside for op, groups, _ in ops):
        fail(exercise, "the right slices, but nothing is reduce-scattered inside the nodes")
    if crossing and max(crossing) * nodes > 4 * m // local:  # result bytes: 1/nodes of the input
        fail(exercise, "the right slices, but the reduce-scatter across the nodes works on the "
                       "whole vector: scatter inside the node ('local') first, so that only "
                       "1/local of it crosses the network")
