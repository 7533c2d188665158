"""HSDP's step (``training.hsdp``): data parallelism's update, with the parameters sliced inside
a host, the gradient reduce-scattered inside it and only the slices all-reduced across hosts."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding

from course_utils.observe.ir import hlo_collectives
from course_utils.problems.classification import PART_FOUR_MLP
from course_utils.tools.cluster.training import row_step
from course_utils.training.hsdp import SLICED, hsdp_program


def test_one_hsdp_step_is_data_parallelism_s_with_the_parameters_sliced_in_each_host():
    devices = np.asarray(jax.devices())  # 4: 2 "hosts" of 2
    flat, two = Mesh(devices, ("d",)), Mesh(devices.reshape(2, 2), ("host", "device"))
    step, state, x, y = row_step(flat, "data_parallel", 16)
    expected = np.asarray(step(state, x, y).params)
    sliced = NamedSharding(two, SLICED)
    start = (jax.device_put(np.asarray(state.params), sliced),
             jax.device_put(np.zeros(expected.size, np.float32), sliced))
    hsdp = hsdp_program(two, rows=len(y), mlp=PART_FOUR_MLP)
    w, _ = hsdp(start, x, y)
    np.testing.assert_allclose(np.asarray(w), expected, atol=1e-6)
    assert [s.data.shape for s in w.addressable_shards] == [(expected.size // 2,)] * 4
    ops = [(o.op, o.replica_groups) for o in hlo_collectives(
        hsdp.lower(start, x, y).compile().as_text())]
    inside, across = [[0, 1], [2, 3]], [[0, 2], [1, 3]]
    assert ops == [("all-gather", inside), ("reduce-scatter", inside), ("all-reduce", across)]


def test_hsdp_needs_a_host_and_a_device_axis():
    with pytest.raises(ValueError, match="axes \\('host', 'device'\\)"):
        hsdp_program(Mesh(np.asarray(jax.devices()), ("d",)), rows=8, mlp=PART_FOUR_MLP)


def test_the_registered_hsdp_step_is_hsdp_program_s_and_train_refuses_it():
    from course_utils import data_mesh, train
    from course_utils.problems.classification import classification_task, init_params, padded_size
    from course_utils.training.hsdp import HSDP_ROWS
    from course_utils.training.strategies import Context, spec, state_specs

    two = Mesh(np.asarray(jax.devices()).reshape(2, 2), ("host", "device"))
    entry, n, rows = spec("hsdp"), padded_size(4, PART_FOUR_MLP), 64
    ctx = Context("device", 2, n, rows, k=1, mlp=PART_FOUR_MLP)
    state = entry.init(init_params(n, 0, PART_FOUR_MLP), two, ctx)
    specs = state_specs(state)
    assert (specs.params, specs.momentum, state.gradient) == (SLICED, SLICED, None)
    x, y = (jax.device_put(a[:rows], NamedSharding(two, HSDP_ROWS))
            for a in classification_task(mlp=PART_FOUR_MLP))
    step = jax.jit(jax.shard_map(lambda s, a, b: entry.step(s, a, b, ctx)[0], mesh=two,
                                 in_specs=(specs, HSDP_ROWS, HSDP_ROWS), out_specs=specs,
                                 check_vma=False))
    w, v = hsdp_program(two, rows=rows, mlp=PART_FOUR_MLP)((state.params, state.momentum), x, y)
    new = step(state, x, y)
    np.testing.assert_array_equal(np.asarray(new.params), np.asarray(w))
    np.testing.assert_array_equal(np.asarray(new.momentum), np.asarray(v))
    with pytest.raises(ValueError, match=r"hsdp runs on a mesh with axes \('host', 'device'\)"):
        train(data_mesh(), "hsdp", steps=1)


def test_train_runs_hsdp_on_a_mesh_of_replicas_as_data_parallelism():
    from course_utils import data_mesh, replica_mesh, train

    hsdp = train(replica_mesh(), "hsdp", steps=4, batch_size=16, heldout_every=2)
    flat = train(data_mesh(), "data_parallel", steps=4, batch_size=16, heldout_every=2)
    np.testing.assert_allclose(hsdp.params, flat.params, atol=1e-6)
    assert hsdp.memory.parameters == flat.memory.parameters // 2  # sliced over 2 devices
    # across: the all-reduce of a 1/D slice over 2 hosts, 2 · ½ · 4n/D bytes with D = 2
    assert hsdp.bytes_across_replicas == flat.params.size * 4 / 2
