import pytest

from course_utils import communication_budget, ring_bytes


def test_ring_bytes_for_the_seed_gradient():
    assert ring_bytes(32, 4) == {"reduce_scatter": 24.0, "all_gather": 24.0, "all_reduce": 48.0}
    assert ring_bytes(32, 1)["all_reduce"] == 0
    assert ring_bytes(32, 8)["all_reduce"] == 56.0


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


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ring_bytes(-1, 4), "nbytes"),
        (lambda: ring_bytes(32, 0), "ranks"),
        (lambda: ring_bytes(3.5, 2), "nbytes"),
        (lambda: communication_budget(10, ranks=(4,)), "10 bytes do not divide over 4 ranks"),
        (lambda: communication_budget(ranks=(2, True)), "ranks"),
    ],
)
def test_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()
