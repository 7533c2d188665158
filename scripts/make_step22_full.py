"""Builds notebooks/22_training_across_slow_links.ipynb (cells only; `course run --in-place` runs
it). Kept outside the repository: the notebook is the artefact.

    python make.py OUT.ipynb [--no-cluster]
"""

import sys

import nbformat

CLUSTER = "--no-cluster" not in sys.argv  # the cells that need the saved cluster run
cells = []


def md(text):
    cells.append(nbformat.v4.new_markdown_cell(text.strip("\n"), id=f"step22-{len(cells):02d}"))


def code(text, **meta):
    cell = nbformat.v4.new_code_cell(text.strip("\n"), id=f"step22-{len(cells):02d}")
    cell.metadata.update(meta)
    cells.append(cell)


md("""
# Step 22 — Training across slow links: Streaming DiLoCo, measured

Step 21's DiLoCo sends its outer gradient once every H inner steps. Across a slow link three
costs remain: every parameter goes at once (the link's peak), the replicas wait for it, and
each value is 32 bits. Streaming DiLoCo (Douillard et al. 2025,
<https://arxiv.org/abs/2501.18512>) removes each with a piece this unit has built: fragments
synced on a schedule, a sync overlapping the next inner steps (step 19), and quantized outer
gradients (step 15). Measured on step 17's cluster at 10 Mbit/s to 1 Gbit/s between two
hosts: how much sooner does the model reach its target loss?

**You will learn** to read Streaming DiLoCo's schedule; to write one fragment's 4-bit
quantize → exchange → f32 sum across the hosts in a `shard_map` and read its bytes off the
compiled program; to predict, from one cost model, when a fragment's sync hides behind the
inner steps it overlaps; and to read time to a target from measured step times and curves
trained in one process.

**Predict.** At 10 Mbit/s, which reaches the target first: data parallelism, DiLoCo, DiLoCo with
4-bit outer gradients, or Streaming DiLoCo? And at 1 Gbit/s?
""")

code("N_DEVICES = 4", tags=["parameters"])

CLUSTER_NAMES = """
    FRAME_SHARE,
    diloco_cluster_link_bytes,
    diloco_cluster_local_steps,
    diloco_cluster_method,
    diloco_cluster_rates,
    diloco_cluster_ratio,
    diloco_cluster_step,
    diloco_cluster_sync,
    diloco_model_gaps,
    diloco_sync_bytes,
    modelled_diloco_step_s,
    rate_bytes_per_s,
    rate_label,
    saved_diloco_cluster,
    strategy_spec,
    streaming_curves_of,
    streaming_steps_to_target,
    wall_clock_figure_data,""" if CLUSTER else """
    STREAMING_FRAGMENTS,
    STREAMING_OVERLAP,
    median_compute_s,
    saved_training_results,
    streaming_steps_to_target,"""

code(f"""
import jax
import jax.numpy as jnp
import numpy as np
from jax import P
from jax.sharding import NamedSharding

from course_utils import (
    PART_FOUR,
    STREAMING_MIXING,
    format_bytes,
    fragment_indices,
    hlo_collectives,
    largest_layer_share,
    padded_size,
    plot_figure,
    quantization_error_bound,
    quantized_all_reduce,
    replica_mesh,
    ring_payload,
    saved_streaming_curves,
    schedule_figure_data,
    streaming_schedule,
    streaming_target,
    use_cpu_devices,{CLUSTER_NAMES}
)
from course_utils.checks import check_slowest_hidden_rate
""")

code("""
use_cpu_devices(N_DEVICES)
mesh = replica_mesh()  # ("host", "device"): one replica per host
R, D = mesh.shape["host"], mesh.shape["device"]
print(f"{R} host(s), one replica each, of {D} device(s)")
""")

