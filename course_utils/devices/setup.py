"""Device setup: logical CPU devices, the one-axis mesh and the seed's three placements."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.devices.compile_cache import use_compilation_cache
from course_utils.validate import positive_int


class Placements(NamedTuple):
    """The three shardings the course uses on a one-axis mesh.

    Attributes:
        rows: a matrix split by rows, ``P(axis, None)`` (each device holds rows/p full rows).
        replicated: every device holds the whole array, ``P()``.
        sliced: a vector cut into p contiguous slices, ``P(axis)`` (the labels, a
            reduce-scattered gradient, ZeRO's sliced weights).
    """

    rows: NamedSharding
    replicated: NamedSharding
    sliced: NamedSharding


def use_cpu_devices(n: int = 4) -> None:
    """Configure ``n`` logical CPU devices; call it before any other JAX operation.

    Calling it again with the same ``n`` does nothing. Once JAX has started, the device
    count is fixed for the life of the process (kernel). The first call also turns on JAX's
    persistent compilation cache in the course's folder
    (``course_utils.devices.compile_cache``), so a rerun loads compiled programs from disk
    instead of compiling them again.

    Args:
        n: the number of logical CPU devices, a positive integer.

    Raises:
        ValueError: ``n`` is not a positive integer.
        RuntimeError: JAX already started with a different number of devices.
    """
    n = positive_int("the device count", n, hint="try use_cpu_devices(4)")
    try:
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", n)
    except RuntimeError:
        started = jax.devices()
        if len(started) == n and started[0].platform == "cpu":
            return
        kind = started[0].platform.upper()
        raise RuntimeError(
            f"JAX already started with {len(started)} {kind} device(s), not the {n} requested; "
            f"restart the kernel and call use_cpu_devices({n}) before any other JAX call"
        ) from None
    use_compilation_cache()


def data_mesh(axis_name: str = "data") -> Mesh:
    """A one-axis mesh over all devices, in ``jax.devices()`` order.

    Args:
        axis_name: the name collectives use for the axis.

    Returns:
        A ``Mesh`` of shape ``(n_devices,)``.
    """
    if not isinstance(axis_name, str) or not axis_name:
        raise ValueError(f"axis_name must be a non-empty string, got {axis_name!r}")
    return Mesh(np.asarray(jax.devices()), (axis_name,))


def node_local_mesh(n_nodes: int) -> Mesh:
    """A two-axis mesh ``("node", "local")`` of shape ``(n_nodes, n_devices / n_nodes)``: devices
    0 … l−1 form node 0, the next l node 1, and so on (``jax.devices()`` order).

    Examples:
        >>> node_local_mesh(1).axis_names
        ('node', 'local')
    """
    n = len(jax.devices())
    if not isinstance(n_nodes, int) or isinstance(n_nodes, bool) or n_nodes < 1 or n % n_nodes:
        raise ValueError(
            f"n_nodes must be a positive integer that divides the {n} devices, got {n_nodes!r}"
        )
    return Mesh(np.asarray(jax.devices()).reshape(n_nodes, n // n_nodes), ("node", "local"))


def axis_of(mesh: Mesh) -> str:
    """The name of a one-axis mesh's axis; a clear error for any other mesh."""
    if len(mesh.axis_names) != 1:
        raise ValueError(
            f"expected a one-axis mesh, got axes {mesh.axis_names}; build one with data_mesh()"
        )
    return mesh.axis_names[0]


def placements(mesh: Mesh) -> Placements:
    """The seed's three shardings on ``mesh``: rows, replicated and sliced.

    Args:
        mesh: a one-axis mesh, e.g. from ``data_mesh()``.

    Returns:
        ``Placements(rows, replicated, sliced)``.
    """
    axis = axis_of(mesh)
    return Placements(
        rows=NamedSharding(mesh, P(axis, None)),
        replicated=NamedSharding(mesh, P()),
        sliced=NamedSharding(mesh, P(axis)),
    )
