"""The two-level all-reduce equals a flat psum; its groups and bytes; its model; its self-check."""

import jax
import numpy as np
import pytest

from course_utils import (
    data_mesh,
    hierarchical_all_reduce,
    hierarchical_time,
    node_local_mesh,
)
from course_utils.checks.algorithms import check_two_level
from course_utils.checks.helpers import ExerciseFailed

SAME_AS_PSUM = """
p = jax.device_count()
rng = np.random.default_rng(p)
flat = block_collective(data_mesh(), "all_reduce")
worst, groups = 0.0, {}
for nodes in [n for n in (1, 2, 4) if p % n == 0]:
    mesh = node_local_mesh(nodes)
    for m in (p, 8 * p):
        blocks = rng.standard_normal((p, m)).astype(np.float32)
        got, ref = hierarchical_all_reduce(mesh)(blocks), flat(blocks)
        for a, b in zip(got.addressable_shards, ref.addressable_shards):
            assert a.device == b.device and a.data.shape == b.data.shape
            worst = max(worst, float(np.max(np.abs(np.asarray(a.data) - np.asarray(b.data)))))
    ops = collectives_in(hierarchical_all_reduce(mesh), np.zeros((p, 8 * p), np.float32)).hlo
    groups[nodes] = [(o.op, o.replica_groups, o.bytes) for o in ops]
print(json.dumps({"worst": worst, "groups": groups}))
"""


@pytest.mark.parametrize("n", [2, 4, 8])
def test_two_levels_equal_a_flat_psum_and_talk_in_the_right_groups(run_with_devices, n):
    result = run_with_devices(n, SAME_AS_PSUM)
    assert result["worst"] < 1e-4
    local = n // 2
    rs, ar, ag = result["groups"]["2"]
    nodes = [list(range(0, local)), list(range(local, n))]
    assert rs[0] == "reduce-scatter" and rs[1] == nodes
    assert ar[0] == "all-reduce" and ar[1] == [[i, i + local] for i in range(local)]
    assert ag[0] == "all-gather" and ag[1] == nodes
    # across the nodes each device all-reduces 1/local of the vector
    assert ar[2] * local == 4 * 8 * n == ag[2]


def test_the_gain_grows_as_the_network_gets_slower_than_the_node():
    def ratio(local_bytes_per_s):
        t = hierarchical_time(2**26, 2, 4, alpha_s=1e-5, local_bytes_per_s=local_bytes_per_s,
                              node_bytes_per_s=1e9)
        return t.flat / t.hierarchical

    # equal links: the same bytes in total, in fewer steps (2(l-1) + 2(n-1) < 2(nl-1))
    assert 1 < ratio(1e9) < ratio(1e10) < ratio(1e11)
    assert ratio(1e11) > 3


def test_against_parallel_rings_the_bandwidth_gain_is_bounded_and_the_steps_remain():
    nodes, local, n = 2, 8, 2**28
    p = nodes * local
    bound = ((p - 1) / p) / ((nodes - 1) / nodes)

    def t(alpha_s, factor):
        return hierarchical_time(n, nodes, local, alpha_s=alpha_s, node_bytes_per_s=1e10,
                                 local_bytes_per_s=factor * 1e10)

    no_alpha = [t(0.0, f) for f in (1, 4, 32, 1e9)]
    assert all(x.parallel_rings / x.hierarchical <= bound * (1 + 1e-9) for x in no_alpha)
    assert no_alpha[-1].parallel_rings / no_alpha[-1].hierarchical == pytest.approx(bound)
    # the α steps: 2(p−1) against 2(l−1) + 2(n−1), whatever the bandwidths
    steps = t(1e-3, 1e9).parallel_rings - t(0.0, 1e9).parallel_rings
    assert steps == pytest.approx(2 * (p - 1) * 1e-3)
    assert t(1e-3, 1e9).hierarchical - t(0.0, 1e9).hierarchical == pytest.approx(
        (2 * (local - 1) + 2 * (nodes - 1)) * 1e-3)


