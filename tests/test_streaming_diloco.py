"""Streaming DiLoCo in ``train`` (``training.streaming_diloco``): DiLoCo with its outer gradient
sent in int8 or 4 bits, and in fragments merged τ steps after their outer step."""

import dataclasses

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils import data_mesh, replica_mesh, train
from course_utils.problems.classification import PART_FOUR_MLP
from course_utils.training import streaming_diloco
from course_utils.training.diloco import OuterStep, outer_step
from course_utils.training.hsdp import HOST
from course_utils.training.optimizers import outer_nesterov
from course_utils.training.quantize import BLOCK
from course_utils.training.state import Context, TrainState, state_specs
from course_utils.training.strategies import SPECS, spec
from course_utils.training.streaming import sent_after

SMALL = {"steps": 16, "batch_size": 32, "seed": 1, "local_steps": 8}


def _variant(monkeypatch, name: str, **sync) -> str:
    """``streaming_diloco`` with other fragments, format, overlap and mixing, as ``name``."""
    entry, outer = spec("streaming_diloco"), outer_nesterov()
    options = {k: sync.get(k, getattr(entry.sync, k))
               for k in ("fragments", "dtype", "overlap", "mixing")}
    step = outer_step(outer, **options)
    monkeypatch.setitem(SPECS, name, dataclasses.replace(
        entry, name=name,
        parts=entry.parts._replace(extra=streaming_diloco.streaming_parts(
            outer, options["fragments"], options["overlap"])),
        sync=entry.sync._replace(outer=step, merge=step.merging if options["overlap"] else None,
                                 **options)))
    return name


def test_one_fragment_no_overlap_in_float32_is_diloco_bit_for_bit(monkeypatch):
    name = _variant(monkeypatch, "streaming_f1", fragments=1, dtype="float32", overlap=0,
                    mixing=0.0)
    mesh = replica_mesh()
    streamed = train(mesh, name, heldout_every=4, **SMALL)
    diloco = train(mesh, "diloco", heldout_every=4, **SMALL)
    assert streamed.loss == diloco.loss and streamed.heldout_loss == diloco.heldout_loss
    np.testing.assert_array_equal(streamed.params, diloco.params)
    assert streamed.bytes_per_sync_across_replicas == diloco.bytes_per_sync_across_replicas


def test_a_fragment_merges_tau_steps_after_its_outer_step_exactly():
    run = train(replica_mesh(), "streaming_diloco", heldout_every=1, **SMALL)
    sync = spec("streaming_diloco").sync
    losses = [loss for _, loss in run.heldout_loss]  # of the parameters at the last sync
    changed = [s for s in range(2, SMALL["steps"] + 1) if losses[s - 1] != losses[s - 2]]
    sends = [s for s in range(1, SMALL["steps"] + 1)
             if sent_after(s, local_steps=SMALL["local_steps"], fragments=sync.fragments)
             is not None]
    assert changed == [s + sync.overlap for s in sends if s + sync.overlap <= SMALL["steps"]]
    assert [s for s, _ in run.averaged_loss] == changed  # the replicas' w changes then too
    assert run.heldout_loss[-1][1] < 0.9 * run.heldout_loss[0][1]  # and it trains


def _state(mesh, ctx, fragments, w0, replicas):
    own = NamedSharding(mesh, P(HOST))
    extra = streaming_diloco.streaming_parts(outer_nesterov(), fragments, 1)(w0, mesh, ctx)
    return TrainState(jax.device_put(replicas.reshape(-1), own), None, **extra), own


def _program(fn, ctx, state):
    specs = state_specs(state)
    return jax.jit(jax.shard_map(lambda s: fn(s, ctx), mesh=replica_mesh(), in_specs=(specs,),
                                 out_specs=specs, check_vma=False))


def test_an_outer_step_updates_its_fragment_alone_and_the_merge_mixes_it_in():
    mesh, fragments, alpha = replica_mesh(), 2, 0.5
    n, r = 4 * BLOCK, mesh.shape[HOST]
    ctx = Context(HOST, r, n, rows=8, k=1)
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal(n).astype(np.float32)
    replicas = w0 + rng.standard_normal((r, n)).astype(np.float32)
    state, own = _state(mesh, ctx, fragments, w0, replicas)
    step = outer_step(outer_nesterov(), fragments=fragments, dtype="float32", overlap=1,
                      mixing=alpha)
    outer, merge = _program(step, ctx, state), _program(step.merging, ctx, state)
    sent = outer(state)  # the first sync: fragment 1 (offset H/F), values 1, 3, 5, ...
    part = slice(1, None, fragments)
    delta = (w0[part] - replicas[:, part]).mean(axis=0)
    arrived = w0[part] - 0.7 * (delta + 0.9 * delta)  # Nesterov from a zero momentum
    np.testing.assert_array_equal(np.asarray(sent.params), np.asarray(state.params))  # τ > 0
    np.testing.assert_array_equal(np.asarray(sent.outer[0]), w0)  # not arrived yet
    np.testing.assert_allclose(np.asarray(sent.outer.pending), arrived, rtol=1e-6, atol=1e-6)
    trace = np.asarray(jax.tree.leaves(sent.outer.state)[0])
    np.testing.assert_allclose(trace[part], delta, rtol=1e-6, atol=1e-6)
    assert not trace[0::fragments].any()  # fragment 0's momentum untouched
    # τ inner steps later the replicas' fragment mixes: α · local + (1 − α) · arrived
    moved = replicas + 0.1
    merged = merge(sent._replace(params=jax.device_put(moved.reshape(-1), own)))
    expected = moved.copy()
    expected[:, part] = alpha * moved[:, part] + (1 - alpha) * arrived
    np.testing.assert_allclose(np.asarray(merged.params).reshape(r, n), expected, rtol=1e-6,
                               atol=1e-6)
    synced = w0.copy()
    synced[part] = arrived
    np.testing.assert_allclose(np.asarray(merged.outer[0]), synced, rtol=1e-6, atol=1e-6)


