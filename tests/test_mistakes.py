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
    check_balanced_rows,
    check_bandwidth_fraction_size,
    check_break_even,
    check_bucket_model,
    check_int8_feedback,
    check_joint_permutation,
    check_local_sgd_h,
    check_memory_prediction,
    check_overlap_prediction,
    check_rd_crossover,
    check_reduce_scatter_times,
    check_ring_step,
    check_shares,
    check_slowest_hidden_rate,
    check_smallest_h,
    check_stored_bytes_rule,
    check_two_level_scatter,
    check_two_state_update,
)
from course_utils.checks.helpers import ExerciseFailed
from course_utils.constants import LR
from course_utils.models.latency import collective_time, plan_buckets
from course_utils.tools.notebooks.outline import OUTLINE
from course_utils.training.run import Memory

# the student trial's tries (reviews/student-trial-2026-12-05.md), written as the trial wrote
# them: in a notebook cell, reading the page's globals where the trial did (tests/notebook_cell.py)
TRIAL = {
    "02 float16": (
        "def my_shares(x, y, w, p):\n"
        "    return np.stack([2 * xb.T @ (xb @ w - yb) / x.shape[0] for xb, yb in "
        "zip(np.split(x, p), np.split(y, p))]).astype(np.float16)\n"),
    "02 globals": (
        "def my_shares(x, y, w, p):\n"
        "    return np.stack([2 * xb.T @ (xb @ wh - yb) / xh.shape[0] for xb, yb in "
        "zip(np.split(xh, p), np.split(yh, p))])\n"),
    "02 features": (
        "def my_shares(x, y, w, p):\n"
        "    return np.stack([2 * xb.T @ (xb @ w - yb) / x.shape[1] for xb, yb in "
        "zip(np.split(x, p), np.split(y, p))])\n"),
    "02 check's answer": (
        "my_shares = lambda x, y, w, p: checks.gradients._expected_shares(x, y, w, p)\n"),
    "06 kernel": (
        "def two_state_kernel(x_block, y_block, w, m_slice, s_slice):\n"
        "    n_rows = {rows}\n"
        "    partial = {partial}\n"
        "    g = jax.lax.psum_scatter(partial, 'data', tiled=True)\n"
        "    k = {k}\n"
        "    w_slice = jax.lax.dynamic_slice_in_dim(w, {start}, k)\n"
        "    m_next = {b1} * m_slice + (1 - {b1}) * g\n"
        "    s_next = {b2} * s_slice + (1 - {b2}) * {square}\n"
        "    w_next = jax.lax.all_gather(w_slice - LR * m_next / (jnp.sqrt(s_next) + {eps}), "
        "'data', tiled=True, to='invarying')\n"
        "    return w_next, m_next, s_next\n\n"
        "two_state_step = jax.jit(jax.shard_map(two_state_kernel, mesh=mesh, "
        "in_specs=TWO_STATE_IN, out_specs=TWO_STATE_OUT))\n"
        "{wrap}"),
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
    "19 hierarchical": (
        "def my_overlap_ms(compute_ms, bucket_bytes, buckets, hosts, bytes_per_s, alpha_s):\n"
        "    t = cu.hierarchical_time(bucket_bytes, hosts, 1, alpha_s=alpha_s, "
        "local_bytes_per_s=bytes_per_s, node_bytes_per_s=bytes_per_s).flat * 1e3\n"
        "    done = 0.0\n"
        "    for i in range(1, buckets + 1):\n"
        "        done = max(compute_ms * i / buckets, done) + t\n"
        "    return done\n"),
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
    "19 steps": (
        "def my_overlap_ms(compute_ms, bucket_bytes, buckets, hosts, bytes_per_s, alpha_s):\n"
        "    steps = {steps}\n"
        "    t = steps * alpha_s + {share} / hosts * bucket_bytes / bytes_per_s\n"
        "    done = 0.0\n"
        "    for i in range(1, buckets + 1):\n"
        "        done = max(compute_ms / 1e3 * i / buckets, done) + t\n"
        "    return done * 1e3\n"),
    "19 loop": (
        "def my_overlap_ms(compute_ms, bucket_bytes, buckets, hosts, bytes_per_s, alpha_s):\n"
        "    t_ms = (2 * (hosts - 1) * alpha_s + 2 * (hosts - 1) / hosts * bucket_bytes / "
        "({rate})) * 1e3\n"
        "    done = 0.0\n"
        "    for i in range(1, {last}):\n"
        "        ready = compute_ms * ({i}) / buckets\n"
        "        done = max(ready, done) + t_ms\n"
        "    return done\n"),
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


def _sliced_update(rows: str = "x_block.shape[0] * jax.lax.axis_size('data')", two: str = "2",
                   eps: str = "EPS", wrap: str = "", k: str = "g.shape[0]",
                   start: str = "jax.lax.axis_index('data') * k", b1: str = "B1",
                   b2: str = "B2", square: str = "g**2", partial: str = ""):
    """Exercise 06 answered with the global row count ``rows`` (a slip in ``two``, ``eps``,
    ``wrap``, the slice's ``start``, the betas, the ``square`` or the ``partial`` gradient
    otherwise), on the page's globals."""
    partial = partial or f"{two} * x_block.T @ (x_block @ w - y_block) / n_rows"
    mesh = data_mesh()
    xh, yh, _ = toy_regression(4 * mesh.size, 2 * mesh.size)
    specs = (jax.P("data", None), jax.P("data"), jax.P(), jax.P("data"), jax.P("data"))
    page = dict(mesh=mesh, xh=xh, yh=yh, B1=0.9, B2=0.999, EPS=1e-3, LR=LR, TWO_STATE_IN=specs,
                TWO_STATE_OUT=(jax.P(), jax.P("data"), jax.P("data")))
    step = _trial("06 kernel", "two_state_step", page, rows=rows, partial=partial, eps=eps,
                  wrap=wrap, k=k, start=start, b1=b1, b2=b2, square=square)
    check_two_state_update(step, mesh, xh.shape, lr=LR, beta1=0.9, beta2=0.999, eps=1e-3)


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


N, P = 1024, 4
MEASURED = {
    "data_parallel": Memory(4 * N, 4 * N, 4 * N),
    "zero1": Memory(4 * N, 4 * N, N),
    "zero2": Memory(4 * N, N, N),
    "zero3": Memory(N, N, N),
}


def _memory(values=False, zero1_whole=False):
    def predicted(n, p):
        b = 1 if values else 4
        return {
            "data_parallel": 3 * b * n,
            "zero1": 3 * b * n if zero1_whole else 2 * b * n + b * n // p,
            "zero2": b * n + 2 * b * n // p,
            "zero3": 3 * b * n // p,
        }

    return predicted


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


STEP19 = dict(compute_ms=667.0, bucket_bytes=2**20, buckets=16, hosts=2, bytes_per_s=2.39e7,
              alpha_s=4.5e-4)


def _ring_ms(nbytes, h, rate, alpha):
    return 2 * (h - 1) * (alpha + nbytes / h / rate) * 1e3


STEP17 = dict(hosts=2, devices=4, nbytes=16 * 2**20, rate_bits=1e9)


def _balanced(per_byte=1.0, per_row=True):
    def rows(weights, hosts, devices, rate_bits, alpha_s, flops_per_s):
        p = hosts * devices
        link_s = 2 * (p - 1) / p * 4 * weights / (rate_bits / 8) * per_byte
        communication_s = 2 * (p - 1) * alpha_s + link_s
        return communication_s / (6 * weights / flops_per_s) if per_row else communication_s

    return rows


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
STEP18 = dict(weights=1_114_112, hosts=2, devices=2, rate_bits=2e8, alpha_s=4e-4,
              flops_per_s=3e10)
STEP22 = dict(n_params=1_118_464, fragments=4, bits=4, hosts=2, tau=2, step_s=0.03)


def _hiding(per_byte=8, whole=False, scales=True, steps=None):
    def rate(n_params, fragments, bits, hosts, tau, step_s):
        values = n_params / (1 if whole else fragments)
        sent = values * bits / 8 + (values / 64 * 4 if scales else 0)
        return per_byte * 2 * (hosts - 1) / hosts * sent / ((steps or tau) * step_s)

    return rate


CASES = {
    (2, "the shares returned as float16"): lambda: check_shares(
        _trial("02 float16", "my_shares")
    ),
    (2, "the notebook's xh, yh, wh instead of the arguments"): lambda: check_shares(
        _trial("02 globals", "my_shares", dict(zip(("xh", "yh", "wh"), toy_regression(16, 8))))
    ),
    (2, "x's feature count taken for the rows"): lambda: check_shares(
        _trial("02 features", "my_shares")
    ),
    (2, "the check's own answer called"): lambda: check_shares(
        _trial("02 check's answer", "my_shares", dict(checks=cu.checks))
    ),
    (5, "values counted instead of bytes (÷ 4)"): lambda: check_stored_bytes_rule(
        lambda n, p: {"all_reduce": 2 * (n // 4), "reduce_scatter": n // 4 + n // 4 // p,
                      "all_gather": n // 4 // p + n // 4},
        jax.devices(),
    ),
    (5, "bits counted instead of bytes (× 8)"): lambda: check_stored_bytes_rule(
        lambda n, p: {"all_reduce": 16 * n, "reduce_scatter": 8 * (n + n // p),
                      "all_gather": 8 * (n // p + n)},
        jax.devices(),
    ),
    (5, "the bytes of all p devices added up (× p)"): lambda: check_stored_bytes_rule(
        lambda n, p: {"all_reduce": 2 * n * p, "reduce_scatter": (n + n // p) * p,
                      "all_gather": (n // p + n) * p},
        jax.devices(),
    ),
    (6, "a row count typed in (n_rows = 16)"): lambda: _sliced_update("16"),
    (6, "the notebook's xh.shape[0] as the row count"): lambda: _sliced_update("xh.shape[0]"),
    (6, "the gradient's factor 2 dropped"): lambda: _sliced_update(two="1"),
    (6, "ε typed in (Adam's 1e-8)"): lambda: _sliced_update(eps="1e-8"),
    (6, "the gradient's sign flipped"): lambda: _sliced_update(two="-2"),
    (6, "the slice length typed in"): lambda: _sliced_update(k="2"),
    (6, "the notebook's rows instead of the arguments"): lambda: _sliced_update(
        wrap="_inner = two_state_step\n"
             "two_state_step = lambda x_, y_, w_, m_, s_: _inner(xh, yh, w_, m_, s_)\n"),
    (6, "β1 and β2 swapped"): lambda: _sliced_update(b1="B2", b2="B1"),
    (6, "s from each device's squared partial gradient"): lambda: _sliced_update(
        square="jax.lax.psum_scatter(partial**2, 'data', tiled=True)"),
    (6, "w's slice cut at axis_index, not axis_index · k"): lambda: _sliced_update(
        start="jax.lax.axis_index('data')"),
    (6, "the row count read from the features' axis"): lambda: _sliced_update(
        "x_block.shape[1] * jax.lax.axis_size('data')"),
    (6, "jax.grad with respect to the replicated w"): lambda: _sliced_update(
        partial="jax.grad(lambda v: jnp.sum((x_block @ v - y_block) ** 2) / n_rows)(w)"),
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
    (19, "the rate in bytes divided by 8 again"): lambda: check_overlap_prediction(
        _trial("19 loop", "my_overlap_ms", rate="bytes_per_s / 8", last="buckets + 1", i="i"),
        **STEP19
    ),
    (19, "a bucket ready when its compute starts (i − 1)"): lambda: check_overlap_prediction(
        _trial("19 loop", "my_overlap_ms", rate="bytes_per_s", last="buckets + 1", i="i - 1"),
        **STEP19
    ),
    (19, "2h message steps (p for p − 1)"): lambda: check_overlap_prediction(
        _trial("19 steps", "my_overlap_ms", steps="2 * hosts", share="steps"), **STEP19
    ),
    (19, "one pass of the ring"): lambda: check_overlap_prediction(
        _trial("19 steps", "my_overlap_ms", steps="hosts - 1", share="steps"), **STEP19
    ),
    (19, "buckets − 1 all-reduces"): lambda: check_overlap_prediction(
        _trial("19 loop", "my_overlap_ms", rate="bytes_per_s", last="buckets", i="i"), **STEP19
    ),
    (21, "the package's diloco_cluster.sync_link_bytes called"): lambda: check_smallest_h(
        _trial("21 sync_link_bytes", "my_smallest_h", dict(cu=cu, math=math)), **STEP21
    ),
    (5, "the whole vector counted as held after a reduce-scatter"): lambda: (
        check_stored_bytes_rule(
            lambda n, p: {"all_reduce": 2 * n, "reduce_scatter": 2 * n, "all_gather": n + n / p},
            jax.devices(),
        )
    ),
    (5, "what a ring sends counted instead of what a device holds"): lambda: (
        check_stored_bytes_rule(
            lambda n, p: {"all_reduce": 2 * (p - 1) * n / p, "reduce_scatter": (p - 1) * n / p,
                          "all_gather": (p - 1) * n / p},
            jax.devices(),
        )
    ),
    (5, "the input block left out"): lambda: check_stored_bytes_rule(
        lambda n, p: {"all_reduce": n, "reduce_scatter": n / p, "all_gather": n}, jax.devices()
    ),
    (5, "the notebook's gradient_bytes and N_DEVICES used instead of the arguments"): lambda: (
        check_stored_bytes_rule(  # the notebook's 32-byte gradient on its 4 devices
            lambda n, p: {"all_reduce": 64, "reduce_scatter": 40, "all_gather": 40},
            jax.devices(),
        )
    ),
    (5, "p − 1 in place of p in a slice"): lambda: check_stored_bytes_rule(
        lambda n, p: {"all_reduce": 2 * n, "reduce_scatter": n + n / (p - 1),
                      "all_gather": n / (p - 1) + n},
        jax.devices(),
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
    (14, "values counted instead of bytes"): lambda: check_memory_prediction(
        _memory(values=True), MEASURED, N, P
    ),
    (14, "ZeRO-1 counted with its momentum whole"): lambda: check_memory_prediction(
        _memory(zero1_whole=True), MEASURED, N, P
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
    (19, "the whole bucket at every message step (no ÷ hosts)"): lambda: (
        check_overlap_prediction(_trial("19 steps", "my_overlap_ms", steps="2 * (hosts - 1)",
                                        share="steps * hosts"), **STEP19)
    ),
    (19, "bucket_bytes divided by the buckets"): lambda: check_overlap_prediction(
        lambda c, nbytes, n, h, rate, alpha: max(
            c + (t := _ring_ms(nbytes / n, h, rate, alpha)), c / n + n * t), **STEP19
    ),
    (19, "the hosts typed in"): lambda: check_overlap_prediction(
        lambda c, nbytes, n, h, rate, alpha: max(
            c + (t := _ring_ms(nbytes, 4, rate, alpha)), c / n + n * t), **STEP19
    ),
    (19, "the package's hierarchical_time for a bucket"): lambda: check_overlap_prediction(
        _trial("19 hierarchical", "my_overlap_ms", dict(cu=cu)), **STEP19
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
    (18, "the rate in bits taken for bytes"): lambda: check_balanced_rows(
        _balanced(per_byte=8), **STEP18
    ),
    (18, "the all-reduce's time returned instead of rows"): lambda: check_balanced_rows(
        _balanced(per_row=False), **STEP18
    ),
    (19, "compute + communication (no overlap)"): lambda: check_overlap_prediction(
        lambda c, nbytes, n, h, rate, alpha: c + n * _ring_ms(nbytes, h, rate, alpha), **STEP19
    ),
    (19, "max(compute, communication)"): lambda: check_overlap_prediction(
        lambda c, nbytes, n, h, rate, alpha: max(c, n * _ring_ms(nbytes, h, rate, alpha)),
        **STEP19
    ),
    (19, "α paid once per all-reduce"): lambda: check_overlap_prediction(
        lambda c, nbytes, n, h, rate, alpha: max(
            c + (t := (alpha + 2 * (h - 1) / h * nbytes / rate) * 1e3), c / n + n * t),
        **STEP19
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
    (22, "one inner step to hide behind, not τ"): lambda: check_slowest_hidden_rate(
        _hiding(steps=1), **STEP22
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
