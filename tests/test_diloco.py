"""DiLoCo and its baselines on a mesh of replicas (``training.diloco``): data parallelism with
AdamW sends the gradient's two-level all-reduce every step, DiLoCo the outer gradient's every H
steps, the outer step is optax's Nesterov SGD, and local SGD is DiLoCo's loop with the average."""

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils import (
    Topology,
    data_mesh,
    replica_mesh,
    strategy_traffic,
    train,
)
from course_utils.problems.classification import PART_THREE_MLP, init_params, loss_sum
from course_utils.training.batches import split_task
from course_utils.training.diloco import outer_parts, outer_step
from course_utils.training.hsdp import HOST
from course_utils.training.optimizers import (
    OUTER_LR,
    OUTER_MOMENTUM,
    UNIT_STEP_LR,
    adamw,
    nesterov_multiplier,
    outer_nesterov,
)
from course_utils.training.state import Context, TrainState, state_specs
from course_utils.training.strategies import SPECS, spec

SMALL = {"steps": 8, "batch_size": 32, "seed": 1}


def _with_outer(monkeypatch, name: str, outer) -> str:
    """A copy of the ``diloco`` entry with another outer optimizer, registered as ``name``."""
    entry = spec("diloco")
    monkeypatch.setitem(SPECS, name, dataclasses.replace(
        entry, name=name, parts=entry.parts._replace(extra=outer_parts(outer)),
        sync=entry.sync._replace(outer=outer_step(outer))))
    return name


def test_diloco_with_outer_lr_1_and_no_momentum_is_local_sgd_bit_for_bit(monkeypatch):
    # optax's Nesterov trace with decay 0 adds 0 · m to Δ, which changes no bit of a finite Δ
    name = _with_outer(monkeypatch, "diloco_plain", outer_nesterov(1.0, 0.0))
    mesh = replica_mesh()
    plain = train(mesh, name, local_steps=4, heldout_every=4, skewed=True, **SMALL)
    local = train(mesh, "local_sgd_adamw", local_steps=4, heldout_every=4, skewed=True, **SMALL)
    nesterov = train(mesh, "diloco", local_steps=4, heldout_every=4, skewed=True, **SMALL)
    assert plain.heldout_loss == local.heldout_loss and plain.loss == local.loss
    np.testing.assert_array_equal(plain.params, local.params)
    assert nesterov.heldout_loss[-1] != local.heldout_loss[-1]  # the momentum changes the run


def test_the_ablations_are_diloco_without_its_momentum_and_its_momentum_at_a_steady_step_1(
        monkeypatch):
    mesh, options = replica_mesh(), {"local_steps": 2, "heldout_every": 2, **SMALL}
    # outer SGD at DiLoCo's lr: a Nesterov trace of decay 0 changes no bit, and keeps a buffer
    zero = _with_outer(monkeypatch, "nesterov_mu_0", outer_nesterov(OUTER_LR, 0.0))
    sgd, with_trace = train(mesh, "diloco_sgd", **options), train(mesh, zero, **options)
    assert sgd.heldout_loss == with_trace.heldout_loss
    n, d = sgd.params.size, mesh.shape["device"]
    assert with_trace.memory.optimizer - sgd.memory.optimizer == 4 * n // d  # no momentum held
    unit = _with_outer(monkeypatch, "nesterov_1_minus_mu",
                       outer_nesterov(1 - OUTER_MOMENTUM, OUTER_MOMENTUM))
    np.testing.assert_allclose([v for _, v in train(mesh, "diloco_unit_step", **options)
                                .heldout_loss],
                               [v for _, v in train(mesh, unit, **options).heldout_loss],
                               rtol=1e-6)
    # the steady step: averaging's 1 for the unit-step ablation, the paper's 7 for DiLoCo
    assert nesterov_multiplier(500, UNIT_STEP_LR, mean=False) == pytest.approx(1.0)
    assert nesterov_multiplier(500, mean=False) == pytest.approx(OUTER_LR / (1 - OUTER_MOMENTUM))
    assert nesterov_multiplier(500, UNIT_STEP_LR) < 1  # the mean: smaller early steps
    assert nesterov_multiplier(5, OUTER_LR, 0.0) == pytest.approx(OUTER_LR)  # no momentum


def test_data_parallelism_with_adamw_on_replicas_is_data_parallel_s_run_with_adamw():
    # the two-level all-reduce sums the same gradient as the flat one (to rounding)
    two = train(replica_mesh(), "dp_adamw", **SMALL)
    flat = train(data_mesh(), "data_parallel", optimizer=adamw(), **SMALL)
    np.testing.assert_allclose(two.loss, flat.loss, rtol=1e-5)
    np.testing.assert_allclose(two.params, flat.params, atol=1e-5)


