import jax
import numpy as np
import pytest

from course_utils import (
    data_mesh,
    placement_report,
    placements,
    shard_shapes,
    toy_regression,
    values_per_device,
)


def test_shapes_and_report_for_each_placement():
    rows, replicated, features = placements(data_mesh())
    x, y, w = toy_regression()
    xs, ws, ys = jax.device_put(x, rows), jax.device_put(w, replicated), jax.device_put(y, features)
    assert shard_shapes(xs) == [(4, 8)] * 4
    assert shard_shapes(ws) == [(8,)] * 4
    assert shard_shapes(ys) == [(4,)] * 4
    assert values_per_device(xs) == 32 and values_per_device(ws) == 8
    report = placement_report(xs).splitlines()
    assert report[0] == "global shape (16, 8), float32"
    assert report[1:] == [f"  cpu:{i}  [{4 * i}:{4 * i + 4}, 0:8]  (4, 8)" for i in range(4)]
    assert placement_report(ws).splitlines()[3] == "  cpu:2  [0:8]  (8,)"


def test_host_arrays_are_refused_with_a_hint():
    with pytest.raises(TypeError, match="device_put"):
        shard_shapes(np.zeros(4))