def test_quantized_outer_gradients_send_a_quarter_and_an_eighth_plus_the_scales():
    mesh = replica_mesh()
    runs = {s: train(mesh, s, steps=1, batch_size=32, local_steps=8)
            for s in ("diloco", "diloco_int8", "diloco_4bit", "streaming_diloco")}
    f32 = runs["diloco"].bytes_across_replicas
    for name, share in (("diloco_int8", 1 / 4), ("diloco_4bit", 1 / 8)):
        assert runs[name].bytes_across_replicas / f32 == pytest.approx(share + 1 / BLOCK,
                                                                       rel=0.05)
    # DiLoCo's memory, and the count of syncs; Streaming's also a slice of the fragment on its
    # way (the parameters' 1/(D·F))
    n, d = runs["diloco"].params.size, mesh.shape["device"]
    f = spec("streaming_diloco").sync.fragments
    base = runs["diloco"].memory.optimizer
    assert runs["diloco_int8"].memory.optimizer == base + 4
    assert runs["streaming_diloco"].memory.optimizer == base + 4 + 4 * n // (d * f)


def test_streaming_s_largest_sync_is_diloco_s_over_f_on_part_four():
    mesh, f = replica_mesh(), spec("streaming_diloco").sync.fragments
    options = {"steps": 1, "batch_size": 8, "local_steps": 32, "mlp": PART_FOUR_MLP}
    whole = train(mesh, "diloco_4bit", **options)
    streamed = train(mesh, "streaming_diloco", **options)
    assert streamed.bytes_per_sync_across_replicas == pytest.approx(
        whole.bytes_per_sync_across_replicas / f, rel=0.05)
    # the same bytes per inner step: F syncs of 1/F every H steps
    assert streamed.bytes_across_replicas == pytest.approx(whole.bytes_across_replicas,
                                                           rel=0.05)


@pytest.mark.parametrize("change, kwargs, message", [
    ({}, {"local_steps": 6}, "fragments=4 does not divide local_steps=6"),
    ({}, {"local_steps": 4}, "overlap=1 is not less than H/F = 1 steps"),
    ({"stream": "stream"}, {}, "sends on a stream device; train overlaps in one process"),
    ({"dtype": "int2"}, {}, "a sync sends one of float32, int8, int4, got 'int2'"),
])
def test_a_streaming_sync_train_cannot_run_gets_one_line(monkeypatch, change, kwargs, message):
    entry = spec("streaming_diloco")
    monkeypatch.setitem(SPECS, "odd", dataclasses.replace(entry, name="odd",
                                                          sync=entry.sync._replace(**change)))
    with pytest.raises(ValueError, match=message) as refused:
        train(replica_mesh(), "odd", steps=1, **{"local_steps": 8, **kwargs})
    assert "\n" not in str(refused.value)


def test_fewer_bits_on_a_one_axis_mesh_are_refused(monkeypatch):
    entry = spec("local_sgd")
    monkeypatch.setitem(SPECS, "odd", dataclasses.replace(
        entry, name="odd", sync=entry.sync._replace(dtype="int8")))
    with pytest.raises(ValueError, match="odd syncs in fragments, in fewer bits or overlapped; "
                                         "train runs these in an outer step across the replicas"):
        train(data_mesh(), "odd", steps=1)


def test_each_part_five_sync_runs_the_outer_step_and_merge_it_describes():
    found = [s.sync for s in SPECS.values() if isinstance(s.sync.outer, OuterStep)]
    assert len(found) == 7  # local SGD (AdamW), DiLoCo and its ablations, its three variants
    for sync in found:
        step = sync.outer
        assert (step.fragments, step.dtype, step.overlap, step.mixing) == (
            sync.fragments, sync.dtype, sync.overlap, sync.mixing)
        assert sync.merge == (step.merging if sync.overlap else None)
