"""Guards on step 14's prose: ZeRO-3 holds a chunk of every layer and gathers one layer at a
time (one all-gather and one reduce-scatter per layer, data parallelism's bytes in all), its
layout goes back to the task's flat vector, and it follows data parallelism on minibatches."""

import math

import numpy as np
import pytest

from course_utils import padded_size
from course_utils.problems.classification import LAYERS, N_PARAMS, PART_THREE_MLP, init_params
from course_utils.training.layers import layer_chunks, layer_order
from course_utils.training.strategies import spec, zero_peak_bytes

PER_LAYER = """
mesh = data_mesh()
dp = train(mesh, "data_parallel", steps=4, batch_size=32)
z3 = train(mesh, "zero3", steps=4, batch_size=32)
print(json.dumps({"dp": dp.loss, "z3": z3.loss, "gap": float(np.max(np.abs(dp.params - z3.params))),
                  "ops": [(c.op, c.bytes) for c in z3.collectives],
                  "bytes": [dp.bytes_per_step, z3.bytes_per_step]}))
"""


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
def test_every_device_holds_a_chunk_of_every_layer(p):
    n = padded_size(p)
    order, chunks = layer_order(n, p), layer_chunks(n, p)
    assert sorted(order.tolist()) == list(range(n)) and sum(chunks) == n // p
    w = init_params(n)
    np.testing.assert_array_equal(spec("zero3").flat(w[order], n, p, PART_THREE_MLP), w)
    slices = w[order].reshape(p, n // p)
    start = 0
    for (_, shape), chunk in zip(LAYERS, chunks):  # gathering chunk by chunk gives the layer
        whole = slices[:, start:start + chunk].reshape(-1)
        np.testing.assert_array_equal(whole[:math.prod(shape)],
                                      w[order[start]:order[start] + math.prod(shape)])
        assert not whole[math.prod(shape):].any()  # the rest is padding
        start += chunk
    assert order[0] == 0 and N_PARAMS <= max(order)


@pytest.mark.parametrize("p", [2, 3, 4, 8])
def test_the_peak_model_is_the_state_plus_what_the_page_says(p):
    n = padded_size(p)
    layers = [p * chunk for chunk in layer_chunks(n, p)]  # the page's layer_sizes
    peak = zero_peak_bytes(layers, p)
    assert sum(layers) == n and peak["data_parallel"] == 12 * n  # nothing beyond the state
    # "as written here it saves nothing at the peak": ZeRO-2's peak is ZeRO-1's
    assert peak["zero2"] == pytest.approx(peak["zero1"]) == pytest.approx(8 * n + 8 * n / p)
    # "its state plus one layer", below the whole vector gathered
    assert peak["zero3"] == pytest.approx(12 * n / p + 4 * max(layers))
    assert peak["zero3"] < 12 * n / p + 4 * n


@pytest.mark.parametrize("p", [3, 4])
def test_zero3_gathers_one_layer_at_a_time_and_follows_data_parallelism(p, run_with_devices):
    r = run_with_devices(p, PER_LAYER)
    np.testing.assert_allclose(r["z3"], r["dp"], rtol=1e-5)
    assert r["gap"] < 1e-4
    gathers = [b for op, b in r["ops"] if op == "all-gather"]
    scatters = [b for op, b in r["ops"] if op == "reduce-scatter"]
    assert len(gathers) == len(scatters) == len(LAYERS)
    n = padded_size(p)
    assert max(gathers) == 4 * p * max(layer_chunks(n, p)) < 4 * n  # the peak: one layer
    assert r["bytes"][1] == pytest.approx(r["bytes"][0])
