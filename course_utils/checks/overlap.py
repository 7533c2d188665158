"""Step 19's self-check: the overlapped backward pass, each bucket's all-reduce dispatched on the
stream right after its gradient's program, checked on its values, its placement and the order
in which it dispatched the programs."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.helpers import call_without, fail, function_given, passed
from course_utils.collectives import overlap as ov

TOWER = ov.Tower(width=32, layers=4, rows=8)  # small: the check runs in a second


# How long the labels take to compute: while a loop only dispatches, its calls come milliseconds
# apart; a loop that reads a result waits about this long for it. A suspected wait is confirmed
# with labels ``_CONFIRM_S`` slow, so that a slow machine's pause is not taken for one.
_DELAY_S, _CONFIRM_S = 0.3, 2.0
_WAIT_SHARE = 0.5  # a pause of this share of the labels' time, or more, is a wait
_MIN_WAIT_S = 0.05


class _Misplaced(BaseException):
    """Raised through the student's code (past its ``except Exception``) when a gradient is
    sent from the wrong devices: ``args[0]`` says what to do."""


@dataclass
class _Log:
    """What the student's function dispatched, in order (``top``, ``backward``, ``send``, after
    a ``start`` when it was called) and when (``time.perf_counter()``), the layer of each
    backward program (the index of its weights in ``ws``, ``None`` for another array) and what
    each send returned."""

    calls: list[str] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    layers: list = field(default_factory=list)
    sent: list = field(default_factory=list)
    labels_s: float = 0.0  # how long the labels took, from their dispatch (``_Gate``)

    def wrap(self, name, fn):
        def logged(*args, **kwargs):
            self.calls.append(name)
            self.times.append(time.perf_counter())
            return fn(*args, **kwargs)

        return logged

    def waited(self) -> bool:
        """Whether two of the calls up to the last send came a pause apart that only a wait
        for a result explains: ``_WAIT_SHARE`` of the labels' time or more."""
        if "send" not in self.calls:
            return False
        last = len(self.calls) - 1 - self.calls[::-1].index("send")
        pauses = np.diff(self.times[:last + 1])
        return bool(pauses.size) and float(pauses.max()) >= max(_MIN_WAIT_S,
                                                                _WAIT_SHARE * self.labels_s)


class _Gate:
    """The labels ``y`` again, computed slowly on the compute devices (a loop of products that
    depend on them): every result of the student's loop depends on them, so a loop that reads
    one before it has dispatched everything (``np.asarray``, ``float``, ``print``,
    ``block_until_ready``) pauses until they are computed (``_Log.waited``). The loop's length is
    measured once, so that the delay is about the seconds asked on any machine; a thread records
    when the labels are ready. (A host callback that holds the labels until the loop returns
    says it at once, but from JAX 0.12.1 on the CPU client runs a program with a callback in the
    thread that dispatches it.)"""

    def __init__(self, compute: Mesh):
        def delay(a, steps):  # a again, after ``steps`` products that depend on it
            m = jnp.full((128, 128), 0.01 + 0 * jnp.sum(a))
            return a + 0 * jnp.sum(jax.lax.fori_loop(0, steps, lambda _, m: jnp.tanh(m @ m), m))

        rows = P("host", None)
        self.program = jax.jit(jax.shard_map(delay, mesh=compute, in_specs=(rows, P()),
                                             out_specs=rows))
        self.seconds_per_step = None

    def delayed(self, y, seconds: float, log: _Log):
        """``y`` again, ready about ``seconds`` after this call (dispatched, not waited for); a
        thread writes how long it took into ``log.labels_s``."""
        if self.seconds_per_step is None:
            jax.block_until_ready(self.program(y, 1))  # compiles
            start = time.perf_counter()
            jax.block_until_ready(self.program(y, 100))
            self.seconds_per_step = max((time.perf_counter() - start) / 100, 1e-6)
        start = time.perf_counter()
        labels = self.program(y, max(1, round(seconds / self.seconds_per_step)))

        def ready():
            jax.block_until_ready(labels)
            log.labels_s = time.perf_counter() - start

        self.thread = threading.Thread(target=ready, daemon=True)
        self.thread.start()
        return labels


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
    gate = _Gate(compute)
    stream_ids = {d.id for d in stream.devices.flat}
    forbidden = (ov.overlapped_backward, ov.serial_backward, ov.one_program_backward)
    package = jax.block_until_ready(ov.overlapped_backward(progs, hs, wss, ys))  # compiles

    def run(seconds: float):
        """The student's function on labels ready about ``seconds`` after it starts: its
        result and its log."""
        log = _Log()

        def backward(*args, **kwargs):
            w = args[3] if len(args) > 3 else kwargs.get("w")
            log.layers.append(next((i for i, v in enumerate(wss) if v is w), None))
            return progs.backward(*args, **kwargs)

        def all_reduce(grad):
            where = {d.id for d in getattr(getattr(grad, "sharding", None), "device_set", ())}
            if where != stream_ids:
                raise _Misplaced(f"progs.all_reduce got an array on devices {sorted(where)}; "
                                 f"it runs on the stream, devices {sorted(stream_ids)}: move "
                                 "each gradient there first, jax.device_put(grad, progs.stream)")
            log.sent.append(progs.all_reduce(grad))
            return log.sent[-1]

        logged = progs._replace(backward=log.wrap("backward", backward),
                                all_reduce=log.wrap("send", all_reduce),
                                top=log.wrap("top", progs.top))
        labels = gate.delayed(ys, seconds, log)
        log.calls.append("start")  # a wait before the first call is a pause too
        log.times.append(time.perf_counter())
        try:
            got = call_without(exercise, fn, (logged, hs, wss, labels), forbidden=forbidden,
                               refusal="my_overlapped_backward calls the package's {}: write "
                                       "the loop yourself with progs' programs",
                               call="my_overlapped_backward(progs, hs, ws, y)")
        except _Misplaced as misplaced:
            failure = str(misplaced)
        else:
            failure = None
        gate.thread.join()  # the labels' time, for log.waited
        if failure:  # outside the except: no traceback chained into the package
            fail(exercise, failure)
        return got, log

    got, log = run(_DELAY_S)
    if log.waited():  # confirmed with slower labels: a slow machine's pause is not a wait
        got, log = run(_CONFIRM_S)
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
    if log.waited():
        fail(exercise, "your loop waits for a result before the last program is dispatched "
                       "(np.asarray, float, print, jax.device_get and block_until_ready all "
                       "wait): nothing more is dispatched until it is computed, so the two "
                       "devices take turns. Dispatch everything, and let the caller wait")
