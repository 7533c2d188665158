"""Guards on step 04's prose: the bytes each collective's result holds, replica groups as mesh
positions, and plain jit compiling the sharded gradient to one all-reduce."""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils import (
    all_gather_shards,
    all_reduce_gradient,
    collectives_in,
    data_mesh,
    placements,
    reduce_scatter_gradient,
    toy_regression,
)


def _placed(mesh, n_rows=16, n_features=8):
    rows, replicated, sliced = placements(mesh)
    host = toy_regression(n_rows, n_features)
    return host, [jax.device_put(a, s) for a, s in zip(host, (rows, sliced, replicated))]


def test_result_bytes_are_the_whole_gradient_or_one_slice():
    mesh = data_mesh()
    p = mesh.size
    (_, _, wh), args = _placed(mesh)
    scattered = reduce_scatter_gradient(mesh)(*args)
    found = [
        collectives_in(all_reduce_gradient(mesh), *args).hlo,
        collectives_in(reduce_scatter_gradient(mesh), *args).hlo,
        collectives_in(all_gather_shards(mesh), scattered).hlo,
    ]
    assert [[(op.op, op.bytes) for op in ops] for ops in found] == [
        [("all-reduce", wh.nbytes)],
        [("reduce-scatter", wh.nbytes // p)],
        [("all-gather", wh.nbytes)],
    ]


def test_replica_groups_number_mesh_positions_not_device_ids():
    devices = np.array(jax.devices()[::-1][:2])  # ids 3, 2
    pair = Mesh(devices, data_mesh().axis_names)
    _, args = _placed(pair, 4, 2)
    (op,) = collectives_in(all_reduce_gradient(pair), *args).hlo
    assert [d.id for d in devices] == [3, 2] and op.replica_groups == [[0, 1]]


def test_plain_jit_of_the_sharded_gradient_compiles_to_one_all_reduce():
    mesh = data_mesh()
    (xh, yh, wh), args = _placed(mesh)
    plain = jax.jit(lambda x, y, w: 2 * x.T @ (x @ w - y) / x.shape[0])
    ops = collectives_in(plain, *args).hlo
    assert [(op.op, op.bytes) for op in ops] == [("all-reduce", wh.nbytes)]
    assert plain(*args).sharding.is_equivalent_to(NamedSharding(mesh, P()), 1)