md("""
## The schedule

Streaming DiLoCo cuts the flat parameter vector into F fragments and sends fragment f's outer
gradient every H inner steps, at offset f · H/F: one fragment every H/F steps, so the link
carries 1/F of the model at a time. Each sync runs while the replica takes the next τ inner
steps and is merged after exactly τ of them, as α · local + (1 − α) · synced (the paper's
mixing): the loss never depends on how long the link took, so curves train in one process.
The paper's fragments are groups of layers; part four's model cannot be cut so:
""")

SOURCE = """run = saved_diloco_cluster()  # the cluster run timed below: its Streaming DiLoCo's
streaming = diloco_cluster_method(run, "streaming_diloco")
H, F, TAU = diloco_cluster_local_steps(run)[0], streaming.fragments, streaming.overlap
""" if CLUSTER else """curves = saved_streaming_curves()  # the curves below: their Streaming DiLoCo's
H, F, TAU = curves.local_steps, STREAMING_FRAGMENTS, STREAMING_OVERLAP
"""

code(f"""
n = padded_size(mesh.size, PART_FOUR)  # the flat parameter vector
share = largest_layer_share(PART_FOUR)
print(f"the first layer holds {{share:.1%}} of the {{n:,}} parameters")
w = np.arange(n)
fragments = [w.reshape(-1, 4)[:, f] for f in range(4)]  # fragment f: w[f], w[f + 4], …
same = all(np.array_equal(fragments[f], w[fragment_indices(n, f, 4)]) for f in range(4))
print(f"4 strided fragments of {{n // 4:,}} values; fragment 1 starts "
      f"{{fragments[1][:3].tolist()}}; the package's: {{same}}")
{SOURCE}events = streaming_schedule(2 * H, local_steps=H, fragments=F, overlap=TAU)
sends = [(e.step, e.fragment) for e in events if e.kind == "send"]
print(f"H = {{H}}, F = {{F}}, τ = {{TAU}}: sent after steps "
      + ", ".join(f"{{s}} ({{f}})" for s, f in sends))
print(f"each merged after τ more inner steps, α = {{STREAMING_MIXING}} the local share")
plot_figure(schedule_figure_data(sends, fragments=F, tau=TAU, steps=2 * H + 1))
""")

md("""
**Read.** A fragment takes every F-th value, so each holds 1/F of every layer and all are the
same size. Counted from step 1, fragment 0 goes last in a round. At most one fragment is on
its way at a time (τ < H/F), and each merges before it is sent again.

## One fragment's sync on the page

Each host holds its replica's outer gradient (the parameters at the last sync minus its own);
its devices split the fragment, and each exchanges its slice with the same device of the other
hosts: the host axis is the slow link. The values go as 4-bit codes, two to a byte (gloo moves
whole bytes), with an f32 scale per 64 values, and are summed in f32 (codes with different
scales cannot be added). As step 15's int8: an all-to-all hands host r chunk r of every host's
codes, host r sums them and quantizes its chunk again, and an all-gather returns every chunk.
""")

code("""
BLOCK, L = 64, 7  # one f32 scale per 64 values; int4 codes in [-7, 7]


def quantize4(v):  # v: f32[..., m] -> codes u8[..., m/64, 32], scales f32[..., m/64, 1]
    blocks = v.reshape(*v.shape[:-1], -1, BLOCK)
    scales = jnp.max(jnp.abs(blocks), axis=-1, keepdims=True) / L
    codes = jnp.clip(jnp.round(blocks / jnp.where(scales > 0, scales, 1.0)), -L, L)
    nibbles = (codes + 8).astype(jnp.uint8)  # 1 … 15
    packed = nibbles[..., 0::2] | (nibbles[..., 1::2] << 4)  # two a byte, low first
    return packed, scales


def dequantize4(codes, scales):
    low, high = ((c.astype(jnp.float32) - 8) for c in (codes & 15, codes >> 4))
    values = jnp.stack([low, high], axis=-1).reshape(*codes.shape[:-1], -1) * scales
    return values.reshape(*values.shape[:-2], -1)


def sync_fragment(delta):  # delta: f32[1, m/D], my slice of my host's fragment
    chunks = delta.reshape(R, -1)  # one chunk for each host
    codes, scales = quantize4(chunks)
    codes = jax.lax.all_to_all(codes, "host", 0, 0, tiled=True)  # chunk r to host r
    scales = jax.lax.all_to_all(scales, "host", 0, 0, tiled=True)
    mine = jnp.sum(dequantize4(codes, scales), axis=0)  # f32: my chunk, summed
    codes, scales = quantize4(mine)
    codes = jax.lax.all_gather(codes, "host", tiled=True)  # every chunk, to every host
    scales = jax.lax.all_gather(scales, "host", tiled=True)
    return dequantize4(codes, scales)[None]  # f32[1, m/D]: my slice of the sum
""")

