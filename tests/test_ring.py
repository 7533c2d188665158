"""The ring built from ppermute equals the built-in collectives; its program is p − 1 permutes."""

import numpy as np
import pytest

from course_utils import (
    block_collective,
    data_mesh,
    reduce_scatter_step,
    ring_all_gather,
    ring_chunk,
    ring_permutation,
    ring_reduce_scatter,
)

SAME_AS_BUILT_IN = """
mesh = data_mesh()
p = mesh.size
rng = np.random.default_rng(p)
worst = 0.0
for m in (p, 3 * p, 64 * p):
    blocks = rng.standard_normal((p, m)).astype(np.float32)
    for mine, kind in ((ring_reduce_scatter, "reduce_scatter"), (ring_all_gather, "all_gather")):
        got, expected = mine(mesh)(blocks), block_collective(mesh, kind)(blocks)
        assert got.shape == expected.shape and got.sharding == expected.sharding
        for a, b in zip(got.addressable_shards, expected.addressable_shards):
            assert a.device == b.device
            worst = max(worst, float(np.max(np.abs(np.asarray(a.data) - np.asarray(b.data)))))
ops = collectives_in(ring_reduce_scatter(mesh), np.zeros((p, 8 * p), np.float32)).hlo
print(json.dumps({"worst": worst, "ops": sorted({o.op for o in ops}), "count": len(ops),
                  "bytes": sorted({o.bytes for o in ops})}))
"""


@pytest.mark.parametrize("n", [2, 4, 8])
def test_the_hand_built_ring_equals_the_built_in_collectives(run_with_devices, n):
    result = run_with_devices(n, SAME_AS_BUILT_IN)
    assert result["worst"] < 1e-5
    assert result["ops"] == ["collective-permute"] and result["count"] == n - 1
    assert result["bytes"] == [4 * 8]  # each permute moves one chunk: 8 float32 values


def test_partial_sums_after_k_steps_hold_the_contributions_of_k_plus_1_devices():
    mesh = data_mesh()
    p = mesh.size
    blocks = np.repeat(2.0 ** np.arange(p, dtype=np.float32)[:, None], 2 * p, axis=1)  # bitmasks
    for k in range(p):
        rows = np.asarray(ring_reduce_scatter(mesh, n_steps=k)(blocks))
        for j in range(p):
            contributors = {d for d in range(p) if int(rows[j, 0]) >> d & 1}
            # device j holds chunk ring_chunk(j, k, p), summed over j and the k devices before it
            assert contributors == {(j - t) % p for t in range(k + 1)}
            assert ring_chunk(j, k, p) == (j - k - 1) % p


def test_the_package_step_is_the_default_and_a_wrong_step_gives_a_wrong_sum():
    mesh = data_mesh()
    p = mesh.size
    blocks = np.arange(p * 2 * p, dtype=np.float32).reshape(p, 2 * p)
    expected = np.asarray(block_collective(mesh, "reduce_scatter")(blocks))
    explicit = ring_reduce_scatter(mesh, step=reduce_scatter_step)(blocks)
    np.testing.assert_allclose(np.asarray(explicit), expected)

    def keep_own(partial, chunks, s, axis_name):  # never sends: no ring at all
        return partial + 0 * chunks[0]

    assert not np.allclose(np.asarray(ring_reduce_scatter(mesh, step=keep_own)(blocks)), expected)


def test_bad_input_gets_a_short_error():
    mesh = data_mesh()
    p = mesh.size
    with pytest.raises(ValueError, match=f"n_steps must be from 0 to p - 1 = {p - 1}"):
        ring_reduce_scatter(mesh, n_steps=p)
    with pytest.raises(ValueError, match=f"m divisible by {p} devices"):
        ring_reduce_scatter(mesh)(np.zeros((p, p + 1), np.float32))
    with pytest.raises(ValueError, match="one row per device"):
        ring_all_gather(mesh)(np.zeros(p, np.float32))
    assert ring_permutation(2) == [(0, 1), (1, 0)]
