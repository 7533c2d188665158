"""The instructor page's common wrong answers (each exercise's ``mistakes`` in the outline): each
one written out and run through its check, which must fail with the message the page quotes."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from notebook_cell import answer, run_cell

import course_utils as cu
from course_utils import (
    all_gather_shards,
    all_reduce_gradient,
    data_mesh,
    node_local_mesh,
    placements,
    reduce_scatter_gradient,
    ring_permutation,
    toy_regression,
)
from course_utils.checks import (
    check_bandwidth_fraction_size,
    check_break_even,
    check_bucket_model,
    check_clipped_step,
    check_int8_feedback,
    check_joint_permutation,
    check_largest_gradient,
    check_local_sgd_h,
    check_micro_batches,
    check_overlap_rate,
    check_peak_prediction,
    check_pmean_weights,
    check_rd_crossover,
    check_reduce_scatter,
    check_reduce_scatter_times,
    check_ring_step,
    check_slowest_hidden_rate,
    check_smallest_h,
    check_transfer_time,
    check_two_level_scatter,
)
from course_utils.checks.helpers import ExerciseFailed
from course_utils.constants import LR
from course_utils.models.latency import collective_time, plan_buckets
from course_utils.tools.notebooks.outline import OUTLINE

# the student trial's tries (reviews/student-trial-2026-12-05.md), written as the trial wrote
# them: in a notebook cell, reading the page's globals where the trial did (tests/notebook_cell.py)
TRIAL = {
    "02 share of the rows": "def pmean_weights(counts):\n    return counts / counts.sum()\n",
    "02 ones": "def pmean_weights(counts):\n    return np.ones(len(counts))\n",
    "02 inverted": "def pmean_weights(counts):\n    return counts.mean() / counts\n",
    "02 counts": "def pmean_weights(counts):\n    return counts.astype(float)\n",
    "02 one factor": "def pmean_weights(counts):\n    return len(counts) / counts.sum()\n",
    "02 p - 1": "def pmean_weights(counts):\n"
                "    return (len(counts) - 1) * counts / counts.sum()\n",
    "02 floor": "def pmean_weights(counts):\n    return len(counts) * counts // counts.sum()\n",
    "02 check's answer": "pmean_weights = checks.gradients._exact_factors\n",
    "03 kernel": (
        "def my_kernel(x_block, y_block, w):\n"
        "    p = jax.lax.axis_size('data')\n"
        "    share = cu.local_contribution(x_block, y_block, w, x_block.shape[0] * p)\n"
        "    f = share.shape[0]\n"
        "{body}"
        "specs = (P('data', None), P('data'), P())\n"
        "my_reduce_scatter = jax.jit(jax.shard_map(my_kernel, mesh=mesh, in_specs=specs, "
        "out_specs=P('data')))\n"),
    "12 step time": (
        "def my_step_time(sizes, bucket_bytes, ranks, alpha_s, bandwidth_bytes_per_s, "
        "backward_s):\n"
        "    total = sum(sizes)\n"
        "    done = 0.0\n"
        "    for bucket in plan_buckets(sizes, bucket_bytes):\n"
        "        ready = backward_s * sum(sizes[: bucket[-1] + 1]) / total\n"
        "        start = max(ready, done)\n"
        "        n = {n}\n"
        "        done = start + collective_time(n, {ranks}, alpha_s=alpha_s, "
        "bandwidth_bytes_per_s=bandwidth_bytes_per_s, algorithm='ring')\n"
        "    return done\n"),
    "13 swapped": (
        "def my_two_level_scatter(x):\n"
        "    {sizes}\n"
        "    xr = x.reshape({order}, -1).transpose(1, 0, 2).reshape(-1)\n"
        "    return jax.lax.psum_scatter(jax.lax.psum_scatter(xr, 'local', tiled=True), 'node', "
        "tiled=True)\n"),
    "13 jitted": (
        "def _k(x):\n"
        "    nodes, local = jax.lax.axis_size('node'), jax.lax.axis_size('local')\n"
        "    xr = x.reshape(nodes, local, -1).transpose(1, 0, 2).reshape(-1)\n"
        "    return jax.lax.psum_scatter(jax.lax.psum_scatter(xr, 'local', tiled=True), 'node', "
        "tiled=True)\n"
        "my_two_level_scatter = jax.jit(jax.shard_map(lambda b: _k(b[0])[None], mesh=mesh, "
        "in_specs=rows, out_specs=rows))\n"),
    "16 loop": (
        "def my_local_sgd_h(nbytes, p, steps, budget):\n"
        "    ring = 2 * (p - 1) / p * nbytes\n"
        "    for h in range(1, steps + 2):\n"
        "        if ({rounds}) * ring <= budget:\n"
        "            return h\n"
        "    return steps + 1\n"),
    "13 one node": (
        "def my_two_level_scatter(x):\n"
        "    n, l = jax.lax.axis_size('node'), jax.lax.axis_size('local')\n"
        "    x = x.reshape(n, l, -1).transpose(1, 0, 2).reshape(-1)\n"
        "    mine = jax.lax.psum_scatter(x, 'local', tiled=True)\n"
        "    c = mine.shape[0] // n\n"
        "    return jax.lax.dynamic_slice_in_dim(mine, jax.lax.axis_index('node') * c, c)\n"),
    "16 check's answer": (
        "def my_local_sgd_h(nbytes, p, steps, budget):\n"
        "    return checks.local_sgd._right(nbytes, p, steps, budget)\n"),
    "16 largest": (
        "def my_local_sgd_h(nbytes, p, steps, budget):\n"
        "    ring = 2 * (p - 1) / p * nbytes\n"
        "    h = 1\n"
        "    while (steps // h) * ring > budget:\n"
        "        h += 1\n"
        "    return max(h - 1, 1)\n"),
    "16 found": (
        "def my_local_sgd_h(nbytes, p, steps, budget):\n"
        "    ring = 2 * (p - 1) / p * nbytes\n"
        "    h = 1\n"
        "    while (steps // h) * ring > budget:\n"
        "        h += 1\n"
        "    return {ret}\n"),
    "21 sync_link_bytes": (
        "def my_smallest_h(n_params, replicas, devices_per_replica, rate_bits_per_s, "
        "step_seconds, fraction):\n"
        "    sync = cu.diloco_cluster.sync_link_bytes(cu.diloco_cluster.MethodRow('diloco'), "
        "n_params, replicas)\n"
        "    return max(1, math.ceil(8 * sync / rate_bits_per_s / (fraction * step_seconds)))\n"),
}


def _trial(key: str, name: str, page: dict | None = None, **fill):
    """The trial's try ``key`` (its blanks filled with ``fill``), defined in a notebook with the
    globals ``page``; the function ``name`` it defines."""
    *before, source = TRIAL[key] if isinstance(TRIAL[key], tuple) else (TRIAL[key],)
    notebook = dict(page or {})
    for cell in before:  # the page's own cells above the exercise
        run_cell(cell, notebook)
    return run_cell(source.format(**fill) if fill else source, notebook)[name]


def _page_02():
    """Step 02's uneven deal: its mesh, the rows per device and the data."""
    counts = np.array([5, 3, 4, 4])
    return data_mesh(), counts, *toy_regression(16, 8)


