"""Guards on step 21's prose: what the page says of the compiled programs, of the memory per
device and of the saved sweep (``diloco.json``) holds."""

import numpy as np
import pytest

from course_utils import padded_size, replica_mesh, train
from course_utils.results.diloco import (
    DP,
    rows_to_target,
    saved_diloco_results,
    sweep_curves,
    sweep_target,
)
from course_utils.results.training import crossing_step

SWEEP = saved_diloco_results()
HS = SWEEP.plan.local_steps


def _rows(strategy, h, skewed, interpolate=True):
    target = sweep_target(SWEEP, skewed)
    return list(rows_to_target(SWEEP, strategy, h, skewed, target,
                               interpolate=interpolate).values())


def _last(strategy, h, skewed):
    return [c.heldout_loss[-1][1] for c in sweep_curves(SWEEP, strategy, h, skewed).values()]


def _apart(a, b):
    return max(a) < min(b) or min(a) > max(b)


def test_the_bytes_across_and_the_memory_read_as_the_page_says():
    mesh = replica_mesh()
    r, d = mesh.shape["host"], mesh.shape["device"]
    n = padded_size(mesh.size)
    dp = train(mesh, "dp_adamw", steps=1, batch_size=8)
    diloco = train(mesh, "diloco", steps=8, local_steps=8, batch_size=8)
    assert dp.bytes_across_replicas == pytest.approx(8 * diloco.bytes_across_replicas)  # "H"
    assert dp.bytes_across_replicas == pytest.approx(2 * (r - 1) / r * 4 * n / d)  # "n/D"
    # "2/D of a copy more" than data parallelism: the parameters at the sync and the momentum
    assert diloco.memory.total - dp.memory.total == 2 * 4 * n // d


def test_the_plan_is_the_one_the_page_names():
    # "H = 8, 32 and 128", "three seeds", the paper's outer 0.7 and 0.9
    assert HS == (8, 32, 128) and len(SWEEP.plan.seeds) == 3
    assert (SWEEP.outer_lr, SWEEP.outer_momentum) == (0.7, 0.9)


def test_local_sgd_needs_more_rows_than_dp_and_twice_as_many_on_skewed_shards():
    for skewed, low, high in ((False, 1.0, 1.5), (True, 2.0, 3.0)):
        dp = _rows(DP, 1, skewed)
        for h in HS:
            ratio = np.array(_rows("local_sgd_adamw", h, skewed)) / dp
            assert low < ratio.min() and ratio.max() < high, (skewed, h, ratio)


def test_diloco_needs_fewer_rows_than_dp_below_the_largest_h_read_either_way():
    for skewed in (False, True):
        for interpolate in (True, False):
            dp = _rows(DP, 1, skewed, interpolate)
            for h in HS[:-1]:  # "at H = 8 and 32, read either way"
                assert all(a < b for a, b in zip(_rows("diloco", h, skewed, interpolate), dp))
        # "at H = 128 the sync that reaches the target comes after data parallelism's"
        assert min(_rows("diloco", max(HS), skewed, False)) > max(_rows(DP, 1, skewed, False))


def test_diloco_needs_fewer_rows_than_local_sgd_but_at_the_same_sync_at_128_on_iid():
    for skewed in (False, True):
        for h in HS:
            diloco, local = _rows("diloco", h, skewed), _rows("local_sgd_adamw", h, skewed)
            assert _apart(diloco, local) and max(diloco) < min(local)
            at = _rows("diloco", h, skewed, False), _rows("local_sgd_adamw", h, skewed, False)
            if (skewed, h) == (False, max(HS)):
                assert at[0] == at[1]  # "reach the target at the same sync"
            else:
                assert max(at[0]) < min(at[1])


def test_dp_with_the_next_learning_rate_is_sooner_still():
    faster = next(r for r in SWEEP.lr_runs if r.lr > SWEEP.adamw_lr)
    rows = crossing_step(faster, sweep_target(SWEEP, False)) * SWEEP.plan.rows_per_step
    assert rows < min(min(_rows("diloco", h, False)) for h in HS)  # "sooner still"
    assert min(SWEEP.lr_runs, key=lambda r: r.heldout_loss[-1][1]).lr == SWEEP.adamw_lr


def test_the_ends_read_as_the_page_says():
    dp = _last(DP, 1, False)
    ends = [_last("diloco", h, False) for h in HS]
    assert all(min(e) > max(dp) for e in ends)  # "ends above data parallelism"
    assert [np.mean(e) for e in ends] == sorted(np.mean(e) for e in ends)  # "the larger H"
    local8 = _last("local_sgd_adamw", min(HS), False)
    assert not _apart(ends[0], local8)  # "at H = 8 within local SGD's range"
    for h in HS:  # skewed: "between the two"
        assert max(_last(DP, 1, True)) < min(_last("diloco", h, True))
        assert max(_last("diloco", h, True)) < min(_last("local_sgd_adamw", h, True))
