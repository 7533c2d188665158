import jax
import pytest

from course_utils import (
    all_gather_shards,
    all_reduce_gradient,
    collectives_in,
    data_mesh,
    placements,
    reduce_scatter_gradient,
    toy_regression,
)
from course_utils.ir import hlo_collectives, stablehlo_collectives


def test_each_kernel_contains_its_collective_with_per_device_bytes():
    mesh = data_mesh()
    x, y, w = toy_regression()
    found = collectives_in(all_reduce_gradient(mesh), x, y, w)
    assert [(c["op"], c["shape"], c["bytes"]) for c in found["stablehlo"]] == [
        ("all_reduce", (8,), 32)
    ]
    assert [(c["op"], c["shape"], c["bytes"]) for c in found["hlo"]] == [("all-reduce", (8,), 32)]
    assert found["hlo"][0]["replica_groups"] == "{{0,1,2,3}}"
    found = collectives_in(reduce_scatter_gradient(mesh), x, y, w)
    assert [(c["op"], c["shape"], c["dtype"], c["bytes"]) for c in found["hlo"]] == [
        ("reduce-scatter", (2,), "f32", 8)
    ]
    assert [c["op"] for c in found["stablehlo"]] == ["reduce_scatter"]
    g = jax.device_put(w, placements(mesh).features)
    found = collectives_in(all_gather_shards(mesh), g)
    assert [(c["op"], c["shape"]) for c in found["stablehlo"] + found["hlo"]] == [
        ("all_gather", (8,)),
        ("all-gather", (8,)),
    ]


def test_a_program_without_collectives_has_none():
    assert collectives_in(jax.jit(lambda a: a * 2), jax.numpy.ones(4)) == {
        "stablehlo": [],
        "hlo": [],
    }


def test_parsers_read_scalars_and_other_dtypes():
    assert stablehlo_collectives(
        '"stablehlo.all_reduce"(%0) ({ ... }) : (tensor<f64>) -> tensor<f64>'
    ) == [{"op": "all_reduce", "shape": (), "dtype": "f64", "bytes": 8}]
    text = "%ag = bf16[4,6]{1,0} all-gather-start(%p), replica_groups=[2,2]<=[4], dimensions={0}"
    assert hlo_collectives(text) == [
        {
            "op": "all-gather",
            "shape": (4, 6),
            "dtype": "bf16",
            "bytes": 48,
            "replica_groups": "[2,2]<=[4]",
        }
    ]


def test_a_plain_function_is_refused():
    with pytest.raises(TypeError, match="jitted function"):
        collectives_in(lambda a: a, 1.0)