def test_bad_meshes_and_blocks_get_a_short_error():
    p = jax.device_count()
    with pytest.raises(ValueError, match="divides the"):
        node_local_mesh(p + 1)
    with pytest.raises(ValueError, match="expected a mesh with axes"):
        hierarchical_all_reduce(data_mesh())
    with pytest.raises(ValueError, match="divisible by the 2 devices of a node"):
        hierarchical_all_reduce(node_local_mesh(p // 2))(np.zeros((p, 3), np.float32))


def _two_level(x):
    mine = jax.lax.psum_scatter(x, "local", tiled=True)
    return jax.lax.all_gather(jax.lax.psum(mine, "node"), "local", tiled=True)


@pytest.mark.parametrize(
    "fn, match",
    [
        (lambda x: jax.lax.psum(x, ("node", "local")),
         "one all-reduce over all devices: that is the flat schedule"),
        (lambda x: jax.lax.psum(jax.lax.psum(x, "local"), "node"),
         "nothing is reduce-scattered inside the nodes"),
        (lambda x: jax.lax.psum(jax.lax.psum_scatter(x, "local", tiled=True), "node"),
         "did you all-gather inside the node"),
        (lambda x: x * 0, "the sum is wrong"),
        (lambda x: jax.lax.all_gather(jax.lax.psum(jax.lax.psum_scatter(x, "node", tiled=True),
                                                   "local"), "node", tiled=True),
         "the axes are swapped"),
        (lambda x: jax.lax.all_gather(jax.lax.psum(jax.lax.psum_scatter(x, "local", tiled=True),
                                                   "node"), "node", tiled=True),
         "gather inside the node"),
        (lambda x: jax.lax.all_gather(jax.lax.psum(jax.lax.psum(jax.lax.psum_scatter(
            x, "local", tiled=True), "node"), "node") / 2, "local", tiled=True),
         "2 all-reduces cross the nodes"),
        (lambda x: jax.lax.psum_scatter(x, "local", scatter_dimension=1, tiled=True),
         "its only dimension is 0"),
        (
            lambda x: jax.lax.all_gather(
                jax.lax.psum_scatter(jax.lax.psum(x, "node"), "local", tiled=True), "local",
                tiled=True,
            ),
            "carries 2× a slice per device",
        ),
        (lambda x: jax.lax.all_gather(jax.lax.psum_scatter(x, "local", tiled=True), "local"),
         "must return a vector"),
        (lambda x: jax.lax.psum_scatter(x, "local"), "pass tiled=True"),
        (None, "my_two_level is not defined"),
        (lambda x: 1 / 0, "raised ZeroDivisionError"),
        (hierarchical_all_reduce(node_local_mesh(2)), "uses the package's hierarchical_all_reduce"),
        (lambda x: hierarchical_all_reduce(node_local_mesh(2))(x),
         "uses the package's hierarchical_all_reduce"),
    ],
)
def test_the_two_level_check(fn, match, capsys):
    mesh = node_local_mesh(2)
    check_two_level(_two_level, mesh)
    assert "PASSED: two-level all-reduce" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match=match):
        check_two_level(fn, mesh)


def test_the_two_level_check_runs_the_function_with_check_vma_on():
    # the value ends varying over both axes, as out_specs say: the check has no reason to turn
    # the type check off (the exercise's check, checks/hierarchy.py, keeps it on too)
    from course_utils.checks.algorithms import _two_level_kernel

    blocks = np.zeros((jax.device_count(), 8), np.float32)
    jaxpr = jax.make_jaxpr(_two_level_kernel(_two_level, node_local_mesh(2)))(blocks)
    (inner,) = [e for e in jaxpr.eqns[0].params["jaxpr"].eqns if e.primitive.name == "shard_map"]
    assert inner.params["check_vma"] is True
