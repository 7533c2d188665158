"""Streaming DiLoCo's pieces: quantized outer gradients (``training.quantize``), the fragments'
schedule and mixing (``training.streaming``), and bad input refused in one line."""

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.observe.ir import hlo_collectives, ring_payload
from course_utils.training.quantize import (
    BITS,
    BLOCK,
    LEVELS,
    dequantize,
    error_bound,
    exchange_bytes,
    quantize,
    quantized_all_reduce,
)
from course_utils.training.streaming import (
    check_streaming,
    fragment_indices,
    merged_after,
    mix,
    put_fragment,
    schedule,
    sent_after,
    take_fragment,
)

HOSTS, DEVICES = 2, 2


def _values(m: int, seed: int = 0) -> np.ndarray:
    """Blocks of very different sizes, one block of zeros."""
    rng = np.random.default_rng(seed)
    scale = np.repeat(10.0 ** rng.uniform(-4, 2, m // BLOCK), BLOCK)
    values = (rng.normal(size=m) * scale).astype(np.float32)
    values[:BLOCK] = 0.0
    return values


@pytest.mark.parametrize("dtype", list(LEVELS))
def test_a_round_trip_stays_within_half_a_step_of_its_block(dtype):
    values = _values(64 * BLOCK)
    q = quantize(jnp.asarray(values), dtype)
    back = np.asarray(dequantize(q, dtype))
    error = np.abs(back - values)
    slack = 1e-6 * np.abs(values).reshape(-1, BLOCK).max(axis=1).repeat(BLOCK)  # f32 rounding
    assert np.all(error <= error_bound(values, dtype) + slack)
    assert np.all(back[:BLOCK] == 0)  # a block of zeros comes back zeros
    biggest = np.abs(values).reshape(-1, BLOCK).argmax(axis=1) + np.arange(0, values.size, BLOCK)
    np.testing.assert_allclose(back[biggest], values[biggest], rtol=1e-6)  # ±L exactly
    # the bound is reached: the error is not zero everywhere (the codes are coarse)
    assert error.max() > 0.1 * error_bound(values, dtype).max()


@pytest.mark.parametrize("dtype", list(LEVELS))
def test_codes_take_q_bits_a_value_and_int4_packs_two_a_byte_low_nibble_first(dtype):
    q = quantize(jnp.asarray(_values(4 * BLOCK)), dtype)
    assert q.codes.dtype.itemsize * q.codes.size * 8 == BITS[dtype] * 4 * BLOCK
    assert q.scales.shape == (4, 1) and q.scales.dtype == jnp.float32
    if dtype == "int4":
        # codes 1, −2, 3, −7 … at scale 1: nibbles 9, 6, 11, 1
        values = jnp.tile(jnp.array([1.0, -2.0, 3.0, -7.0]), BLOCK // 4)
        packed = np.asarray(quantize(values, "int4").codes)[0]
        assert packed[:2].tolist() == [9 | 6 << 4, 11 | 1 << 4]
        assert packed.dtype == np.uint8


def test_quantize_takes_only_its_formats():
    with pytest.raises(ValueError, match="quantized formats are int8, int4, got 'int2'"):
        quantize(jnp.zeros(BLOCK), "int2")
    with pytest.raises(ValueError, match="a sync sends one of float32, int8, int4"):
        exchange_bytes(BLOCK, 2, "bf16")


def _two_level():
    return Mesh(np.asarray(jax.devices()).reshape(HOSTS, DEVICES), ("host", "device"))


def _exchange(mesh, dtype: str, m: int):
    """Each device's own f32[m] summed over the hosts by ``quantized_all_reduce``."""
    rows = P(("host", "device"))

    def body(x):  # x: f32[1, m], this device's row
        return quantized_all_reduce(x[0], "host", HOSTS, dtype=dtype)[None]

    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=rows, out_specs=rows))


@pytest.mark.parametrize("dtype", list(LEVELS))
def test_the_quantized_exchange_sums_over_the_hosts_within_its_two_roundings(dtype):
    mesh, m = _two_level(), 12 * BLOCK + 40  # not a whole number of blocks: padded
    x = np.stack([_values(13 * BLOCK, seed)[:m] for seed in range(HOSTS * DEVICES)])
    placed = jax.device_put(x, NamedSharding(mesh, P(("host", "device"))))
    got = np.asarray(_exchange(mesh, dtype, m)(placed)).reshape(HOSTS, DEVICES, m)
    exact = x.reshape(HOSTS, DEVICES, m).sum(axis=0)
    assert np.array_equal(got[0], got[1])  # every host holds the same sum
    pad = (-m) % (HOSTS * BLOCK)
    for d in range(DEVICES):
        def bound(v):
            return error_bound(np.pad(v, (0, pad)), dtype)[:m]
        first = sum(bound(x.reshape(HOSTS, DEVICES, m)[h, d]) for h in range(HOSTS))
        second = bound(exact[d]) + np.pad(first, (0, pad)).reshape(-1, BLOCK).max(
            axis=1).repeat(BLOCK)[:m] / (2 * LEVELS[dtype])
        slack = 1e-5 * np.abs(exact[d]).max()
        assert np.all(np.abs(got[0, d] - exact[d]) <= first + second + slack)


@pytest.mark.parametrize("dtype, share", [("int8", 1 / 4), ("int4", 1 / 8)])
def test_the_compiled_exchange_sends_q_32_of_f32_plus_the_scales(dtype, share):
    mesh, m = _two_level(), 4096
    x = jax.device_put(np.ones((HOSTS * DEVICES, m), np.float32),
                       NamedSharding(mesh, P(("host", "device"))))

    def sent(kind):
        ops = hlo_collectives(_exchange(mesh, kind, m).lower(x).compile().as_text())
        assert all(len(op.replica_groups[0]) == HOSTS for op in ops)  # across hosts only
        return ring_payload(ops, HOSTS)

    f32, quantized = sent("float32"), sent(dtype)
    assert f32 == pytest.approx(exchange_bytes(m, HOSTS, "float32"), rel=0.05)
    assert quantized == pytest.approx(exchange_bytes(m, HOSTS, dtype), rel=0.05)
    assert quantized / f32 == pytest.approx(share + 1 / BLOCK, rel=0.05)  # 1/B: the scales


def test_fragment_f_is_sent_every_h_steps_at_offset_f_h_over_f_and_merges_tau_later():
    h, f, tau = 8, 4, 1
    for fragment in range(f):
        sends = [s for s in range(1, 41) if sent_after(s, local_steps=h, fragments=f) == fragment]
        assert sends[0] % h == fragment * h // f and np.all(np.diff(sends) == h)
        merges = [s for s in range(1, 42)
                  if merged_after(s, local_steps=h, fragments=f, overlap=tau) == fragment]
        assert merges == [s + tau for s in sends if s + tau <= 41]
    events = schedule(40, local_steps=h, fragments=f, overlap=tau)
    in_flight = 0  # at most one fragment on its way
    for event in events:
        in_flight += 1 if event.kind == "send" else -1
        assert in_flight in (0, 1)
    one = schedule(24, local_steps=8, fragments=1, overlap=0)  # DiLoCo: all, every H
    assert [(e.step, e.fragment) for e in one if e.kind == "send"] == [(8, 0), (16, 0), (24, 0)]


def test_a_fragment_is_strided_and_put_back_in_place_under_jit():
    n, f = 48, 4
    w = jnp.arange(n, dtype=jnp.float32)
    take = jax.jit(take_fragment, static_argnums=2)
    put = jax.jit(put_fragment, static_argnums=2)
    for fragment in range(f):
        index = jnp.int32(fragment)  # traced: one program for every fragment
        assert np.asarray(take(w, index, f)).tolist() == fragment_indices(n, fragment, f).tolist()
        back = np.asarray(put(w, index, f, -take(w, index, f)))
        expected = np.arange(n, dtype=np.float32)
        expected[fragment::f] *= -1
        assert back.tolist() == expected.tolist()
    assert float(mix(2.0, 4.0, alpha=0.25)) == pytest.approx(3.5)


@pytest.mark.parametrize("options, message", [
    ({"local_steps": 0}, "local_steps must be a positive integer, got 0"),
    ({"fragments": 3}, "fragments=3 does not divide local_steps=8"),
    ({"fragments": 4, "n": 1030}, "fragments=4 does not divide the 1030 padded parameters .*"
     "choose one of 1, 2$"),
    ({"fragments": 2, "n": 1026, "devices": 2},
     r"does not divide the 1026 padded parameters into equal fragments \(2 slices each\); "
     "choose one of 1$"),
    ({"overlap": 2}, "overlap=2 is not less than H/F = 2 steps"),
    ({"overlap": -1}, "overlap must be an integer >= 0, got -1"),
])
def test_a_schedule_it_cannot_run_gets_one_line(options, message):
    given = {"local_steps": 8, "fragments": 4, "overlap": 1, "n": 1024, **options}
    with pytest.raises(ValueError, match=message) as refused:
        check_streaming(**given)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("rate, message", [
    ("0mbit", "--link-rate must be above 0, got '0mbit'; give one like 10mbit or 1gbit"),
    ("200mbit,0.0gbit", "--link-rate must be above 0, got '0.0gbit'; give one like 10mbit or "
     "1gbit"),
    ("-5mbit", "--link-rate must look like 200mbit or 1gbit, got '-5mbit'"),
])
def test_cluster_refuses_a_rate_of_zero_in_one_line_before_anything(monkeypatch, capsys, rate,
                                                                    message):
    from course_utils.tools.cli import main
    from course_utils.tools.cluster import netns

    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # no root: nothing could be built anyway
    monkeypatch.setattr(netns.Cluster, "__enter__", lambda self: pytest.fail("built hosts"))
    assert main(["cluster", f"--link-rate={rate}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"course cluster: error: {message}"
