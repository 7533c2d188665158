"""Step 19's self-check: the overlapped backward pass, each bucket's all-reduce dispatched on the
stream right after its gradient's program, checked on its values, its placement and the order
in which it dispatched the programs."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.helpers import call_without, fail, function_given, passed
from course_utils.collectives import overlap as ov

TOWER = ov.Tower(width=32, layers=4, rows=8)  # small: the check runs in a second


# How long the check holds the labels back: a loop that waits for a result waits this long
_GATE_S = 5.0


class _Misplaced(BaseException):
    """Raised through the student's code (past its ``except Exception``) when a gradient is
    sent from the wrong devices: ``args[0]`` says what to do."""


@dataclass
class _Log:
    """What the student's function dispatched, in order (``top``, ``backward``, ``send``, and
    ``held`` when the gate gave up waiting), the layer of each backward program (the index of
    its weights in ``ws``, ``None`` for another array) and what each send returned."""

    calls: list[str] = field(default_factory=list)
    layers: list = field(default_factory=list)
    sent: list = field(default_factory=list)

    def wrap(self, name, fn):
        def logged(*args, **kwargs):
            self.calls.append(name)
            return fn(*args, **kwargs)

        return logged


class _Gate:
    """The labels ``y``, held on the compute devices (a callback inside the program) until the
    student's function returns: every result depends on them, so a loop that reads one before it
    has dispatched everything (``np.asarray``, ``float``, ``print``, ``block_until_ready``) waits
    here, and after ``_GATE_S`` the gate logs ``held`` and lets it go on."""

    def __init__(self, compute: Mesh, log: _Log):
        self.opened, self.log = threading.Event(), log

        def hold(a):
            if not self.opened.wait(_GATE_S):
                log.calls.append("held")
            return a

        def body(a):
            return jax.pure_callback(hold, jax.ShapeDtypeStruct(a.shape, a.dtype), a)

        def delay(a):  # a again, after about 0.1 s of products that depend on it
            m = jnp.full((128, 128), 0.01 + 0 * jnp.sum(a))
            return a + 0 * jnp.sum(jax.lax.fori_loop(0, 300, lambda _, m: jnp.tanh(m @ m), m))

        rows = P("host", None)
        self.program, self.delay = (
            jax.jit(jax.shard_map(f, mesh=compute, in_specs=rows, out_specs=rows))
            for f in (body, delay))

    def held(self, y):
        """``y`` again, computed only once the gate is opened (the programs compiled first).
        The gate's input comes from ``delay``, so it is not ready when the gate is dispatched:
        the CPU client then queues the gate (a one-device program with a callback and ready
        inputs runs in the calling thread, which the gate would hold)."""
        self.opened.set()
        jax.block_until_ready(self.program(self.delay(y)))
        self.opened.clear()
        y = self.program(self.delay(y))
        if "held" in self.log.calls:  # it ran in this thread after all: no wait can be told
            self.log.calls.remove("held")
        return y


def check_overlapped_backward(fn, mesh: Mesh) -> None:
    """Exercise 19: ``fn(progs, hs, ws, y)`` → every layer's all-reduced gradient, first layer
    first, each dispatched on the stream (``progs.all_reduce`` of the gradient moved with
    ``jax.device_put(grad, progs.stream)``) right after its ``progs.backward``, nothing waited
    for before the last is dispatched; compared with ``jax.grad`` of the whole loss and with
    the package's copy."""
    exercise = "the overlapped backward pass"
    function_given(exercise, "my_overlapped_backward", fn)
    compute, stream = ov.stream_meshes(mesh)
    x, y, ws = ov.tower_problem(TOWER, compute.size, seed=3)
    rows = P("host", None)
    xs, ys = (jax.device_put(a, NamedSharding(compute, rows)) for a in (x, y))
    wss = [jax.device_put(w, NamedSharding(compute, P())) for w in ws]
    progs = ov.programs(compute, stream, len(x))
    hs = progs.forward(wss, xs)
    log = _Log()
    gate = _Gate(compute, log)
    stream_ids = {d.id for d in stream.devices.flat}

    def backward(*args, **kwargs):
        w = args[3] if len(args) > 3 else kwargs.get("w")
        log.layers.append(next((i for i, v in enumerate(wss) if v is w), None))
        return progs.backward(*args, **kwargs)

    def all_reduce(grad):
        where = {d.id for d in getattr(getattr(grad, "sharding", None), "device_set", ())}
        if where != stream_ids:
            raise _Misplaced(f"progs.all_reduce got an array on devices {sorted(where)}; it "
                             f"runs on the stream, devices {sorted(stream_ids)}: move each "
                             "gradient there first, jax.device_put(grad, progs.stream)")
        log.sent.append(progs.all_reduce(grad))
        return log.sent[-1]

    logged = progs._replace(backward=log.wrap("backward", backward),
                            all_reduce=log.wrap("send", all_reduce),
                            top=log.wrap("top", progs.top))
    forbidden = (ov.overlapped_backward, ov.serial_backward, ov.one_program_backward)
    package = jax.block_until_ready(ov.overlapped_backward(progs, hs, wss, ys))  # compiles
    held = gate.held(ys)
    try:
        got = call_without(exercise, fn, (logged, hs, wss, held), forbidden=forbidden,
                           refusal="my_overlapped_backward calls the package's {}: write "
                                   "the loop yourself with progs' programs",
                           call="my_overlapped_backward(progs, hs, ws, y)")
    except _Misplaced as misplaced:
        failure = str(misplaced)
    else:
        failure = None
    finally:
        gate.opened.set()
    if failure:
        fail(exercise, failure)
    if not isinstance(got, (list, tuple)) or len(got) != TOWER.layers:
        fail(exercise, f"return a list of {TOWER.layers} gradients, one per layer (this check's "
                       f"tower has {TOWER.layers} layers), first layer first; got "
                       f"{type(got).__name__}" + (f" of {len(got)}" if hasattr(got, "__len__")
                                                  else ""))
    _check_order(exercise, log)
    want = [np.asarray(g) for g in jax.grad(ov.tower_loss)(ws, x, y)]
    for i, g in enumerate(got):
        if not isinstance(g, jax.Array):
            fail(exercise, f"gradient {i} is a {type(g).__module__}.{type(g).__name__}: return "
                           "progs.all_reduce's results themselves (JAX arrays on the stream)")
        if g.shape != want[i].shape:
            fail(exercise, f"gradient {i} should be one array f32{list(want[i].shape)}, the "
                           f"whole sum (progs.all_reduce's result); got {g.shape}")
        where = sorted(d.id for d in g.sharding.device_set)
        if set(where) != stream_ids:
            fail(exercise, f"gradient {i} lies on devices {where}; the all-reduced sum lies "
                           f"whole on each host's stream device, {sorted(stream_ids)}")
        if not g.sharding.is_fully_replicated:
            fail(exercise, f"gradient {i} is split over devices {where}; the all-reduced sum "
                           "lies whole on each of them: return progs.all_reduce's result as "
                           "it is")
    if TOWER.layers > 1 and all(g is s for g, s in zip(got, log.sent)):
        fail(exercise, "your list is last layer first (the order the backward pass makes "
                       "them): return it first layer first, as jax.grad does")
    layer_of = {id(s): TOWER.layers - 1 - j for j, s in enumerate(log.sent)}
    for i, g in enumerate(got):
        if layer_of.get(id(g), i) != i:
            fail(exercise, f"gradient {i} is layer {layer_of[id(g)]}'s all-reduce: return each "
                           "layer's own, once, first layer first")
    values = [np.asarray(g) for g in got]
    for i, (v, w) in enumerate(zip(values, want)):
        if not np.allclose(v, w, rtol=1e-4, atol=1e-6):
            fail(exercise, f"layer {i}'s gradient differs from jax.grad of the whole loss (by "
                           f"up to {np.abs(v - w).max():.3g}): send each layer's own gradient, "
                           "progs.backward's first result, and pass its second on to the next "
                           "layer down")
    for i, (g, s) in enumerate(zip(got, log.sent[::-1])):
        if g is not s:
            fail(exercise, f"gradient {i} is not what progs.all_reduce returned for layer {i}: "
                           "return the all-reduced results themselves, first layer first")
    same = all(np.array_equal(v, np.asarray(p)) for v, p in zip(values, package))
    passed(exercise, f"{TOWER.layers} buckets, each sent right after its gradient; "
                     + ("equal to the package's copy" if same else
                        "within float rounding of the package's copy"))


