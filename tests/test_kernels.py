import re
import traceback

import jax
import numpy as np
import pytest

from course_utils import (
    COLLECTIVES,
    all_gather_shards,
    all_reduce_gradient,
    block_collective,
    data_mesh,
    placements,
    reduce_scatter_gradient,
    reference_gradient,
    shard_shapes,
    sharded_momentum_step,
    toy_regression,
)
from course_utils.collectives.bucketing import bucketed_all_reduce
from course_utils.collectives.ring import ring_all_gather, ring_reduce_scatter
from course_utils.constants import ATOL, RTOL

TOL = dict(atol=ATOL, rtol=RTOL)


@pytest.fixture(scope="module")
def mesh():
    return data_mesh()


@pytest.fixture(scope="module")
def placed(mesh):
    rows, replicated, sliced = placements(mesh)
    xh, yh, wh = toy_regression()
    return (xh, yh, wh), (
        jax.device_put(xh, rows),
        jax.device_put(yh, sliced),
        jax.device_put(wh, replicated),
    )


def test_all_three_paths_equal_the_reference_on_every_shard(mesh, placed):
    host, dev = placed
    reference = reference_gradient(*host)
    ga = all_reduce_gradient(mesh)(*dev)
    gs = reduce_scatter_gradient(mesh)(*dev)
    gg = all_gather_shards(mesh)(gs)
    for g in (ga, gs, gg):
        np.testing.assert_allclose(np.asarray(g), reference, **TOL)
    for g in (ga, gg):
        for shard in g.addressable_shards:
            np.testing.assert_allclose(np.asarray(shard.data), reference, **TOL)
    for i, shard in enumerate(sorted(gs.addressable_shards, key=lambda s: s.device.id)):
        np.testing.assert_allclose(np.asarray(shard.data), reference[2 * i : 2 * i + 2], **TOL)
    assert (
        shard_shapes(ga) == [(8,)] * 4
        and shard_shapes(gs) == [(2,)] * 4
        and shard_shapes(gg) == [(8,)] * 4
    )


def test_host_arrays_are_placed_by_the_kernel(mesh, placed):
    host, _ = placed
    g = reduce_scatter_gradient(mesh)(*host)
    np.testing.assert_allclose(np.asarray(g), reference_gradient(*host), **TOL)
    assert shard_shapes(g) == [(2,)] * 4


def test_normalization_uses_the_global_row_count(mesh):
    host = toy_regression(32, 4)
    np.testing.assert_allclose(
        np.asarray(all_reduce_gradient(mesh)(*host)), reference_gradient(*host), **TOL
    )


def test_random_joint_row_permutations_leave_the_gradient_unchanged(mesh):
    x, y, w = toy_regression()
    reference = reference_gradient(x, y, w)
    rng = np.random.default_rng(0)
    for _ in range(5):
        order = rng.permutation(len(y))
        for kernel in (all_reduce_gradient(mesh), reduce_scatter_gradient(mesh)):
            np.testing.assert_allclose(np.asarray(kernel(x[order], y[order], w)), reference, **TOL)
    wrong = reference_gradient(x, y[::-1].copy(), w)
    assert np.max(np.abs(wrong - reference)) > 1e-3


def _raised_outside_jax(err) -> bool:
    frames = [f.filename for f in traceback.extract_tb(err.value.__traceback__)]
    return not any("/jax/" in f for f in frames)


@pytest.mark.parametrize(
    "n_rows, n_features, builder, match",
    [
        (15, 8, all_reduce_gradient, "15 rows do not divide over 4 devices"),
        (18, 8, reduce_scatter_gradient, "18 rows do not divide over 4 devices"),
        (16, 6, reduce_scatter_gradient, "6 features do not divide over 4 devices"),
    ],
)
def test_shapes_that_do_not_divide_fail_before_tracing(mesh, n_rows, n_features, builder, match):
    kernel = builder(mesh)
    for entry in (kernel, kernel.lower):
        with pytest.raises(ValueError, match=match) as err:
            entry(*toy_regression(n_rows, n_features))
        assert _raised_outside_jax(err)