md("""
One check against the package's copy (`quantized_all_reduce`, the exchange its Streaming
DiLoCo runs) and the f32 sum, with the placement and the bytes of the compiled programs:
""")

code("""
m = BLOCK * 64 * mesh.size  # one fragment's values: whole blocks in every chunk
split = NamedSharding(mesh, P("host", "device"))  # host r's fragment, over its devices
rng = np.random.default_rng(0)
sizes = np.repeat(10.0 ** rng.uniform(-3, 0, (R, m // BLOCK)), BLOCK, axis=1)
deltas = (rng.standard_normal((R, m)) * sizes).astype(np.float32)  # blocks unlike
x = jax.device_put(deltas, split)


def program(kernel):
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=P("host", "device"),
                                 out_specs=P(None, "device"), check_vma=False))


page = program(sync_fragment)
package = program(lambda d: quantized_all_reduce(d[0], "host", R, dtype="int4")[None])
f32 = program(lambda d: jax.lax.psum(d, "host"))
mine, theirs, exact = (np.asarray(f(x))[0] for f in (page, package, f32))
# each host's rounding, then the sum's: each at most half a step of its block
rounding = 2 * sum(quantization_error_bound(d, "int4") for d in deltas)
within = np.all(np.abs(mine - exact) <= rounding + 1e-6)
print(f"the package's, bit for bit: {np.array_equal(mine, theirs)}; "
      f"the f32 sum within the two roundings' bound: {within}")
held = page(x)
block = held.addressable_shards[0].data.shape
print(f"each device holds {block} of the {held.shape} sum; "
      f"devices {sorted(d.id for d in held.sharding.device_set)}")
sent = {name: ring_payload(hlo_collectives(f.lower(x).compile().as_text()), R)
        for name, f in (("int4", page), ("f32", f32))}
for op in hlo_collectives(page.lower(x).compile().as_text()):
    print(f"  {op.op:10s} {op.dtype}{list(op.shape)} among devices {op.replica_groups}")
share = sent["int4"] / sent["f32"] if R > 1 else 0.0  # one host: nothing crosses a link
print(f"bytes one device sends: int4 {format_bytes(sent['int4'])}, f32 "
      f"{format_bytes(sent['f32'])}: {share:.4f} of f32 "
      f"(1/8 = 0.125, plus a 4-byte scale per 64 values: {(0.5 + 4 / 64) / 4:.4f})")
""")

md("""
**Read.** The page's sync is the package's, bit for bit, and within two roundings of the f32 sum
(each at most half a step of its block). Every collective runs among one device per host:
only the host axis crosses a link, carrying u8 codes and f32 scales, 1/8 of f32's bytes plus
the scales.
""")

