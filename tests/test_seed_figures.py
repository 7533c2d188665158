"""Every figure and assertion of the unit's seed script (its specification), via the public API."""

import jax
import numpy as np

from course_utils import (
    all_gather_shards,
    all_reduce_gradient,
    collectives_in,
    communication_budget,
    data_mesh,
    placement_figure_data,
    placements,
    reduce_scatter_gradient,
    reference_gradient,
    ring_bytes,
    shard_shapes,
    sharded_momentum_step,
    toy_regression,
    values_per_device,
)
from course_utils.constants import ATOL, RTOL

TOL = dict(atol=ATOL, rtol=RTOL)


def test_the_seed_end_to_end():
    mesh = data_mesh()
    rows, replicated, sliced = placements(mesh)
    xh, yh, wh = toy_regression()
    x, y, w = jax.device_put(xh, rows), jax.device_put(yh, sliced), jax.device_put(wh, replicated)
    all_reduce, scatter, gather = (
        all_reduce_gradient(mesh),
        reduce_scatter_gradient(mesh),
        all_gather_shards(mesh),
    )
    ga, gs = all_reduce(x, y, w), scatter(x, y, w)
    gg = gather(gs)
    reference = reference_gradient(xh, yh, wh)
    np.testing.assert_allclose(reference, 2 * xh.T @ (xh @ wh - yh) / 16, rtol=1e-6)
    for result in (ga, gs, gg):
        np.testing.assert_allclose(np.asarray(result), reference, **TOL)
    assert (shard_shapes(ga), shard_shapes(gs), shard_shapes(gg)) == (
        [(8,)] * 4,
        [(2,)] * 4,
        [(8,)] * 4,
    )
    assert collectives_in(all_reduce, x, y, w).stablehlo[0].op == "all_reduce"
    assert collectives_in(scatter, x, y, w).stablehlo[0].op == "reduce_scatter"

    ring = ring_bytes(wh.nbytes, 4)
    assert (ring.all_reduce, ring.reduce_scatter) == (48.0, 24.0)
    data = placement_figure_data([values_per_device(g) for g in (ga, gs, gg)], wh.nbytes, 4)
    assert data["panels"][0]["series"][0]["y"] == [8, 2, 8]
    assert data["panels"][1]["series"][0]["y"] == [48.0, 24.0, 48.0]

    v_host = np.linspace(-0.02, 0.03, 8, dtype=np.float32)
    new_w, new_v = sharded_momentum_step(
        jax.device_put(wh, sliced), jax.device_put(v_host, sliced), gs
    )
    updated = gather(new_w)
    expected_w = wh - 0.1 * (0.9 * v_host + reference)
    for shard in updated.addressable_shards:
        np.testing.assert_allclose(np.asarray(shard.data), expected_w, **TOL)
    assert shard_shapes(new_v) == [(2,)] * 4

    w2h = wh + np.float32(0.17)
    r2 = reference_gradient(xh, yh, w2h)
    x2, y2 = xh[::-1].copy(), yh[::-1].copy()
    for answer in (all_reduce(x2, y2, w2h), gather(scatter(x2, y2, w2h))):
        for shard in answer.addressable_shards:
            np.testing.assert_allclose(np.asarray(shard.data), r2, **TOL)
    assert np.max(np.abs(reference_gradient(xh, yh[::-1].copy(), w2h) - r2)) > 0.01

    budget = communication_budget(2**20, (2, 4, 8))
    assert [row["all_reduce_bytes"] for row in budget] == [1048576, 1572864, 1835008]
    assert all(row["all_reduce_bytes"] == row["scatter_gather_bytes"] for row in budget)
