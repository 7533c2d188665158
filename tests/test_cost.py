import pytest

from course_utils import (
    Fit,
    PerCollective,
    communication_budget,
    divisible_size,
    ring_bytes,
    ring_steps,
    ring_time,
    traffic_bytes,
)


def test_ring_bytes_for_the_seed_gradient():
    assert ring_bytes(32, 4) == PerCollective(reduce_scatter=24.0, all_gather=24.0, all_reduce=48.0)
    assert ring_bytes(32, 1).all_reduce == 0
    assert ring_bytes(32, 8).all_reduce == 56.0


def test_budget_matches_the_seed_table():
    budget = communication_budget()
    assert [row["ranks"] for row in budget] == [2, 4, 8]
    assert [row["all_reduce_bytes"] for row in budget] == [1048576, 1572864, 1835008]
    assert all(row["all_reduce_bytes"] == row["scatter_gather_bytes"] for row in budget)
    assert [row["shard_storage_bytes"] for row in budget] == [524288, 262144, 131072]
    assert all(isinstance(v, int) for row in budget for v in row.values())


def test_budget_approaches_twice_the_gradient():
    rows = communication_budget(3 * 2**10, ranks=(3, 6, 12, 96))
    ratios = [row["all_reduce_bytes"] / (3 * 2**10) for row in rows]
    assert ratios == sorted(ratios) and 1.9 < ratios[-1] < 2


@pytest.mark.parametrize("p", [2, 3, 4, 8, 16, 64])
def test_budget_equals_the_ring_formulas_in_integers(p):
    # the guards step 08 kept in its table cell: 2(p-1)N/p sent, the same for the cycle, N/p kept
    n = divisible_size(2**20, p)
    (row,) = communication_budget(n, (p,))
    assert row["all_reduce_bytes"] == 2 * (p - 1) * n // p == row["scatter_gather_bytes"]
    assert row["shard_storage_bytes"] * p == n
    assert ring_steps(p).all_reduce == 2 * (p - 1)
    assert dict(row) == row and type(dict(row)) is dict  # a dict; step 08's check knows the type


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ring_bytes(-1, 4), "nbytes"),
        (lambda: ring_bytes(32, 0), "ranks"),
        (lambda: ring_bytes(3.5, 2), "nbytes"),
        (lambda: communication_budget(10, ranks=(4,)), "10 bytes do not divide over 4 ranks"),
        (lambda: communication_budget(ranks=(2, True)), "ranks"),
        (lambda: ring_steps(0), "ranks"),
        (lambda: divisible_size(0, 4), "n"),
        (lambda: divisible_size(8, 0), "ranks"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8, 64])
def test_ring_steps_are_the_latency_multiplier(p):
    steps = ring_steps(p)
    assert steps == PerCollective(reduce_scatter=p - 1, all_gather=p - 1, all_reduce=2 * (p - 1))
    # T = 2(p−1)·α + 2(p−1)/p·N/B: with B so large the bytes cost nothing, only steps remain
    t = ring_time(2**20, p, alpha_s=7e-6, bytes_per_s=1e21)
    assert t.all_reduce == pytest.approx(7e-6 * 2 * (p - 1), abs=1e-12)


def test_ring_time_is_latency_plus_bandwidth():
    # N = 4 MB on 4 ranks, α = 10 µs, B = 1 GB/s: 6·10 µs + 1.5·4 MB / 1 GB/s = 60 + 6000 µs
    t = ring_time(4_000_000, 4, alpha_s=1e-5, bytes_per_s=1e9)
    assert t._asdict() == pytest.approx(
        {"reduce_scatter": 3030e-6, "all_gather": 3030e-6, "all_reduce": 6060e-6}
    )


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_all_reduce_is_twice_either_half_at_large_sizes(p):
    """The model's prediction notebook 10 compares with its saved run."""
    sizes = [2**k for k in range(5, 31)]
    # bytes per rank: exactly twice, at every size
    for s in sizes:
        sent = ring_bytes(s, p)
        assert sent.all_reduce == 2 * sent.reduce_scatter == 2 * sent.all_gather
    # the ring's α-β time: both terms double, so twice at every size
    for s in sizes:
        t = ring_time(s, p, alpha_s=5e-6, bytes_per_s=10e9)
        assert t.all_reduce == pytest.approx(2 * t.reduce_scatter)
        assert t.reduce_scatter == pytest.approx(t.all_gather)
    # one fixed cost per call (notebook 10's fit α + S/B) and ring bytes over a link: the ratio
    # climbs from about 1 (latency-bound) to 2 (bandwidth-bound)
    fit = Fit(alpha_s=100e-6, bytes_per_s=10e9, max_rel_error=0.0, n_points=2)
    ratios = [
        fit.time_s(ring_bytes(s, p).all_reduce) / fit.time_s(ring_bytes(s, p).reduce_scatter)
        for s in sizes
    ]
    assert ratios == sorted(ratios)
    assert ratios[0] < 1.01 and 1.99 < ratios[-1] < 2


@pytest.mark.parametrize("p", [1, 2, 3, 5, 6, 7, 8])
def test_divisible_size(p):
    for n in (1, 8, 1024, 2**20):
        m = divisible_size(n, p)
        assert m % p == 0 and n <= m < n + p
    assert divisible_size(2**20, 4) == 2**20


def test_traffic_model_counts_reads_and_writes():
    # reduce-scatter: read p partials of S, write S; all-gather: read and write S per device;
    # all-reduce: reduce-scatter plus p devices copying (p−1)/p·S, read and written
    for p in (1, 2, 3, 8):
        assert traffic_bytes("psum_scatter", 1, p) == p + 1
        assert traffic_bytes("all_gather", 1, p) == 2 * p
        assert traffic_bytes("psum", 1, p) == (p + 1) + 2 * (p - 1)


@pytest.mark.parametrize("p", range(1, 9))
def test_the_ring_bytes_are_exact_at_every_device_count(p):
    # step 11 compares them with ==: 5 steps of 1/6 of N must give exactly 5/6 of N
    n = 4 * 840 * 4
    assert ring_bytes(n, p) == ((p - 1) * n // p, (p - 1) * n // p, 2 * (p - 1) * n // p)
