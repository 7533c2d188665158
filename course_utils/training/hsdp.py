"""HSDP, hybrid sharded data parallelism (steps 13 and 14 joined): on a mesh ``("host",
"device")`` the parameters and the optimizer's state are sliced over the devices of a host and
replicated across the hosts. A step gathers the host's slices into the whole parameters (inside
the host), takes this device's gradient, reduce-scatters it inside the host and all-reduces each
slice across the hosts, so that only 1/D of the gradient per device crosses a host's link.
Its updates are data parallelism's; ``course cluster --measure training`` times it.
"""

from __future__ import annotations

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.models.cost_model import Topology, link_bytes_sent, message_steps
from course_utils.models.link_traffic import F32, Traffic, TrafficSettings
from course_utils.problems.classification import MLP, loss_sum
from course_utils.training.optimizers import MOMENTUM, Optimizer
from course_utils.training.state import Context, Step, StepInfo, TrainState, own_copy

HOST, DEVICE = "host", "device"
SLICED = P(DEVICE)  # a slice per device of the host, the same slices on every host
HSDP_ROWS = P((HOST, DEVICE))  # every device its own rows


def _host_gradient(w, x, y, *, rows: int, mlp: MLP):
    """This device's share of the mean loss, and its slice of the gradient summed over every
    host (``w``: its slice, f32[n/D])."""
    # the host's slices: the whole w, the same on every device; then this device's own copy,
    # so that the gradient is its own (of the same w, JAX would sum it over both axes itself)
    whole = jax.lax.all_gather(w, DEVICE, tiled=True, to="invarying")
    mine = own_copy(whole, (HOST, DEVICE))
    loss, g = jax.value_and_grad(loss_sum)(mine, x, y, mlp)
    g = jax.lax.psum_scatter(g / rows, DEVICE, tiled=True)  # my slice of my host's sum
    return loss / rows, jax.lax.psum(g, HOST)  # my slice of the sum over every host: crosses


def hsdp_step(w, v, x, y, *, rows: int, mlp: MLP, optimizer: Optimizer = MOMENTUM):
    """One step of ``optimizer``: ``w``, ``v`` this device's slice f32[n/D]; ``x``, ``y`` its
    rows; ``rows`` the rows of the whole step (the gradient is their mean)."""
    _, g = _host_gradient(w, x, y, rows=rows, mlp=mlp)
    return optimizer.update(g, v, w)


def hsdp(state: TrainState, x: jax.Array, y: jax.Array, ctx: Context) -> Step:
    """HSDP as a registered strategy's step (``ctx.axis`` is ``"device"``)."""
    loss, g = _host_gradient(state.params, x, y, rows=ctx.rows, mlp=ctx.mlp)
    w, v = ctx.optimizer.update(g, state.momentum, state.params)
    return state._replace(params=w, momentum=v), StepInfo(loss, g, None)


def hsdp_program(mesh: Mesh, *, rows: int, mlp: MLP, optimizer: Optimizer = MOMENTUM):
    """``hsdp_step`` jitted on ``mesh`` (axes ``("host", "device")``), taking and returning
    ``(w, v)`` with ``x``, ``y``."""
    if mesh.axis_names != (HOST, DEVICE):
        raise ValueError(f"HSDP needs a mesh with axes ('host', 'device'), got {mesh.axis_names}")

    def step(state, x, y):
        return hsdp_step(*state, x, y, rows=rows, mlp=mlp, optimizer=optimizer)

    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=((SLICED, SLICED), HSDP_ROWS, HSDP_ROWS),
                                 out_specs=(SLICED, SLICED)))


def two_level_traffic(n: int, topology: Topology, settings: TrafficSettings) -> Traffic:
    """The gradient's two-level all-reduce (reduce-scatter and all-gather inside the host, an
    all-reduce of 1/D across the hosts); the parameters' gather stays inside the host."""
    return Traffic(link_bytes_sent("all_reduce", "two_level", F32 * n, topology),
                   message_steps("all_reduce", "two_level", topology))
