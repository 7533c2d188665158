"""HSDP, hybrid sharded data parallelism (steps 13 and 14 joined): on a mesh ``("host",
"device")`` the parameters and the momentum are sliced over the devices of a host and
replicated across the hosts. A step gathers the host's slices into the whole parameters (inside
the host), takes this device's gradient, reduce-scatters it inside the host and all-reduces each
slice across the hosts, so that only 1/D of the gradient per device crosses a host's link.
Its updates are data parallelism's; ``course cluster --measure training`` times it.
"""

from __future__ import annotations

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.constants import BETA
from course_utils.problems.classification import MLP, loss_sum
from course_utils.training.strategies import TRAIN_LR

HOST, DEVICE = "host", "device"
SLICED = P(DEVICE)  # a slice per device of the host, the same slices on every host
ROWS = P((HOST, DEVICE))  # every device its own rows


def hsdp_step(w, v, x, y, *, rows: int, mlp: MLP):
    """One momentum step: ``w``, ``v`` this device's slice f32[n/D]; ``x``, ``y`` its rows;
    ``rows`` the rows of the whole step (the gradient is their mean)."""
    whole = jax.lax.all_gather(w, DEVICE, tiled=True)  # the host's slices: the whole w
    g = jax.grad(loss_sum)(whole, x, y, mlp) / rows
    g = jax.lax.psum_scatter(g, DEVICE, tiled=True)  # my slice of my host's sum
    g = jax.lax.psum(g, HOST)  # my slice of the sum over every host: crosses the link
    v = BETA * v + g
    return w - TRAIN_LR * v, v


def hsdp_program(mesh: Mesh, *, rows: int, mlp: MLP):
    """``hsdp_step`` jitted on ``mesh`` (axes ``("host", "device")``), taking and returning
    ``(w, v)`` with ``x``, ``y``."""
    if mesh.axis_names != (HOST, DEVICE):
        raise ValueError(f"HSDP needs a mesh with axes ('host', 'device'), got {mesh.axis_names}")

    def step(state, x, y):
        return hsdp_step(*state, x, y, rows=rows, mlp=mlp)

    # check_vma=False keeps the gradient this device's own: with the check, JAX would sum the
    # gradient of the gathered w (the same on every host) across the hosts itself, whole
    return jax.jit(jax.shard_map(step, mesh=mesh, in_specs=((SLICED, SLICED), ROWS, ROWS),
                                 out_specs=(SLICED, SLICED), check_vma=False))