if CLUSTER:
    md("""
## Measured on the cluster

The saved run times part four's model on step 17's cluster, each host computing on one device
and sending from its second (step 19). One model for every method: **time per round = H steps
of compute + the part of each sync not hidden** (a sync overlapping τ steps hides at most τ
steps of compute); the compute is the step with nothing sent, a sync's seconds its bytes over a
host's link at the payload rate.
""")

    code("""
RATES, HS = diloco_cluster_rates(run), diloco_cluster_local_steps(run)
METHODS = ("nothing_sent", "data_parallel", *(m.name for m in run.methods))
print(f"{run.cluster.hosts} hosts × {run.cluster.devices_per_host} devices, "
      f"{run.sizes.n:,} parameters, {run.sizes.batch_size} rows per host and step, "
      f"{run.meta.runs} runs")
for h in HS:
    print(f"ms per inner step at H = {h}: measured (model)")
    print(f"{'':17s}" + "".join(f"{rate_label(r):>16s}" for r in RATES))
    for name in METHODS:
        measured = (diloco_cluster_step(run, name, h, r).median for r in RATES)
        model = (modelled_diloco_step_s(run, name, h, r) for r in RATES)
        cells = (f"{a * 1e3:7.1f} ({b * 1e3:6.1f})" for a, b in zip(measured, model))
        print(f"{name:17s}" + "".join(f"{c:>16s}" for c in cells))
""")

    code("""
h, slow = HS[0], RATES[0]
whole, hosts = diloco_cluster_method(run, "diloco"), run.cluster.hosts
f32_step = diloco_cluster_link_bytes(run, "diloco", h, slow).median
print(f"host 0's link at {rate_label(slow)}, H = {h}: KiB per inner step, over "
      "DiLoCo's (the model's ratio); one sync alone, KiB and over the model's bytes")
print(f"{'':17s} {'per step':>9s} {'/ DiLoCo':>9s} {'(model)':>9s} {'one sync':>9s} "
      f"{'/ model':>8s}")
dp = diloco_cluster_link_bytes(run, "data_parallel", h, slow).median
print(f"{'data_parallel':17s} {dp / 2**10:9.1f} {dp / f32_step:9.4f} {h:9.4f}")
for m in run.methods:
    per_step = diloco_cluster_link_bytes(run, m.name, h, slow).median
    sent = diloco_sync_bytes(m, run.sizes.n, hosts)
    model = sent * m.fragments / diloco_sync_bytes(whole, run.sizes.n, hosts)
    one = diloco_cluster_sync(run, m.name, slow, "sync_bytes").median
    print(f"{m.name:17s} {per_step / 2**10:9.1f} {per_step / f32_step:9.4f} "
          f"{model:9.4f} {one / 2**10:9.1f} {one / sent:8.3f}")
""")

    md("""
**Read.** The counters agree with the bytes the page counted: DiLoCo sends data parallelism's
bytes over H steps, int8 and 4 bits shrink a sync to about 1/4 and 1/8 plus the scales, and a
Streaming fragment is 1/F of the 4-bit sync, sent F times as often. (The counters see frames,
headers included, so every ratio is of like with like.) Where the link limits, the time per
inner step follows the bytes, and the model is below every measurement. It is furthest below
for the quantized syncs: the model's sync is its bytes at the link's rate, and those syncs take
longer than that. Time each sync alone and put that in the same round model:
""")

    code("""
print(f"links: tbf at the rate, a bucket of {run.cluster.bucket_ms:g} ms of bytes; "
      f"TCP {run.cluster.tcp}")
print("one sync alone: ms measured, × its bytes at the rate (the link model's time)")
print(f"{'':17s}" + "".join(f"{rate_label(r):>15s}" for r in RATES))
for m in run.methods:
    cells, sent = [], diloco_sync_bytes(m, run.sizes.n, hosts)
    for r in RATES:
        alone = diloco_cluster_sync(run, m.name, r).median
        model = sent / (rate_bytes_per_s(r) * FRAME_SHARE)
        cells.append(f"{alone * 1e3:7.1f} ×{alone / model:4.2f}")
    print(f"{m.name:17s}" + "".join(f"{c:>15s}" for c in cells))
for alone in (False, True):
    gaps = [(gap, name, h, r)
            for r, h, name, gap in diloco_model_gaps(run, sync_alone=alone)
            if r != RATES[-1]]  # where the link limits: 10 to 200 Mbit/s
    gap, name, h, r = max(gaps, key=lambda g: abs(g[0]))
    within = sum(abs(g[0]) <= 0.15 for g in gaps)
    print(f"round model, syncs {'timed alone' if alone else 'from the link model'}: "
          f"{within} of {len(gaps)} rounds within 15 % at 10-200 Mbit/s; "
          f"furthest {gap:+.1%} ({name}, H = {h}, {rate_label(r)})")
""")

    md("""
**Read.** Where the link limits, a float32 sync alone takes about its bytes at the rate; an
int8 or 4-bit one takes longer, though the counters saw the model's bytes (plus headers): for
part of each such sync the link was not sending. Two candidates, neither traced here: the
exchange's two phases (all-to-all, then all-gather) with quantizing, an f32 sum and quantizing
again between them on the shared cores; and TCP (Reno, chosen in step 17 so that a standing
queue keeps a link busy through a long transfer) starting each shorter message anew. Read the
last two lines apart. The first is the model as a prediction, from bytes and the rate: it is
below every measurement and misses most on the quantized syncs. The second is a check of how
a round adds up (H steps of compute plus what the overlap does not hide), with each sync's own
measured seconds put in.
""")