def _check_order(exercise: str, log: _Log) -> None:
    """Fail unless the programs went out as top, then backward, send, backward, send, …, the
    layers from the last down, nothing waited for before the last send."""
    calls = log.calls
    sends, backwards = calls.count("send"), calls.count("backward")
    if sends == 0:
        fail(exercise, "nothing went through progs.all_reduce: send each layer's gradient with "
                       "it, after moving the gradient to progs.stream (the check sees only "
                       "progs' programs, not an all-reduce of your own such as the page's)")
    if backwards != TOWER.layers or sends != TOWER.layers:
        fail(exercise, f"call progs.backward once per layer and progs.all_reduce once per "
                       f"bucket ({TOWER.layers} each here); yours called them {backwards} and "
                       f"{sends} times")
    if None not in log.layers and log.layers != list(range(TOWER.layers))[::-1]:
        fail(exercise, "the backward pass starts at the top: progs.top gives the last layer's "
                       "output gradient, so go from the last layer (ws[-1]) down to the first "
                       f"(yours went through layers {log.layers})")
    work = [c for c in calls if c in ("backward", "send")]
    if work.index("send") == TOWER.layers:
        fail(exercise, "that is the schedule one after the other: nothing is sent until the "
                       "backward pass ends. Dispatch each bucket's all-reduce right after its "
                       "backward program, inside the loop")
    if work != ["backward", "send"] * TOWER.layers:
        fail(exercise, "send each bucket as soon as its gradient's program is dispatched, "
                       "before the next layer's backward program")
    last_send = len(calls) - 1 - calls[::-1].index("send")
    if "held" in calls[:last_send]:
        fail(exercise, "your loop waits for a result before the last program is dispatched "
                       "(np.asarray, float, print, jax.device_get and block_until_ready all "
                       "wait): nothing more is dispatched until it is computed, so the two "
                       "devices take turns. Dispatch everything, and let the caller wait")