def test_six_features_are_fine_for_all_reduce(mesh):
    host = toy_regression(16, 6)
    np.testing.assert_allclose(
        np.asarray(all_reduce_gradient(mesh)(*host)), reference_gradient(*host), **TOL
    )


def test_mismatched_shapes_and_argument_count(mesh):
    x, y, w = toy_regression()
    with pytest.raises(ValueError, match="shapes disagree") as err:
        all_reduce_gradient(mesh)(x, y[:8], w)
    assert _raised_outside_jax(err)
    with pytest.raises(TypeError, match="expected 3 arrays"):
        all_reduce_gradient(mesh)(x, y)
    with pytest.raises(
        ValueError, match=r"1-D array whose length divides over 4 devices, got shape \(6,\)"
    ):
        all_gather_shards(mesh)(np.zeros(6, np.float32))


def test_sharded_momentum_step_is_elementwise_and_keeps_sharding(mesh):
    sliced = placements(mesh).sliced
    w, v, g = (
        np.linspace(a, b, 8, dtype=np.float32) for a, b in ((0.1, -0.2), (-0.02, 0.03), (1.0, 2.0))
    )
    w_new, v_new = sharded_momentum_step(*(jax.device_put(a, sliced) for a in (w, v, g)))
    np.testing.assert_allclose(np.asarray(v_new), 0.9 * v + g, **TOL)
    np.testing.assert_allclose(np.asarray(w_new), w - 0.1 * (0.9 * v + g), **TOL)
    assert shard_shapes(w_new) == shard_shapes(v_new) == [(2,)] * 4
    w2, v2 = sharded_momentum_step(w, v, g, lr=0.5, beta=0.0)
    np.testing.assert_allclose(np.asarray(w2), w - 0.5 * g, **TOL)


def test_momentum_step_bad_input():
    with pytest.raises(ValueError, match=r"one shape, got w \(8,\), v \(4,\), g \(8,\)"):
        sharded_momentum_step(np.zeros(8), np.zeros(4), np.zeros(8))
    with pytest.raises(ValueError, match="lr must be a number"):
        sharded_momentum_step(np.zeros(8), np.zeros(8), np.zeros(8), lr="fast")


MULTI_DEVICE_CHECK = """
mesh = data_mesh()
x, y, w = toy_regression()
reference = reference_gradient(x, y, w)
ga = all_reduce_gradient(mesh)(x, y, w)
gs = reduce_scatter_gradient(mesh)(x, y, w)
gg = all_gather_shards(mesh)(gs)
error = max(float(np.max(np.abs(np.asarray(g) - reference))) for g in (ga, gs, gg))
print(json.dumps({"error": error, "shapes": [shard_shapes(g) for g in (ga, gs, gg)]}))
"""