md("""
## Exercise: the slowest rate that still hides a sync

A fragment's sync hides when it ends within the τ inner steps it overlaps. Write
`my_slowest_rate(n_params, fragments, bits, hosts, tau, step_s)`: the slowest link rate, in bit/s
of payload (headers and latency left out), at which one fragment's sync of `n_params / fragments`
values, sent in `bits`-bit codes with a 4-byte scale per 64 values through a ring all-reduce
among `hosts` (all-to-all, then all-gather, as above), takes at most `tau` inner steps of
`step_s` seconds. Count the bytes yourself: the check refuses the package's byte models
(`diloco_sync_bytes` among them). It tries the numbers below, then cases the page never shows.
""")

if CLUSTER:
    code("""
compute_s = [diloco_cluster_step(run, "nothing_sent", HS[0], r).median for r in RATES]
CASE = dict(  # n: the run's vector, padded to whole 64-value blocks per host
    n_params=run.sizes.n,
    fragments=streaming.fragments,
    bits=4,
    hosts=run.cluster.hosts,
    tau=streaming.overlap,
    step_s=float(np.median(compute_s)),  # the step with nothing sent, over the rates
)
print({k: round(v, 4) for k, v in CASE.items()})
""")
else:
    code("""
saved = saved_training_results()  # step 20's cluster: its step with nothing sent
CASE = dict(n_params=n, fragments=F, bits=4, hosts=saved.cluster.hosts, tau=TAU,
            step_s=median_compute_s(saved, "data_parallel", 128))
print({k: round(v, 4) for k, v in CASE.items()})
""")

code("""
### BEGIN SOLUTION
def my_slowest_rate(n_params, fragments, bits, hosts, tau, step_s):
    values = n_params / fragments  # one fragment
    sent = values * bits / 8 + values / 64 * 4  # codes and scales, bytes
    over_link = 2 * (hosts - 1) / hosts * sent  # a ring all-reduce: two passes
    return 8 * over_link / (tau * step_s)  # bit/s that send it in tau steps


### END SOLUTION
""", tags=["solution"], nbgrader={"grade": False, "grade_id": "22-solution", "locked": False,
                                  "schema_version": 3, "solution": True})

code("""
check_slowest_hidden_rate(globals().get("my_slowest_rate"), **CASE)
""", tags=["check"], nbgrader={"grade": True, "grade_id": "22-check", "locked": True,
                               "points": 1, "schema_version": 3, "solution": False})

