import jax
import numpy as np
import pytest
from jax.sharding import Mesh
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
from course_utils.observe.ir import (
    Collective,
    ProgramCollectives,
    hlo_collectives,
    replica_groups,
    stablehlo_collectives,
    stablehlo_signatures,
)


def test_each_kernel_contains_its_collective_with_per_device_bytes():
    mesh = data_mesh()
    x, y, w = toy_regression()
    found = collectives_in(all_reduce_gradient(mesh), x, y, w)
    assert [(c.op, c.shape, c.bytes) for c in found.stablehlo] == [("all_reduce", (8,), 32)]
    assert [(c.op, c.shape, c.bytes) for c in found.hlo] == [("all-reduce", (8,), 32)]
    assert found.hlo[0].replica_groups == [[0, 1, 2, 3]]
    found = collectives_in(reduce_scatter_gradient(mesh), x, y, w)
    assert [(c.op, c.shape, c.dtype, c.bytes) for c in found.hlo] == [
        ("reduce-scatter", (2,), "f32", 8)
    ]
    assert [c.op for c in found.stablehlo] == ["reduce_scatter"]
    g = jax.device_put(w, placements(mesh).sliced)
    found = collectives_in(all_gather_shards(mesh), g)
    assert [(c.op, c.shape) for c in found.stablehlo + found.hlo] == [
        ("all_gather", (8,)),
        ("all-gather", (8,)),
    ]


def test_a_program_without_collectives_has_none():
    assert collectives_in(jax.jit(lambda a: a * 2), jax.numpy.ones(4)) == ProgramCollectives(
        stablehlo=[], hlo=[]
    )


def test_parsers_read_scalars_and_other_dtypes():
    assert stablehlo_collectives(
        '"stablehlo.all_reduce"(%0) ({ ... }) : (tensor<f64>) -> tensor<f64>'
    ) == [Collective(op="all_reduce", shape=(), dtype="f64", bytes=8)]
    text = "%ag = bf16[4,6]{1,0} all-gather-start(%p), replica_groups=[2,2]<=[4], dimensions={0}"
    assert hlo_collectives(text) == [
        Collective(
            op="all-gather",
            shape=(4, 6),
            dtype="bf16",
            bytes=48,
            replica_groups=[[0, 1], [2, 3]],
        )
    ]


def test_a_plain_function_is_refused():
    with pytest.raises(TypeError, match="jitted function"):
        collectives_in(lambda a: a, 1.0)


@pytest.mark.parametrize(
    "text, groups",
    [
        ("replica_groups={{0,1,2,3}}", [[0, 1, 2, 3]]),
        ("replica_groups={{0,2},{1,3}}, dimensions={0}", [[0, 2], [1, 3]]),
        ("replica_groups=[1,4]<=[4]", [[0, 1, 2, 3]]),
        ("replica_groups=[4,2]<=[2,4]T(1,0)", [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("replica_groups=mesh['data'=4] {'data'}, use_global_device_ids=true", [[0, 1, 2, 3]]),
        ("replica_groups=mesh['node'=2,'local'=4] {'local'}", [[0, 1, 2, 3], [4, 5, 6, 7]]),
        ("replica_groups=mesh['node'=2,'local'=4] {'node'}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
        ("channel_id=1, to_apply=%add", []),
    ],
)
def test_replica_groups_read_every_printed_form(text, groups):
    assert replica_groups(text) == groups


def test_replica_groups_of_a_two_axis_mesh_name_the_devices_that_talk():
    devices = np.asarray(jax.devices()).reshape(2, 2)
    mesh = Mesh(devices, ("node", "local"))
    blocks = np.arange(8, dtype=np.float32)
    ids = [[int(d.id) for d in row] for row in devices]
    for axis, expected in (("local", ids), ("node", [list(c) for c in zip(*ids)])):
        fn = jax.jit(
            jax.shard_map(
                lambda b, axis=axis: jax.lax.psum(b, axis),
                mesh=mesh,
                in_specs=P(("node", "local")),
                out_specs=P(("node", "local")),
                check_vma=False,
            )
        )
        (op,) = collectives_in(fn, blocks).hlo
        assert op.replica_groups == expected


def test_stablehlo_signatures_read_each_collective_past_its_region():
    mesh = data_mesh()
    x, y, w = toy_regression()
    text = {name: str(kernel.lower(x, y, w).compiler_ir(dialect="stablehlo"))
            for name, kernel in (("all_reduce", all_reduce_gradient(mesh)),
                                 ("reduce_scatter", reduce_scatter_gradient(mesh)))}
    assert stablehlo_signatures(text["all_reduce"]) == [
        ("all_reduce", "(tensor<8xf32>) -> tensor<8xf32>")]
    assert stablehlo_signatures(text["reduce_scatter"]) == [
        ("reduce_scatter", "(tensor<8xf32>) -> tensor<2xf32>")]
    # the inner `: tensor<f32>` of the region and the groups' `: tensor<1x4xi64>` are skipped
    two = ('%1 = "stablehlo.all_to_all"(%0) <{g = dense<[[0, 1]]> : tensor<1x2xi64>}> : '
           '(tensor<4x2xbf16>) -> tensor<4x2xbf16>\n%2 = "stablehlo.all_gather"(%1) : '
           '(tensor<2xf32>) -> tensor<8xf32>')
    assert stablehlo_signatures(two) == [("all_to_all", "(tensor<4x2xbf16>) -> tensor<4x2xbf16>"),
                                         ("all_gather", "(tensor<2xf32>) -> tensor<8xf32>")]
    assert stablehlo_signatures("%3 = stablehlo.add %1, %2 : tensor<f32>") == []