@pytest.mark.parametrize("n", [2, 4, 8])
def test_kernels_match_the_reference_with_2_4_8_devices(run_with_devices, n):
    result = run_with_devices(n, MULTI_DEVICE_CHECK)
    assert result["error"] < 2e-6
    assert result["shapes"] == [[[8]] * n, [[8 // n]] * n, [[8]] * n]


def test_block_collectives_match_their_numpy_semantics(mesh):
    p, m = 4, 8
    blocks = (np.arange(p * m, dtype=np.float32).reshape(p, m) + 1) ** 2
    total = blocks.sum(axis=0)
    view = {kind: np.asarray(block_collective(mesh, kind)(blocks)) for kind in COLLECTIVES}
    np.testing.assert_array_equal(view["all_reduce"], np.tile(total, (p, 1)))
    np.testing.assert_array_equal(view["reduce_scatter"], total.reshape(p, m // p))
    np.testing.assert_array_equal(view["all_gather"], np.tile(blocks.reshape(-1), (p, 1)))
    shapes = {kind: shard_shapes(block_collective(mesh, kind)(blocks)) for kind in COLLECTIVES}
    assert shapes == {
        "all_reduce": [(1, m)] * p,
        "reduce_scatter": [(1, m // p)] * p,
        "all_gather": [(1, p * m)] * p,
    }


def test_block_collective_bad_input(mesh):
    with pytest.raises(ValueError, match="kind must be one of"):
        block_collective(mesh, "broadcast")
    with pytest.raises(ValueError, match=r"one row per device; got \(3, 8\)"):
        block_collective(mesh, "all_reduce")(np.zeros((3, 8), np.float32))
    with pytest.raises(ValueError, match=r"m divisible by 4 devices; got blocks \(4, 6\)"):
        block_collective(mesh, "reduce_scatter")(np.zeros((4, 6), np.float32))


@pytest.mark.parametrize("builder", [
    all_reduce_gradient, reduce_scatter_gradient, all_gather_shards,
    lambda mesh: block_collective(mesh, "all_gather"), ring_reduce_scatter, ring_all_gather,
    lambda mesh: bucketed_all_reduce(mesh, 1024),
])
def test_a_builder_returns_the_same_kernel_for_the_same_mesh_and_another_for_another(
        mesh, builder):
    other = jax.sharding.Mesh(np.asarray(jax.devices())[::-1], mesh.axis_names)
    assert builder(mesh) is builder(data_mesh())  # an equal mesh built again: no re-trace
    assert builder(other) is not builder(mesh) and builder(other) is builder(other)


def test_block_collective_caches_on_the_kind_and_a_bad_kind_is_not_cached(mesh):
    kernels = [block_collective(mesh, kind) for kind in COLLECTIVES]
    assert len({id(k) for k in kernels}) == 3
    assert [block_collective(mesh, kind) for kind in COLLECTIVES] == kernels
    for _ in range(2):
        with pytest.raises(ValueError, match="kind must be one of"):
            block_collective(mesh, "all_to_all")


def test_a_cached_kernel_traces_once_per_shape(mesh):
    from course_utils.collectives.kernels import cached_builder, make_kernel

    traces = []

    @cached_builder
    def doubled(mesh):
        axis = mesh.axis_names[0]

        def body(block):
            traces.append(block.shape)
            return 2 * block

        spec = jax.sharding.PartitionSpec(axis)
        return make_kernel(mesh, body, (spec,), spec, lambda a: None)

    blocks = np.ones(4 * mesh.size, np.float32)
    for _ in range(3):
        doubled(mesh)(blocks)
    doubled(mesh)(np.ones(8 * mesh.size, np.float32))
    assert traces == [(4,), (8,)]


def _entry_ops(hlo: str) -> list[str]:
    """The compiled program's instructions, without names or metadata: what it computes."""
    entry = hlo[hlo.index("\nENTRY"):]
    lines = [re.sub(r", metadata=\{[^}]*\}", "", line) for line in entry.splitlines()[1:]]
    return [re.sub(r"%[\w.]+", "%", line).strip() for line in lines if "=" in line]


def test_all_gather_shards_keeps_the_vma_check_and_compiles_to_the_unchecked_program(mesh):
    axis = mesh.axis_names[0]
    unchecked = jax.jit(jax.shard_map(
        lambda g: jax.lax.all_gather(g, axis, tiled=True), mesh=mesh, in_specs=jax.P(axis),
        out_specs=jax.P(), check_vma=False))
    g = jax.device_put(np.arange(8, dtype=np.float32), placements(mesh)[2])
    ours = _entry_ops(all_gather_shards(mesh).jitted.lower(g).compile().as_text())
    assert ours == _entry_ops(unchecked.lower(g).compile().as_text())
    assert sum("all-gather(" in line for line in ours) == 1