if CLUSTER:
    md("""
## Where overlap hides the sync

One fragment's sync timed alone, the τ steps of compute it overlaps, and Streaming DiLoCo's
inner step over the step with nothing sent (the runs' range in brackets):
""")

    code("""
s = streaming
print(f"F = {s.fragments}, τ = {s.overlap}: one fragment's sync alone against the "
      "τ inner steps it overlaps, ms;")
print("Streaming DiLoCo's inner step over the step with nothing sent, median [runs]")
print(f"{'rate':>10s} {'H':>3s} {'sync':>7s} {'τ steps':>8s} {'hidden?':>8s} "
      f"{'step / nothing sent':>22s}")
half = []  # the ratios where the sync needs at most half the τ steps' compute
for r in RATES:
    sync_s = diloco_cluster_sync(run, s.name, r).median
    for h in HS:
        tau_s = s.overlap * diloco_cluster_step(run, "nothing_sent", h, r).median
        q = diloco_cluster_ratio(run, (s.name, h), ("nothing_sent", h), r,
                                 lambda row: getattr(row, "step_s", None))
        fits = "yes" if sync_s <= tau_s else "no"
        print(f"{rate_label(r):>10s} {h:3d} {sync_s * 1e3:7.1f} {tau_s * 1e3:8.1f} "
              f"{fits:>8s} {q.median:8.3f} [{q.low:.3f}, {q.high:.3f}]")
        if sync_s <= tau_s / 2:
            half.append(q.median)
print(f"where the sync needs at most half the τ steps: step / nothing sent "
      f"{min(half):.3f}–{max(half):.3f} (medians)")
""")

    md("""
**Read.** At 10 Mbit/s a fragment's sync outlasts the τ inner step it overlaps and the step
waits for the rest: the overlap hides τ steps' worth of each sync, not more. Where the sync
fits in the τ steps but only just, the step still grows, more at the smaller H, where the
fragments come closer together. Where it needs at most half of them, the last line gives
the range: what remains above 1 is, we think, the sending's and the merge's work on the two cores
the hosts share (step 19), which the model leaves out; it was not timed apart here. Compare the rates with your exercise's
answer: that one is the model's, from the bytes alone.

## Time to the target

The held-out loss does not depend on the link: each curve was trained in one process from
three seeds (each draws the initial parameters and the minibatch order). The target is step
20's rule on data parallelism (AdamW); time to it = steps × the measured time per inner step.
""")

    code("""
curves = saved_streaming_curves()
target, HC = streaming_target(curves), curves.local_steps  # the curves' H
four = next(m.name for m in run.methods if (m.dtype, m.fragments) == ("int4", 1))
TIMED = {  # a curve's strategy: its method in the cluster run
    "dp_adamw": "data_parallel",
    "diloco": "diloco",
    "diloco_int8": "diloco_int8",
    "diloco_4bit": four,
    "streaming_diloco": "streaming_diloco",
}


def step_s(strategy, rate):  # measured at the curves' H and rows per host
    return diloco_cluster_step(run, TIMED[strategy], HC, rate).median


steps = {s: streaming_steps_to_target(curves, s, target) for s in TIMED}
print(f"target {target:.4f}; H = {HC}; inner steps to it by seed, then seconds:")
print(f"{'':17s} {'steps':>14s}" + "".join(f"{rate_label(r):>11s}" for r in RATES))
for s, k in steps.items():
    mean = np.mean(list(k.values()))
    by_seed = "/".join(f"{v:.0f}" for v in k.values())
    seconds = "".join(f"{mean * step_s(s, r):11.1f}" for r in RATES)
    print(f"{s:17s} {by_seed:>14s}{seconds}")
print(f"held-out loss at the end (step {curves.steps}), by seed, and below the target?")
for s in TIMED:
    last = [c.heldout_loss[-1][1] for c in streaming_curves_of(curves, s).values()]
    print(f"{s:17s} " + " ".join(f"{x:.3f}" for x in last)
          + f"   below in {sum(x <= target for x in last)} of {len(last)} seeds")
""")

    code("""
def timed(strategy):  # a round of the cluster run: data parallelism's step is one round
    name = TIMED[strategy]
    return (name, 1 if name == "data_parallel" else HC)


def lead(s, base, rate):  # base's time to the target over s's: step times × steps
    step_ratio = diloco_cluster_ratio(run, timed(base), timed(s), rate,
                                      lambda row: getattr(row, "step_s", None))
    ratios = [steps[base][i] / steps[s][i] for i in steps[s]]
    return step_ratio, min(ratios), max(ratios)


for s, base, rate in (("diloco", "dp_adamw", "50mbit"),
                      ("streaming_diloco", "diloco", "10mbit"),
                      ("streaming_diloco", "diloco_4bit", "10mbit")):
    t, low, high = lead(s, base, rate)
    print(f"{base}'s time to first reach the target over {s}'s at {rate_label(rate)}:")
    print(f"  step time {t.median:.2f}× [runs {t.low:.2f}–{t.high:.2f}] · steps "
          f"{low:.2f}–{high:.2f}× [seeds] = {t.low * low:.2f}–{t.high * high:.2f}×")
labels = {s: strategy_spec(s).label for s in TIMED}
plot_figure(wall_clock_figure_data(
    {labels[s]: [c.heldout_loss for c in streaming_curves_of(curves, s).values()]
     for s in TIMED},
    {r: {labels[s]: step_s(s, r) for s in TIMED} for r in RATES},
    target=target, titles={r: rate_label(r) for r in RATES}))
""")

    md("""
**Read.** A lead is a ratio of step times, set by the link (the cluster runs' range), times a
ratio of steps, set by the optimizer (each seed paired with itself). The held-out loss is the
synced parameters', which change only when a sync merges, so DiLoCo and Streaming DiLoCo reach
the target at a merge, and the steps above are those merges. DiLoCo needs more steps than data
parallelism: it gets there at its first sync, step H. Its steps cost so much less on a slow
link that it first gets there several times sooner. It does not stay there: its held-out loss
climbs back above the target in the later rounds (the end-of-run lines; step 21 read the same
rise as its outer Nesterov step overshooting). This page times first reaching the target, not
holding it. Streaming DiLoCo needs more steps still. Fragment f's first outer gradient holds
only the f · H/F steps since the start, and fragment 0's first one comes at step H and merges
τ later: at step H a quarter of every layer is still at its starting values. At 10 Mbit/s that
costs it less than DiLoCo's float32 sync waits and more than the 4-bit sync waits: against
DiLoCo with the same 4-bit syncs, fragments and overlap lost here, in every seed. At 1 Gbit/s
every step is mostly compute, and the steps decide.
""")
else:
    md("""
## Steps to the target

The held-out loss does not depend on the link: each curve was trained in one process from
three seeds (each draws the initial parameters and the minibatch order). The target is step
20's rule on data parallelism (AdamW); each seed's steps to it are interpolated.
""")

    code("""
target = streaming_target(curves)
print(f"target {target:.4f}; H = {curves.local_steps}; inner steps to it, by seed:")
for s in ("dp_adamw", "diloco", "diloco_int8", "diloco_4bit", "streaming_diloco"):
    k = streaming_steps_to_target(curves, s, target)
    print(f"  {s:17s} " + ", ".join(f"{v:5.1f}" for v in k.values()))
""")

    md("""
**Read.** DiLoCo's held-out loss moves only at its syncs (it is the synced parameters'): it
reaches the target at a sync, which the interpolation places in the round before. Streaming
DiLoCo's moves every H/F steps, a fragment at a time and half mixed; it needed more steps here. Which reaches the target sooner in seconds
is these steps times the step time on each link: the saved run of `course cluster --measure
diloco` was not in the package when this page was written, so the tables of time per inner
step against the round model, where overlap hides a sync, and time to the target at each rate
are left out until it is.
""")

