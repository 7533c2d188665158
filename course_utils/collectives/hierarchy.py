"""The two-level all-reduce on a ``("node", "local")`` mesh (its α-β model:
``models.latency.hierarchical_time``).

Inside a node devices talk over a fast link; between nodes over a slower network. The two-level
schedule reduce-scatters inside each node, all-reduces each 1/local slice across the nodes, and
all-gathers inside each node again: only 1/local of the vector per device crosses the network.
"""

from __future__ import annotations

import jax
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.collectives.kernels import Kernel, cached_builder, check_blocks, make_kernel

AXES = ("node", "local")


def _two_level_mesh(mesh: Mesh) -> tuple[int, int]:
    if tuple(mesh.axis_names) != AXES:
        raise ValueError(
            f"expected a mesh with axes {AXES}, got {mesh.axis_names}; build one with "
            "node_local_mesh(n_nodes)"
        )
    return mesh.shape["node"], mesh.shape["local"]


def hierarchical_all_reduce(mesh: Mesh) -> Kernel:
    """All-reduce in two levels: reduce-scatter over ``local``, all-reduce over ``node``,
    all-gather over ``local``.

    Args:
        mesh: a ``("node", "local")`` mesh (``node_local_mesh``).

    Returns:
        A kernel of ``(p, m)`` blocks (one row per device, in the mesh's device order; ``m``
        divisible by the devices per node) returning ``(p, m)``, every row the sum of all rows, as
        ``block_collective(data_mesh(), "all_reduce")``.
    """
    nodes, local = _two_level_mesh(mesh)

    def check(blocks) -> None:
        check_blocks(blocks, nodes * local, "all_reduce")
        if blocks.shape[1] % local:
            raise ValueError(
                f"m must be divisible by the {local} devices of a node; got blocks {blocks.shape}"
            )

    def kernel(block):
        # block: f32[1, m], this device's row
        mine = jax.lax.psum_scatter(block[0], "local", tiled=True)  # f32[m/local], in the node
        mine = jax.lax.psum(mine, "node")  # f32[m/local], across the nodes
        return jax.lax.all_gather(mine, "local", tiled=True)[None]  # f32[1, m], in the node

    spec = P(AXES, None)
    return make_kernel(mesh, kernel, (spec,), spec, check)


hierarchical_all_reduce = cached_builder(hierarchical_all_reduce)  # the same mesh, the same kernel