@pytest.mark.parametrize("h", [8, 32])
def test_diloco_sends_across_the_replicas_data_parallelism_s_bytes_over_h(h):
    mesh = replica_mesh()  # 2 replicas of 2 devices
    dp = train(mesh, "dp_adamw", steps=1, batch_size=32)
    diloco = train(mesh, "diloco", steps=1, batch_size=32, local_steps=h)
    assert dp.bytes_across_replicas > 0
    assert abs(diloco.bytes_across_replicas / (dp.bytes_across_replicas / h) - 1) < 0.05
    # across: the all-reduce of a 1/D slice over the 2 replicas, 2 · 1/2 · 4n/D bytes per device
    n, d = dp.params.size, 2
    assert dp.bytes_across_replicas == 4 * n / d
    # memory per device: w, AdamW's moments and count, then slices of w at the sync and of m
    assert (diloco.memory.parameters, diloco.memory.optimizer) == (4 * n, 8 * n + 4 + 8 * n // d)


def test_the_step_model_sends_over_a_host_s_link_what_its_devices_send_across_replicas():
    mesh = replica_mesh()  # 2 "hosts" of 2 devices
    for strategy, options in (("dp_adamw", {}), ("diloco", {"local_steps": 8}),
                              ("diloco_int8", {"local_steps": 8}),
                              ("streaming_diloco", {"local_steps": 8})):
        run = train(mesh, strategy, steps=1, batch_size=16, **options)
        modelled = strategy_traffic(strategy, run.params.size, Topology(2, 2), **options)
        assert modelled.link_bytes == pytest.approx(2 * run.bytes_across_replicas)


def test_the_outer_step_is_the_nesterov_step_of_the_replicas_mean_delta():
    mesh = replica_mesh()
    n, r = 64, mesh.shape[HOST]
    ctx = Context(HOST, r, n, rows=8, k=1)
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(n).astype(np.float32)
    outer = outer_nesterov()
    own = NamedSharding(mesh, P(HOST))  # each replica its own copy
    state = TrainState(jax.device_put(np.tile(w0, r), own), None,
                       **outer_parts(outer)(w0, mesh, ctx))
    specs = state_specs(state)
    step = jax.jit(jax.shard_map(lambda s: outer_step(outer)(s, ctx), mesh=mesh,
                                 in_specs=(specs,), out_specs=specs, check_vma=False))
    synced, m = w0, np.zeros(n, np.float32)
    for _ in range(2):  # the second step uses the momentum of the first
        replicas = synced + rng.standard_normal((r, n)).astype(np.float32)
        state = step(state._replace(params=jax.device_put(replicas.reshape(-1), own)))
        delta = (synced - replicas).mean(axis=0)  # the outer gradient, averaged
        m = 0.9 * m + delta
        synced = synced - 0.7 * (delta + 0.9 * m)  # Nesterov: the step looks ahead
        np.testing.assert_allclose(np.asarray(state.outer[0]), synced, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(state.params), np.tile(synced, r), rtol=1e-5,
                                   atol=1e-6)  # every replica restarts from the sync


def test_the_heldout_loss_is_that_of_the_parameters_at_the_last_sync():
    run = train(replica_mesh(), "diloco", local_steps=4, heldout_every=2, **SMALL)
    losses = [loss for _, loss in run.heldout_loss]  # steps 2, 4, 6, 8; syncs at 4 and 8
    _, _, (x, y) = split_task(SMALL["seed"], skewed=False, heldout=True)
    start = init_params(run.params.size, SMALL["seed"])  # the parameters before any sync
    assert losses[0] == pytest.approx(float(loss_sum(start, x, y, PART_THREE_MLP)) / len(y),
                                     rel=1e-6)
    assert losses[2] == losses[1] and losses[1] != losses[0] and losses[3] != losses[2]


@pytest.mark.parametrize("mesh, strategy, kwargs, message", [
    ("flat", "diloco", {}, r"diloco runs on a mesh with axes \('host', 'device'\), got "
                           r"\('data',\): pass replica_mesh\(\)"),
    ("replicas", "data_parallel", {}, "data_parallel runs on a one-axis mesh, not on axes"),
    ("replicas", "diloco", {"local_steps": 0}, "local_steps must be a positive integer"),
    ("replicas", "diloco", {"local_steps": 2.5}, "local_steps must be a positive integer"),
    ("replicas", "dp_adamw", {"local_steps": 4}, "local_steps applies to .* only; dp_adamw"),
    ("replicas", "diloco", {"optimizer": "adamw"}, "optimizer must be an Optimizer"),
])
def test_a_mesh_or_h_that_does_not_fit_gets_a_one_line_error(mesh, strategy, kwargs, message):
    mesh = data_mesh() if mesh == "flat" else replica_mesh()
    with pytest.raises(ValueError, match=message) as error:
        train(mesh, strategy, steps=1, **kwargs)
    assert "\n" not in str(error.value)


RUNS_ON = """
mesh = replica_mesh()
runs = [train(mesh, s, steps=4, batch_size=16, heldout_every=2, **h)
        for s, h in (("dp_adamw", {}), ("local_sgd_adamw", {"local_steps": 2}),
                     ("diloco", {"local_steps": 2}))]
print(json.dumps([dict(mesh.shape)] + [[r.heldout_loss[0][1], r.heldout_loss[-1][1],
                                        r.bytes_across_replicas] for r in runs]))
"""


@pytest.mark.parametrize("n, replicas", [(1, 1), (3, 3)])
def test_the_strategies_run_at_an_odd_device_count_a_replica_a_device(run_with_devices, n,
                                                                      replicas):
    shape, *runs = run_with_devices(n, RUNS_ON)
    assert shape == {"host": replicas, "device": 1}
    assert all(last < first for first, last, _ in runs)  # the held-out loss fell
    across = [b for _, _, b in runs]
    assert across == ([0.0] * 3 if n == 1 else [pytest.approx(across[0])] + [across[0] / 2] * 2)