md("""
## What this page did not measure

Nothing in this section was run here.

- **DeMo** (Peng et al. 2024, <https://arxiv.org/abs/2411.19870>) syncs every step, but only
  the fast-moving part of each replica's momentum (the top-k of a DCT of chunks), the rest kept
  as error feedback.
- **SparseLoCo** (Sarfi et al. 2025, <https://arxiv.org/abs/2508.15706>) keeps DiLoCo's loop and
  sends the outer gradient as top-k (1–3 % of values) in 2 bits, with error feedback standing
  in for the outer momentum.
- **NoLoCo** (Kolehmainen et al. 2025, <https://arxiv.org/abs/2506.10911>) drops the all-reduce:
  each replica averages with one random other, with a modified Nesterov step keeping the
  replicas close, so no sync waits for every replica.
- **Eager updates** (Kale et al. 2025, <https://arxiv.org/abs/2502.12996>) overlap the whole
  outer step with the next round, applying a replica's own outer gradient at once and the
  others' a round late; Streaming DiLoCo's τ overlaps one fragment's.
- **Latency.** This machine's links are rate-only (`tbf`, no `netem`: step 17), so latency is
  a model term here, not a measurement. Light in fibre covers about 200 km per millisecond, so
  sites 10,000 km apart are at least 50 ms apart one way: a ring all-reduce among R sites pays
  2(R − 1) such delays per sync, F times a round with F fragments, and a TCP stream sends at
  most one window per round trip, which caps its rate however fast the link. A sync hides only
  if τ steps outlast its latency too; more fragments pay it more often.

## Running it yourself

`course cluster --measure diloco` (as root, a few minutes) runs the quick plan and keeps
nothing; `--plan full --link-rate 10mbit,50mbit,200mbit,1gbit --runs 3` makes {RUN}, and
`python scripts/streaming_curves.py` the curves.
""".replace("{RUN}", "a run like the saved one" if CLUSTER else "the run the cells left out read"))