def _check_03(body: str):
    """Step 03's check of the trial's kernel, ``body`` its last lines (after ``share`` and
    ``f``), written in the notebook."""
    mesh = data_mesh()
    fn = _trial("03 kernel", "my_reduce_scatter", dict(mesh=mesh, cu=cu), body=body)
    check_reduce_scatter(fn, mesh, 4)


def _page_13(**names):
    mesh = node_local_mesh(2)
    return dict(mesh=mesh, NODES=2, LOCAL=mesh.shape["local"], rows=jax.P(("node", "local"), None),
                **names)


def _swapped_on_the_page(sizes: str):
    fn = _trial("13 swapped", "my_two_level_scatter", _page_13(), sizes=sizes,
                order="local, nodes")
    check_two_level_scatter(fn, node_local_mesh(2))


def _permuted_columns():
    """Exercise 07 with the columns of x reordered by the right row order's reversal."""
    mesh = data_mesh()
    rows, replicated, sliced = placements(mesh)
    x, y, w = toy_regression(16, 8)
    w2 = w + np.float32(0.17)
    order = np.roll(np.arange(16), 16 // mesh.size)
    x2 = np.ascontiguousarray(x[:, ::-1])
    g_all = all_reduce_gradient(mesh)(x2, y[order], w2)
    g_gathered = all_gather_shards(mesh)(reduce_scatter_gradient(mesh)(x2, y[order], w2))
    check_joint_permutation(g_all, g_gathered, x, y, w2, mesh.size, x2=jax.device_put(x2, rows),
                            y2=jax.device_put(y[order], sliced),
                            w2=jax.device_put(w2, replicated),
                            reorder=lambda n, p: np.roll(np.arange(n), n // p))


def _permuted(reorder, *, labels_only=False):
    """Exercise 07 answered with ``reorder``; ``labels_only``: the rows of x left in place."""
    mesh = data_mesh()
    rows, replicated, sliced = placements(mesh)
    x, y, w = toy_regression(16, 8)
    w2 = w + np.float32(0.17)
    order = np.asarray(reorder(16, mesh.size))
    x2, y2 = (x if labels_only else x[order]), y[order]
    g_all = all_reduce_gradient(mesh)(x2, y2, w2)
    g_gathered = all_gather_shards(mesh)(reduce_scatter_gradient(mesh)(x2, y2, w2))
    check_joint_permutation(g_all, g_gathered, x, y, w2, mesh.size, x2=jax.device_put(x2, rows),
                            y2=jax.device_put(y2, sliced), w2=jax.device_put(w2, replicated),
                            reorder=reorder)


def _swapped_reorder(x):  # a def, not a lambda: the check sends its source to 6 devices
    nodes, local = jax.lax.axis_size("node"), jax.lax.axis_size("local")
    x = x.reshape(local, nodes, -1).transpose(1, 0, 2).reshape(-1)
    return jax.lax.psum_scatter(jax.lax.psum_scatter(x, "local", tiled=True), "node", tiled=True)


def _host_mesh():
    from jax.sharding import Mesh

    return Mesh(np.asarray(jax.devices()).reshape(2, 2), ("host", "device"))


def _bucket(ready_by_count=False, wait=True):
    def model(sizes, bucket_bytes, ranks, alpha_s, bandwidth_bytes_per_s, backward_s):
        total, produced, finished = sum(sizes), 0, 0.0
        for b in plan_buckets(sizes, bucket_bytes):
            nbytes = sum(sizes[i] for i in b)
            produced += len(b) if ready_by_count else nbytes
            ready = backward_s * produced / (len(sizes) if ready_by_count else total)
            start = max(ready, finished) if wait else ready
            finished = start + collective_time(
                nbytes,
                ranks,
                alpha_s=alpha_s,
                bandwidth_bytes_per_s=bandwidth_bytes_per_s,
                algorithm="ring",
            )
        return max(finished, backward_s)

    return model


PAGE_LAYERS = [8192, 256, 2048, 256]  # step 14's layers as laid out, p = 4


def _peak(layer=max, values=False, state=True, zero2_slice=False, zero1_sum=True,
          one_layer=True, gathered_w=False, less_one=False):
    """Exercise 14 answered with one thing changed: ZeRO-3's layer (``max``, the mean, the
    last), all layers gathered at once, its state left out, ZeRO-2's whole local gradient as a
    slice, ZeRO-1's slice of the sum left out, values for bytes, ZeRO-1's all-gathered w
    counted beside the old w, slices of n/(p − 1)."""

    def predicted_peak(layer_sizes, p):
        b, n = (1 if values else 4), sum(layer_sizes)
        held = layer(layer_sizes) if one_layer else n
        p = p - 1 if less_one else p
        return {
            "data_parallel": 3 * b * n,
            "zero1": 2 * b * n + b * n / p * (2 if zero1_sum else 1) + (b * n if gathered_w
                                                                        else 0),
            "zero2": b * n + 2 * b * n / p + (b * n / p if zero2_slice else b * n),
            "zero3": (3 * b * n / p if state else 0) + b * held,
        }

    return predicted_peak


def _feedback(forget=False, g_alone=False, bucket=64, rounding=jnp.round, scaled=True,
              levels=127, guard=True):
    """Exercise 15 answered with one thing changed (``bucket=0``: one scale for the vector)."""

    def fb(g, residual):
        acc = g + residual
        source = g if g_alone else acc
        buckets = source.reshape(-1, bucket or source.shape[0])
        scale = jnp.max(jnp.abs(buckets), axis=1, keepdims=True) / levels
        codes = rounding(buckets / (jnp.where(scale > 0, scale, 1.0) if guard else scale))
        sent = (codes * scale if scaled else codes).reshape(-1).astype(jnp.float32)
        return sent, (g - sent if forget else acc - sent)

    return fb


def _link(flat=1.0, two=1.0):
    def times(h, d, n, bits):
        p = h * d
        return (
            flat * (p - 1) / p * n / (bits / 8) * 1e3,
            two * (h - 1) / h * n / (bits / 8) * 1e3,
        )

    return times


def _ring_step(add=True, forwards=False, p_from=lambda chunks: chunks.shape[0]):
    """A step of exercise 11's ring (device i sends to i - 1); ``forwards``: the page's ring;
    ``p_from``: where the step reads p."""

    def step(partial, chunks, s, axis_name):
        p, i = p_from(chunks), jax.lax.axis_index(axis_name)
        pairs = ring_permutation(p) if forwards else [(j, (j - 1) % p) for j in range(p)]
        received = jax.lax.ppermute(partial, axis_name, pairs)
        mine = chunks[(i - s - 2) % p] if forwards else chunks[(i + s + 2) % p]
        return received + mine if add else received

    return step


STEP8 = dict(alpha_s=5e-6, bytes_per_s=12.5e9)


def _crossover(rd_steps=math.log2, rd_share=1.0, ring_steps=lambda p: 2 * (p - 1),
               ring_share=lambda p: 2 * (p - 1) / p, scale=1.0):
    """Exercise 08 answered with one thing changed: recursive doubling's steps or the share of
    N each sends, the ring's α steps or its share of N, or the answer scaled (a unit slip)."""

    def crossover(p, alpha_s, bytes_per_s):
        extra_bytes = rd_steps(p) * rd_share - ring_share(p)
        extra_alpha = ring_steps(p) - rd_steps(p)
        if extra_bytes <= 1e-12:
            return math.inf
        return max(0.0, scale * alpha_s * bytes_per_s * extra_alpha / extra_bytes)

    return crossover


STEP19 = dict(compute_ms=667.0, bucket_bytes=2**20, buckets=16, hosts=2, alpha_s=2.25e-4)


def _hidden(share=lambda h: 2 * (h - 1) / h, steps=lambda h: 2 * (h - 1), to_s=1e-3,
            alpha_unit=1.0, gaps=lambda n: n, per_byte=1.0):
    """Exercise 19 answered with one slip: the ring's share and α's steps per host count, the
    unit of compute_ms and of α, the gaps the compute is cut into, the rate's unit."""
    def slowest_hidden_rate(compute_ms, bucket_bytes, buckets, hosts, alpha_s):
        left_s = (compute_ms * to_s / gaps(buckets)
                  - steps(hosts) * alpha_s * alpha_unit)
        if left_s <= 0:
            return math.inf
        return per_byte * share(hosts) * bucket_bytes / left_s
    return slowest_hidden_rate


STEP17 = dict(hosts=2, devices=4, nbytes=16 * 2**20, rate_bits=1e9)


def _micro(per_byte=1.0, rounding=math.ceil, rows_only=False):
    def k(weights, hosts, devices, rate_bits, alpha_s, flops_per_s, rows):
        p = hosts * devices
        link_s = 2 * (p - 1) / p * 4 * weights / (rate_bits / 8) * per_byte
        balanced = (2 * (p - 1) * alpha_s + link_s) / (6 * weights / flops_per_s)
        return math.ceil(balanced) if rows_only else max(1, rounding(balanced / rows))

    return k


def _break_even(bits=8, per_step=False):
    def rate(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s):
        if per_step:
            dp_steps = scheme_steps = 1
        saved = dp_steps * dp_bytes - scheme_steps * scheme_bytes
        extra = scheme_steps * (compute_s + own_s) - dp_steps * compute_s
        return bits * saved / extra

    return rate


STEP20 = dict(dp_steps=140, dp_bytes=6.7e6, scheme_steps=100, scheme_bytes=2.7e5,
              compute_s=0.03, own_s=0.05)
def _smallest_h(bits=8, ring=lambda r, d: r, rounding=math.ceil, r_for_r_minus_1=False,
                slice_only=False):
    def h(n, r, d, rate, step, frac):
        ranks = ring(r, d)
        factor = 2 if r_for_r_minus_1 else 2 * (ranks - 1) / ranks
        values = n / d if slice_only else n
        return max(1, rounding(factor * 4 * values * bits / rate / (frac * step)))

    return h


STEP21 = dict(n_params=1_118_464, replicas=2, devices_per_replica=2, rate_bits_per_s=5e7,
              step_seconds=0.0295, fraction=0.1)
STEP18 = dict(weights=1_114_112, hosts=2, devices=2, rate_bits=2e8, alpha_s=1.4e-4,
              flops_per_s=7.3e10, rows=512)
STEP22 = dict(n_params=1_118_464, fragments=4, bits=4, hosts=2, tau=2, step_s=0.03)


def _hiding(per_byte=8, whole=False, scales=True, steps=None, ring=True):
    def rate(n_params, fragments, bits, hosts, tau, step_s):
        values = n_params / (1 if whole else fragments)
        sent = values * bits / 8 + (values / 64 * 4 if scales else 0)
        share = 2 * (hosts - 1) / hosts if ring else 1
        return per_byte * share * sent / ((steps or tau) * step_s)

    return rate


STEP23 = dict(size_bytes=2**20, rate_bits=1.9e8, rtt_s=0.1005)


def _transfer(handshake=True, per_byte=8, initial=10 * 1448, grow=lambda w: 2 * w, slow=True):
    """Exercise 23 answered with one thing changed: the handshake, the rate's unit, the initial
    window, how the window grows, or slow start left out."""

    def transfer(size_bytes, rate_bits, rtt_s):
        rate = rate_bits / per_byte
        seconds, window, left = (rtt_s if handshake else 0.0), initial, size_bytes
        while slow and left > window and window < rate * rtt_s:
            seconds, left, window = seconds + rtt_s, left - window, grow(window)
        return seconds + left / rate + rtt_s

    return transfer


MEMORY = dict(memory_bytes=2**20)


def _largest(held=lambda n, p: n + n / p, whole=4, unit=1, p_of=lambda p: p, gathered=None,
             whole_sum=lambda n, p: 2 * n):
    """Exercise 05 answered with one thing changed: what the calls hold for an n-byte gradient
    (``whole_sum`` the all-reduce, ``held`` the reduce-scatter, ``gathered`` the all-gather if it
    differs), the rounding step in bytes per device (``whole``), the unit, or the p."""

    def largest(memory_bytes, p):
        q = p_of(p)
        step = whole * q if whole else 1

        def fit(per_n):  # the largest N, a multiple of step, with per_n(N) ≤ memory_bytes
            return memory_bytes / per_n(1.0, q) // step * step / unit

        return {"all_reduce": fit(whole_sum), "reduce_scatter": fit(held),
                "all_gather": fit(gathered or held)}

    return largest


def _clipped(norm="slices", clip_momentum=False, all_reduce=False):
    """Exercise 06 answered with the whole gradient's norm computed otherwise (``norm``), the
    momentum clipped instead, or the gradient all-reduced to take its norm."""
    mesh, clip, axis = data_mesh(), 0.1, "data"

    def kernel(x_block, y_block, w, v_slice):
        n_rows = x_block.shape[0] * jax.lax.axis_size(axis)
        partial = 2 * x_block.T @ (x_block @ w - y_block) / n_rows
        if norm == "partials first":  # each device clips its own partial, then reduce-scatters
            partial = partial * jnp.minimum(1.0, clip / jnp.linalg.norm(partial))
        k = w.shape[0] // jax.lax.axis_size(axis)
        if all_reduce:
            g = jax.lax.psum(partial, axis)
            g_slice = jax.lax.dynamic_slice_in_dim(g, jax.lax.axis_index(axis) * k, k)
        else:
            g_slice = jax.lax.psum_scatter(partial, axis, tiled=True)
        length = {
            "slices": lambda: jnp.sqrt(jax.lax.psum(jnp.sum(g_slice**2), axis)),
            "own": lambda: jnp.linalg.norm(g_slice),
            "partial": lambda: jnp.linalg.norm(partial),
            "sum of norms": lambda: jax.lax.psum(jnp.linalg.norm(g_slice), axis),
            "no root": lambda: jax.lax.psum(jnp.sum(g_slice**2), axis),
            "whole": lambda: jnp.linalg.norm(g),
            "pmean": lambda: jnp.sqrt(jax.lax.pmean(jnp.sum(g_slice**2), axis)),
            "max abs": lambda: jax.lax.pmax(jnp.max(jnp.abs(g_slice)), axis),
            "partials first": lambda: jnp.zeros(()),  # clipped above: min(1, C/0) is 1
            "slice vector": lambda: jnp.sqrt(jnp.sum(jax.lax.psum(g_slice**2, axis))),
        }[norm]()
        scale = jnp.minimum(1.0, clip / length)
        w_slice = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index(axis) * k, k)
        v_next = 0.9 * v_slice + (g_slice if clip_momentum else g_slice * scale)
        if clip_momentum:
            v_next = v_next * jnp.minimum(
                1.0, clip / jnp.sqrt(jax.lax.psum(jnp.sum(v_next**2), axis)))
        w_next = jax.lax.all_gather(w_slice - LR * v_next, axis, tiled=True, to="invarying")
        return w_next, v_next

    step = jax.jit(jax.shard_map(
        kernel, mesh=mesh, in_specs=(jax.P(axis, None), jax.P(axis), jax.P(), jax.P(axis)),
        out_specs=(jax.P(), jax.P(axis))))
    check_clipped_step(step, mesh, lr=LR, beta=0.9, clip=clip)


CASES = {
    (2, "cᵢ/Σc, forgetting that `pmean` divides by p"): lambda: check_pmean_weights(
        _trial("02 share of the rows", "pmean_weights"), *_page_02()
    ),
    (2, "every factor 1, the page's local mean + `pmean`"): lambda: check_pmean_weights(
        _trial("02 ones", "pmean_weights"), *_page_02()
    ),
    (2, "Σc/(p·cᵢ), the factor inverted"): lambda: check_pmean_weights(
        _trial("02 inverted", "pmean_weights"), *_page_02()
    ),
    (2, "cᵢ itself, not normalised"): lambda: check_pmean_weights(
        _trial("02 counts", "pmean_weights"), *_page_02()
    ),
    (2, "one factor for all devices"): lambda: check_pmean_weights(
        _trial("02 one factor", "pmean_weights"), *_page_02()
    ),
    (2, "(p − 1)·cᵢ/Σc, p − 1 for p"): lambda: check_pmean_weights(
        _trial("02 p - 1", "pmean_weights"), *_page_02()
    ),
    (2, "p·cᵢ // Σc, integer division"): lambda: check_pmean_weights(
        _trial("02 floor", "pmean_weights"), *_page_02()
    ),
    (2, "the check's own answer called"): lambda: check_pmean_weights(
        _trial("02 check's answer", "pmean_weights", dict(checks=cu.checks)), *_page_02()
    ),
    (3, "the zeros put in front"): lambda: _check_03(
        "    return jax.lax.psum_scatter(jnp.pad(share, (-f % p, 0)), 'data', tiled=True)\n"),
    (3, "padded by p − F mod p, which adds p values when p divides F"): lambda: _check_03(
        "    return jax.lax.psum_scatter(jnp.pad(share, (0, p - f % p)), 'data', tiled=True)\n"),
    (3, "an all-reduce, then each device's slice"): lambda: _check_03(
        "    whole = jax.lax.psum(jnp.pad(share, (0, -f % p)), 'data')\n"
        "    k = whole.shape[0] // p\n"
        "    return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index('data') * k, k)\n"),
    (3, "an all-gather of the shares, added on every device"): lambda: _check_03(
        "    whole = jax.lax.all_gather(jnp.pad(share, (0, -f % p)), 'data').sum(axis=0)\n"
        "    k = whole.shape[0] // p\n"
        "    return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index('data') * k, k)\n"),
    (3, "no padding"): lambda: _check_03(
        "    return jax.lax.psum_scatter(share, 'data', tiled=True)\n"),
    (3, "the package's `reduce_scatter_gradient` called"): lambda: check_reduce_scatter(
        reduce_scatter_gradient(data_mesh()), data_mesh(), 4
    ),
    (5, "the input forgotten (twice too large for the all-reduce)"): lambda: (
        check_largest_gradient(_largest(whole_sum=lambda n, p: n, held=lambda n, p: n / p,
                                        gathered=lambda n, p: n), jax.devices(), **MEMORY)
    ),
    (5, "p and p + 1 swapped"): lambda: check_largest_gradient(
        _largest(held=lambda n, p: n * p / (p + 1)), jax.devices(), **MEMORY
    ),
    (5, "the reduce-scatter's output slice forgotten (N ≤ memory)"): lambda: (
        check_largest_gradient(_largest(held=lambda n, p: n), jax.devices(), **MEMORY)
    ),
    (5, "the all-gather started from a whole gradient, as the all-reduce"): lambda: (
        check_largest_gradient(_largest(gathered=lambda n, p: 2 * n), jax.devices(), **MEMORY)
    ),
    (5, "not rounded to whole float32 values per device"): lambda: check_largest_gradient(
        _largest(whole=0), jax.devices(), **MEMORY
    ),
    (5, "values instead of bytes"): lambda: check_largest_gradient(
        _largest(unit=4), jax.devices(), **MEMORY
    ),
    (5, "the notebook's N_DEVICES instead of the argument p"): lambda: check_largest_gradient(
        _largest(p_of=lambda p: jax.device_count()), jax.devices(), **MEMORY
    ),
    (5, "the package's communication_budget called"): lambda: check_largest_gradient(
        lambda m, p: cu.communication_budget(m, [p])[0], jax.devices(), **MEMORY
    ),
    (6, "each device clipping by its own slice's norm"): lambda: _clipped("own"),
    (6, "the norm of the unreduced partial gradient"): lambda: _clipped("partial"),
    (6, "a sum of slice norms instead of squares"): lambda: _clipped("sum of norms"),
    (6, "the square root missing"): lambda: _clipped("no root"),
    (6, "the momentum clipped instead of the gradient"): lambda: _clipped(clip_momentum=True),
    (6, "the whole gradient all-reduced for its norm"): lambda: _clipped("whole", all_reduce=True),
    (6, "the squares averaged (pmean) instead of summed"): lambda: _clipped("pmean"),
    (6, "the largest entry (∞-norm) as the norm"): lambda: _clipped("max abs"),
    (6, "each partial clipped before the reduce-scatter"): lambda: _clipped("partials first"),
    (6, "a slice-long vector all-reduced for the norm"): lambda: _clipped("slice vector"),
    (7, "the columns of x reordered instead of its rows"): _permuted_columns,
    (10, "the notebook's fit used instead of the arguments"): lambda: (
        check_bandwidth_fraction_size(answer(
            "def bytes_at_bandwidth_fraction(a, b, fraction):\n"
            "    return fraction * alpha_s * bytes_per_s / (1 - fraction)\n",
            "bytes_at_bandwidth_fraction", alpha_s=1.286e-4, bytes_per_s=6.5e9))
    ),
    (12, "the notebook's RANKS instead of the argument ranks"): lambda: check_bucket_model(
        _trial("12 step time", "my_step_time", dict(
            plan_buckets=plan_buckets, collective_time=collective_time, RANKS=64),
            n="sum(sizes[j] for j in bucket)", ranks="RANKS")
    ),
    (12, "a bucket's gradient count taken for its bytes (len(bucket))"): lambda: (
        check_bucket_model(_trial("12 step time", "my_step_time", dict(
            plan_buckets=plan_buckets, collective_time=collective_time),
            n="len(bucket)", ranks="ranks"))
    ),
    (13, "nodes and local swapped, the sizes read from the page's mesh.shape"): lambda: (
        _swapped_on_the_page('nodes, local = mesh.shape["node"], mesh.shape["local"]')
    ),
    (13, "nodes and local swapped, with the page's LOCAL and NODES"): lambda: (
        _swapped_on_the_page("nodes, local = NODES, LOCAL")
    ),
    (13, "a jitted shard_map passed instead of the per-device function"): lambda: (
        check_two_level_scatter(_trial("13 jitted", "my_two_level_scatter", _page_13()),
                                node_local_mesh(2))
    ),
    (16, "steps / H rounds, H tried one by one"): lambda: check_local_sgd_h(
        _trial("16 loop", "my_local_sgd_h", rounds="steps / h")
    ),
    (16, "one step's bytes held against the run's budget"): lambda: check_local_sgd_h(
        _trial("16 loop", "my_local_sgd_h", rounds="1 / h")
    ),
    (16, "the largest H that does not fit"): lambda: check_local_sgd_h(
        _trial("16 largest", "my_local_sgd_h")
    ),
    (16, "one above the smallest H that fits"): lambda: check_local_sgd_h(
        _trial("16 found", "my_local_sgd_h", ret="h + 1")
    ),
    (16, "the number of averagings returned, not H"): lambda: check_local_sgd_h(
        _trial("16 found", "my_local_sgd_h", ret="steps // h")
    ),
    (21, "the package's diloco_cluster.sync_link_bytes called"): lambda: check_smallest_h(
        _trial("21 sync_link_bytes", "my_smallest_h", dict(cu=cu, math=math)), **STEP21
    ),
    (8, "recursive doubling's steps sending half the vector"): lambda: check_rd_crossover(
        _crossover(rd_share=0.5), **STEP8
    ),
    (8, "p − 1 steps for recursive doubling"): lambda: check_rd_crossover(
        _crossover(rd_steps=lambda p: p - 1), **STEP8
    ),
    (8, "the natural log for log₂"): lambda: check_rd_crossover(
        _crossover(rd_steps=math.log), **STEP8
    ),
    (8, "the ring's 2(p − 1) steps taken as 2p"): lambda: check_rd_crossover(
        _crossover(ring_steps=lambda p: 2 * p, ring_share=lambda p: 2.0), **STEP8
    ),
    (8, "one pass of the ring"): lambda: check_rd_crossover(
        _crossover(ring_steps=lambda p: p - 1, ring_share=lambda p: (p - 1) / p), **STEP8
    ),
    (8, "α in µs"): lambda: check_rd_crossover(_crossover(scale=1e6), **STEP8),
    (8, "2p ring steps, its bytes kept"): lambda: check_rd_crossover(
        _crossover(ring_steps=lambda p: 2 * p), **STEP8
    ),
    (8, "p·α·B, the ring's own latency threshold"): lambda: check_rd_crossover(
        lambda p, alpha_s, bytes_per_s: p * alpha_s * bytes_per_s, **STEP8
    ),
    (8, "the page's α and B typed in"): lambda: check_rd_crossover(
        lambda p, alpha_s, bytes_per_s: _crossover()(p, 5e-6, 12.5e9), **STEP8
    ),
    (8, "a division by zero at p = 2"): lambda: check_rd_crossover(
        lambda p, a, b: a * b * (2 * (p - 1) - math.log2(p)) / (math.log2(p) - 2 * (p - 1) / p),
        **STEP8
    ),
    (8, "the answer in MiB"): lambda: check_rd_crossover(_crossover(scale=2**-20), **STEP8),
    (7, "reversal, which leaves the middle device its own rows when p is odd"): lambda: _permuted(
        lambda n, p: np.arange(n)[::-1]
    ),
    (7, "only the labels reordered, the rows of x left in place"): lambda: _permuted(
        lambda n, p: np.roll(np.arange(n), n // p), labels_only=True
    ),
    (7, "a shift by this notebook's block (4 rows) instead of n // p"): lambda: _permuted(
        lambda n, p: np.roll(np.arange(n), 4)
    ),
    (11, "the partial sum passed on, but nothing added"): lambda: check_ring_step(
        _ring_step(add=False), data_mesh()
    ),
    (11, "the page's ring copied: sent to i + 1"): lambda: check_ring_step(
        _ring_step(forwards=True), data_mesh()
    ),
    (11, "p read from a chunk's length (chunks.shape[1])"): lambda: check_ring_step(
        _ring_step(p_from=lambda chunks: chunks.shape[1]), data_mesh()
    ),
    (12, "a bucket's ready time counted in gradients, not bytes"): lambda: check_bucket_model(
        _bucket(ready_by_count=True)
    ),
    (12, "a bucket that does not wait for the previous all-reduce"): lambda: check_bucket_model(
        _bucket(wait=False)
    ),
    (13, "the two scatters chained without reordering the slices"):
        lambda: check_two_level_scatter(
            lambda x: jax.lax.psum_scatter(
                jax.lax.psum_scatter(x, "local", tiled=True), "node", tiled=True),
            node_local_mesh(2),
        ),
    (13, "nodes and local swapped in the reorder"): lambda: check_two_level_scatter(
        _swapped_reorder, node_local_mesh(2)
    ),
    (13, "scattered across the nodes first"): lambda: check_two_level_scatter(
        lambda x: jax.lax.psum_scatter(
            jax.lax.psum_scatter(x, "node", tiled=True), "local", tiled=True),
        node_local_mesh(2),
    ),
    (13, "psum across the nodes instead of psum_scatter"): lambda: check_two_level_scatter(
        lambda x: jax.lax.psum(jax.lax.psum_scatter(x, "local", tiled=True), "node"),
        node_local_mesh(2),
    ),
    (14, "the mean layer for the largest"): lambda: check_peak_prediction(
        _peak(layer=lambda s: sum(s) / len(s)), PAGE_LAYERS, 4
    ),
    (14, "the last layer for the largest"): lambda: check_peak_prediction(
        _peak(layer=lambda s: s[-1]), PAGE_LAYERS, 4
    ),
    (14, "every layer gathered at once"): lambda: check_peak_prediction(
        _peak(one_layer=False), PAGE_LAYERS, 4
    ),
    (14, "ZeRO-3's state left out of its peak"): lambda: check_peak_prediction(
        _peak(state=False), PAGE_LAYERS, 4
    ),
    (14, "ZeRO-2's whole local gradient taken as a slice"): lambda: check_peak_prediction(
        _peak(zero2_slice=True), PAGE_LAYERS, 4
    ),
    (14, "ZeRO-1's slice of the sum left out"): lambda: check_peak_prediction(
        _peak(zero1_sum=False), PAGE_LAYERS, 4
    ),
    (14, "values counted instead of bytes"): lambda: check_peak_prediction(
        _peak(values=True), PAGE_LAYERS, 4
    ),
    (14, "the all-gathered w counted beside the old w"): lambda: check_peak_prediction(
        _peak(gathered_w=True), PAGE_LAYERS, 4
    ),
    (14, "slices of n/(p − 1)"): lambda: check_peak_prediction(
        _peak(less_one=True), PAGE_LAYERS, 4
    ),
    (15, "g quantized alone, not g + residual"): lambda: check_int8_feedback(
        _feedback(g_alone=True), 0.5
    ),
    (15, "the new residual forgets the old one"): lambda: check_int8_feedback(
        _feedback(forget=True), 0.5
    ),
    (15, "one scale for the whole vector"): lambda: check_int8_feedback(
        _feedback(bucket=0), 0.5
    ),
    (15, "the codes cut toward zero (astype)"): lambda: check_int8_feedback(
        _feedback(rounding=lambda x: x.astype(jnp.int8)), 0.5
    ),
    (15, "the codes sent without their scale"): lambda: check_int8_feedback(
        _feedback(scaled=False), 0.5
    ),
    (15, "255 levels for int8's 127"): lambda: check_int8_feedback(_feedback(levels=255), 0.5),
    (15, "a bucket of zeros divided by its zero scale"): lambda: check_int8_feedback(
        _feedback(guard=False), 0.5
    ),
    (15, "the bound as a whole step of the codes"): lambda: check_int8_feedback(
        _feedback(), 1.0
    ),
    (15, "the bound in units of the bucket's largest value"): lambda: check_int8_feedback(
        _feedback(), 0.5 / 127
    ),
    (13, "the sum across the nodes forgotten"): lambda: check_two_level_scatter(
        _trial("13 one node", "my_two_level_scatter", _page_13()), node_local_mesh(2)
    ),
    (16, "the bytes of every device counted"): lambda: check_local_sgd_h(
        _trial("16 loop", "my_local_sgd_h", rounds="p * (steps // h)")
    ),
    (16, "one averaging too many (steps // H + 1)"): lambda: check_local_sgd_h(
        _trial("16 loop", "my_local_sgd_h", rounds="steps // h + 1")
    ),
    (16, "the check's own answer called"): lambda: check_local_sgd_h(
        _trial("16 check's answer", "my_local_sgd_h", dict(checks=cu.checks))
    ),
    (16, "steps / H averagings, not steps // H"): lambda: check_local_sgd_h(
        lambda nbytes, p, steps, budget: -(-steps // (budget // (2 * (p - 1) / p * nbytes)))
    ),
    (16, "one pass of the ring counted"): lambda: check_local_sgd_h(
        lambda nbytes, p, steps, budget: steps // (budget // ((p - 1) / p * nbytes) + 1) + 1
    ),
    (10, "alpha_s taken for µs and converted to seconds"): lambda: (
        check_bandwidth_fraction_size(lambda a, b, f: a * 1e6 * b * f / (1 - f))
    ),
    (10, "the page's all-reduce bus factor multiplied in"): lambda: (
        check_bandwidth_fraction_size(lambda a, b, f: a * b * f / (1 - f) * 2 * 3 / 4)
    ),
    (10, "fraction and 1 − fraction swapped"): lambda: check_bandwidth_fraction_size(
        lambda a, b, f: a * b * (1 - f) / f
    ),
    (10, "S returned in MiB"): lambda: check_bandwidth_fraction_size(
        lambda a, b, f: a * b * f / (1 - f) / 2**20
    ),
    (16, "the notebook's n and p instead of the arguments"): lambda: check_local_sgd_h(
        lambda nbytes, p, steps, budget: steps // (budget // (1.5 * 4 * 10752) + 1) + 1
    ),
    (16, "a run that spends exactly the budget refused"): lambda: check_local_sgd_h(
        lambda nbytes, p, steps, budget: next(
            h for h in range(1, steps + 2) if steps // h * 2 * (p - 1) / p * nbytes < budget)
    ),
    (17, "the link rate in bits taken for bytes"): lambda: check_reduce_scatter_times(
        _link(1 / 8, 1 / 8), **STEP17
    ),
    (17, "the all-reduce's two passes counted"): lambda: check_reduce_scatter_times(
        _link(flat=2), **STEP17
    ),
    (17, "the devices of a host not sharing its link"): lambda: check_reduce_scatter_times(
        _link(two=1 / 4), **STEP17
    ),
    (17, "the frame headers counted"): lambda: check_reduce_scatter_times(
        _link(flat=1514 / 1448, two=1514 / 1448), **STEP17
    ),
    (18, "the rate in bits taken for bytes"): lambda: check_micro_batches(
        _micro(per_byte=8), **STEP18
    ),
    (18, "K rounded down"): lambda: check_micro_batches(_micro(rounding=math.floor), **STEP18),
    (18, "the balanced rows returned, not the micro-batches"): lambda: check_micro_batches(
        _micro(rows_only=True), **STEP18
    ),
    (19, "the ring's factor 2(p − 1)/p forgotten (the bucket once)"): lambda: (
        check_overlap_rate(_hidden(share=lambda h: 1.0), **STEP19)
    ),
    (19, "the ring's factor as 2(p − 1)"): lambda: check_overlap_rate(
        _hidden(share=lambda h: 2 * (h - 1)), **STEP19
    ),
    (19, "α dropped"): lambda: check_overlap_rate(_hidden(steps=lambda h: 0), **STEP19),
    (19, "α read as microseconds"): lambda: check_overlap_rate(
        _hidden(alpha_unit=1e-6), **STEP19
    ),
    (19, "α for h − 1 message steps, not 2(h − 1)"): lambda: check_overlap_rate(
        _hidden(steps=lambda h: h - 1), **STEP19
    ),
    (19, "α left in seconds beside milliseconds"): lambda: check_overlap_rate(
        _hidden(alpha_unit=1e-3), **STEP19
    ),
    (19, "compute_ms taken for seconds"): lambda: check_overlap_rate(_hidden(to_s=1.0), **STEP19),
    (19, "the rate returned in bits per second"): lambda: check_overlap_rate(
        _hidden(per_byte=8.0), **STEP19
    ),
    (19, "the rate returned in Mbit/s"): lambda: check_overlap_rate(
        _hidden(per_byte=8e-6), **STEP19
    ),
    (19, "buckets − 1 gaps for buckets"): lambda: check_overlap_rate(
        _hidden(gaps=lambda n: n - 1), **STEP19
    ),
    (19, "the whole pass as the gap"): lambda: check_overlap_rate(
        _hidden(gaps=lambda n: 1), **STEP19
    ),
    (20, "the rate left in bytes per second"): lambda: check_break_even(
        _break_even(bits=1), **STEP20
    ),
    (20, "one step of each compared, not the steps to the target"): lambda: check_break_even(
        _break_even(per_step=True), **STEP20
    ),
    (21, "the link rate in bits taken for bytes"): lambda: check_smallest_h(
        _smallest_h(bits=1), **STEP21
    ),
    (21, "the all-reduce inside a replica counted as crossing (a ring of R · D)"): lambda: (
        check_smallest_h(_smallest_h(ring=lambda r, d: r * d), **STEP21)
    ),
    (21, "one device's slice taken for the replica's (÷ D)"): lambda: check_smallest_h(
        _smallest_h(slice_only=True), **STEP21
    ),
    (21, "R in place of R − 1 in the ring's factor"): lambda: check_smallest_h(
        _smallest_h(r_for_r_minus_1=True), **STEP21
    ),
    (21, "H rounded down"): lambda: check_smallest_h(_smallest_h(rounding=math.floor), **STEP21),
    (22, "the rate left in bytes per second"): lambda: check_slowest_hidden_rate(
        _hiding(per_byte=1), **STEP22
    ),
    (22, "every parameter counted, not one fragment"): lambda: check_slowest_hidden_rate(
        _hiding(whole=True), **STEP22
    ),
    (22, "the scales left out"): lambda: check_slowest_hidden_rate(
        _hiding(scales=False), **STEP22
    ),
    (22, "the ring's share 2(R − 1)/R dropped (1 at the page's 2 hosts)"): lambda: (
        check_slowest_hidden_rate(_hiding(ring=False), **STEP22)
    ),
    (22, "one inner step to hide behind, not τ"): lambda: check_slowest_hidden_rate(
        _hiding(steps=1), **STEP22
    ),
    (23, "the handshake left out"): lambda: check_transfer_time(
        _transfer(handshake=False), **STEP23
    ),
    (23, "no slow start: the whole sync at the link's rate"): lambda: check_transfer_time(
        _transfer(slow=False), **STEP23
    ),
    (23, "the rate in bits taken for bytes"): lambda: check_transfer_time(
        _transfer(per_byte=1), **STEP23
    ),
    (23, "the initial window as 10 bytes, not 10 segments"): lambda: check_transfer_time(
        _transfer(initial=10), **STEP23
    ),
    (23, "the window grown by one segment a round"): lambda: check_transfer_time(
        _transfer(grow=lambda w: w + 1448), **STEP23
    ),
    (23, "the package's slow_start_s called"): lambda: check_transfer_time(
        lambda s, r, t: cu.round_trips.slow_start_s(s, r / 8, t), **STEP23
    ),
}


@pytest.mark.parametrize(
    "step, wrong, said",
    [(s.number, m.wrong, m.said) for s in OUTLINE if s.exercise for m in s.exercise.mistakes],
    ids=lambda v: str(v)[:40],
)
def test_each_common_wrong_answer_gets_the_message_the_page_quotes(step, wrong, said):
    with pytest.raises(ExerciseFailed) as failed:
        CASES[step, wrong]()
    assert said in str(failed.value)


def test_every_case_is_on_the_page():
    assert set(CASES) == {(s.number, m.wrong) for s in OUTLINE if s.exercise
                          for m in s.exercise.mistakes}
