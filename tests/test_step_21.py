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


def _rows(strategy, h, skewed):
    return list(rows_to_target(SWEEP, strategy, h, skewed, sweep_target(SWEEP, skewed)).values())


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


def test_local_sgd_needs_more_rows_than_dp_and_twice_as_many_on_skewed_shards():
    for skewed, low, high in ((False, 1.0, 1.5), (True, 2.0, 3.0)):
        dp = _rows(DP, 1, skewed)
        for h in HS:
            ratio = np.array(_rows("local_sgd_adamw", h, skewed)) / dp
            assert low < ratio.min() and ratio.max() < high, (skewed, h, ratio)


def test_diloco_needs_fewer_rows_than_dp_but_on_skewed_shards_at_the_largest_h():
    for skewed in (False, True):
        dp = _rows(DP, 1, skewed)
        for h in HS:
            fewer = all(a < b for a, b in zip(_rows("diloco", h, skewed), dp))
            assert fewer == (not skewed or h != max(HS)), (skewed, h)


def test_diloco_needs_fewer_rows_than_local_sgd_in_every_seed_and_dp_faster_fewer_still():
    for skewed in (False, True):
        for h in HS:
            diloco, local = _rows("diloco", h, skewed), _rows("local_sgd_adamw", h, skewed)
            assert _apart(diloco, local) and max(diloco) < min(local)
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