CAVEATS_CLUSTER = """
- The curves and the cluster run share H, F, τ and the rows per host and step (a test keeps
  them so); the curves' replicas are 2 devices of the one process, the cluster's hosts one
  compute device each.
- The curves are 3 rounds long. At 512 rows a replica, data parallelism's held-out loss stops
  falling after about 30 steps and then creeps up, and step 20's target (its seed-mean at 20 %
  of the run) must lie on its descent, where every seed crosses it: the run's length sets the
  target, and it was chosen for that.
- tbf lets an idle link send its bucket's bytes at the machine's speed. The cluster's links for
  this run get a bucket of 2 ms of their bytes (at least 16 KiB), not the 256 KiB of steps
  17–20: a 4-bit fragment (about 157 KB) would fit that and cross faster than the rate. At
  1 Gbit/s 2 ms of bytes is still more than a fragment, which there leaves at the machine's
  speed; there the link does not limit anyway.
- The hosts share this machine's two cores; the inner steps and the syncs compete for them.""" if CLUSTER else ""

md(f"""
## Check yourself

1. Why can a fragment's sync not overlap H/F or more inner steps here?

<details><summary>Answer</summary>

The next fragment is sent H/F steps later: with τ < H/F at most one is on its way, and each
merges before it is sent again. A fixed τ means the merge never waits for the clock.

</details>

2. A 4-bit sync sends 0.14 of f32's bytes. Why not 1/8?

<details><summary>Answer</summary>

Each block of 64 codes (32 bytes) travels with its 4-byte f32 scale: 36 bytes, not 256.

</details>

<details><summary>Method and caveats</summary>

- Int4 is symmetric with a scale per 64 values, where the paper sends E3M0 floats (a sign and 3
  exponent bits); which trains better here was not measured (`training/quantize.py`).
- The cells of the page's sync time nothing: in one process a collective is a memory copy.{CAVEATS_CLUSTER}

</details>
""")

code('print("PASS: 22_training_across_slow_links")')

nb = nbformat.v4.new_notebook()
nb.cells = cells
nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python",
                              "name": "python3"},
               "language_info": {"name": "python"}}
nbformat.write(nb, sys.argv[1])
print(sum(len(c.source) for c in cells if c.cell_type == "markdown"), "characters of markdown")
