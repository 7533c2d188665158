"""The latency models (collective_time, buckets) and the bucketed all-reduce kernel."""

import math

import numpy as np
import pytest

from course_utils import (
    ALGORITHMS,
    block_collective,
    bucketed_all_reduce,
    bucketed_step_time,
    collective_time,
    collectives_in,
    data_mesh,
    plan_buckets,
)


def _time(n, p, algorithm, alpha=1e-5, bandwidth=1e9):
    return collective_time(
        n, p, alpha_s=alpha, bandwidth_bytes_per_s=bandwidth, algorithm=algorithm
    )


def test_each_algorithm_has_its_latency_and_bandwidth_terms():
    p, n = 8, 2**20
    assert _time(0, p, "ring") == pytest.approx(2 * 7 * 1e-5)
    assert _time(0, p, "recursive_doubling") == pytest.approx(3 * 1e-5)
    assert _time(0, p, "halving_doubling") == pytest.approx(6 * 1e-5)
    assert _time(0, p, "tree") == pytest.approx(6 * 1e-5)
    no_latency = {a: _time(n, p, a, alpha=0) for a in ALGORITHMS}
    bandwidth_term = pytest.approx(2 * 7 / 8 * n / 1e9)
    assert no_latency["ring"] == no_latency["halving_doubling"] == bandwidth_term
    assert no_latency["recursive_doubling"] == pytest.approx(3 * n / 1e9)
    assert no_latency["tree"] == pytest.approx(6 * n / 1e9)
    assert _time(12345, 1, "ring") == 0 and _time(5, 3, "tree") == _time(5, 4, "tree")


def test_few_steps_win_small_messages_and_few_bytes_win_large_ones():
    small = {a: _time(64, 64, a) for a in ALGORITHMS}
    large = {a: _time(2**30, 64, a) for a in ALGORITHMS}
    assert min(small, key=small.get) == "recursive_doubling"
    assert min(large, key=large.get) in ("ring", "halving_doubling")
    assert large["halving_doubling"] < large["ring"]  # same bytes, fewer steps


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"algorithm": "bus"}, "algorithm must be one of"),
        ({"ranks": 0}, "ranks must be a positive integer"),
        ({"bandwidth_bytes_per_s": 0}, "bandwidth_bytes_per_s > 0"),
    ],
)
def test_bad_arguments_are_named(kwargs, match):
    args = {"nbytes": 8, "ranks": 4, "alpha_s": 1e-6, "bandwidth_bytes_per_s": 1e9,
            "algorithm": "ring", **kwargs}
    with pytest.raises(ValueError, match=match):
        collective_time(**args)


def test_buckets_close_when_full_and_keep_the_order():
    assert plan_buckets([4] * 6, 8) == [[0, 1], [2, 3], [4, 5]]
    assert plan_buckets([4, 100, 4], 8) == [[0, 1], [2]]
    assert plan_buckets([4] * 3, 1) == [[0], [1], [2]]
    assert plan_buckets([4] * 3, 10**9) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="bucket_bytes must be positive"):
        plan_buckets([4], 0)


def test_the_best_bucket_is_in_between_when_the_backward_pass_overlaps():
    sizes = [2**16] * 64  # 4 MiB of gradients
    model = dict(ranks=8, alpha_s=5e-5, bandwidth_bytes_per_s=1e9, backward_s=0.01)
    times = {b: bucketed_step_time(sizes, b, **model) for b in (2**16, 2**20, 2**22)}
    assert times[2**20] < times[2**16] and times[2**20] < times[2**22]
    one = bucketed_step_time(sizes, 2**22, **model)
    assert one == pytest.approx(0.01 + _time(2**22, 8, "ring", alpha=5e-5))
    assert bucketed_step_time([8], 8, **{**model, "backward_s": 1.0}) >= 1.0


MATCHES_PSUM = """
from course_utils.collectives.bucketing import bucketed_all_reduce
mesh = data_mesh()
p = mesh.size
rng = np.random.default_rng(p)
grads = [rng.standard_normal((p, m)).astype(np.float32) for m in (1, 7, 1024, 3, 256)]
psum = block_collective(mesh, "all_reduce")
worst, same_placement = 0.0, True
for bucket in (1, 64, 4096, 10**9):
    out = bucketed_all_reduce(mesh, bucket)(grads)
    for got, g in zip(out, grads):
        ref = psum(g)
        ref.block_until_ready()
        same_placement &= got.sharding == ref.sharding
        worst = max(worst, float(np.max(np.abs(np.asarray(got) - np.asarray(ref)))))
print(json.dumps({"worst": worst, "same_placement": bool(same_placement)}))
"""


@pytest.mark.parametrize("n", [2, 4, 8])
def test_bucketed_all_reduce_equals_psum_of_each(run_with_devices, n):
    result = run_with_devices(n, MATCHES_PSUM)
    assert result["worst"] < 1e-4 and result["same_placement"]


def test_one_bucket_is_one_flat_all_reduce_and_many_are_combined_by_xla():
    mesh = data_mesh()
    p = mesh.size
    grads = [np.zeros((p, 1024), np.float32) for _ in range(8)]  # 4 KiB per device each
    one = collectives_in(bucketed_all_reduce(mesh, 2**20), grads).hlo
    assert [(o.op, o.bytes, o.buffers) for o in one] == [("all-reduce", 32768, 1)]
    many = collectives_in(bucketed_all_reduce(mesh, 4096), grads).hlo
    assert sum(o.buffers for o in many) == 8  # XLA may combine the 8 psums
    assert sum(o.bytes for o in many) == 32768
    with pytest.raises(ValueError, match="bucket_bytes must be a positive integer"):
        bucketed_all_reduce(mesh, 0)
    with pytest.raises(ValueError, match=r"block array 1 has shape \(3, 2\)"):
        bucketed_all_reduce(mesh, 8)([np.zeros((p, 2)), np.zeros((3, 2))])
    assert math.isclose(np.asarray(block_collective(mesh, "all_reduce")(grads[0])).sum(), 0.0)
