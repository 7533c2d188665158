"""Step 19's self-check: the overlapped backward pass, each bucket's all-reduce dispatched on the
stream right after its gradient's program, checked on its values, its placement and the order
in which it dispatched the programs."""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.checks.helpers import call_without, fail, function_given, passed
from course_utils.collectives import overlap as ov

TOWER = ov.Tower(width=32, layers=4, rows=8)  # small: the check runs in a second


class _Misplaced(BaseException):
    """Raised through the student's code (past its ``except Exception``) when a gradient is
    sent from the wrong devices: ``args[0]`` says what to do."""


@dataclass
class _Log:
    """What the student's function dispatched, in order: ``backward``, ``send`` or ``wait``."""

    calls: list[str] = field(default_factory=list)

    def wrap(self, name, fn):
        def logged(*args, **kwargs):
            self.calls.append(name)
            return fn(*args, **kwargs)

        return logged


def _waits_logged(log: _Log, sample):
    """Context: ``jax.block_until_ready`` and the arrays' ``block_until_ready`` log a wait."""
    import contextlib

    kind = type(sample)

    @contextlib.contextmanager
    def patched():
        function, method = jax.block_until_ready, kind.block_until_ready
        jax.block_until_ready = log.wrap("wait", function)
        kind.block_until_ready = log.wrap("wait", method)
        try:
            yield
        finally:
            jax.block_until_ready, kind.block_until_ready = function, method

    return patched()


def check_overlapped_backward(fn, mesh: Mesh) -> None:
    """Exercise 19: ``fn(progs, hs, ws, y)`` → every layer's all-reduced gradient, first layer
    first, each dispatched on the stream (``progs.all_reduce`` of the gradient moved with
    ``jax.device_put(grad, progs.stream)``) right after its ``progs.backward``, nothing waited
    for; compared with ``jax.grad`` of the whole loss and with the package's copy."""
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
    stream_ids = {d.id for d in stream.devices.flat}

    def all_reduce(grad):
        where = {d.id for d in getattr(getattr(grad, "sharding", None), "device_set", ())}
        if where != stream_ids:
            raise _Misplaced(f"progs.all_reduce got an array on devices {sorted(where)}; it "
                             f"runs on the stream, devices {sorted(stream_ids)}: move each "
                             "gradient there first, jax.device_put(grad, progs.stream)")
        return progs.all_reduce(grad)

    logged = progs._replace(backward=log.wrap("backward", progs.backward),
                            all_reduce=log.wrap("send", all_reduce),
                            top=log.wrap("top", progs.top))
    forbidden = (ov.overlapped_backward, ov.serial_backward, ov.one_program_backward)
    try:
        with _waits_logged(log, xs):
            got = call_without(exercise, fn, (logged, hs, wss, ys), forbidden=forbidden,
                               refusal="my_overlapped_backward calls the package's {}: write "
                                       "the loop yourself with progs' programs",
                               call="my_overlapped_backward(progs, hs, ws, y)")
    except _Misplaced as misplaced:
        failure = str(misplaced)
    else:
        failure = None
    if failure:
        fail(exercise, failure)
    if not isinstance(got, (list, tuple)) or len(got) != TOWER.layers:
        fail(exercise, f"return a list of {TOWER.layers} gradients, one per layer (this check's "
                       f"tower has {TOWER.layers} layers), first layer first; got "
                       f"{type(got).__name__}" + (f" of {len(got)}" if hasattr(got, "__len__")
                                                  else ""))
    _check_order(exercise, log.calls)
    want = [np.asarray(g) for g in jax.grad(ov.tower_loss)(ws, x, y)]
    for i, g in enumerate(got):
        if not isinstance(g, jax.Array) or g.shape != want[i].shape:
            fail(exercise, f"gradient {i} should be one array f32{list(want[i].shape)}, the "
                           f"whole sum (progs.all_reduce's result); got "
                           f"{getattr(g, 'shape', type(g).__name__)}")
        if {d.id for d in g.sharding.device_set} != stream_ids or not (
                g.sharding.is_fully_replicated):
            fail(exercise, f"gradient {i} lies on devices "
                           f"{sorted(d.id for d in g.sharding.device_set)}; the all-reduced "
                           f"sum lies whole on each host's stream device, {sorted(stream_ids)}")
    values = [np.asarray(g) for g in got]
    if all(np.allclose(v, w, rtol=1e-4, atol=1e-6) for v, w in zip(values[::-1], want)) and (
            not np.allclose(values[0], want[0], rtol=1e-4, atol=1e-6)):
        fail(exercise, "your list is last layer first (the order the backward pass makes "
                       "them): return it first layer first, as jax.grad does")
    for i, (v, w) in enumerate(zip(values, want)):
        if not np.allclose(v, w, rtol=1e-4, atol=1e-6):
            fail(exercise, f"layer {i}'s gradient differs from jax.grad of the whole loss (by "
                           f"up to {np.abs(v - w).max():.3g}): send each layer's own gradient, "
                           "progs.backward's first result, and pass its second on to the next "
                           "layer down")
    package = ov.overlapped_backward(progs, hs, wss, ys)
    same = all(np.array_equal(v, np.asarray(p)) for v, p in zip(values, package))
    passed(exercise, f"{TOWER.layers} buckets, each sent right after its gradient; equal to "
                     f"the package's copy: {same}")


def _check_order(exercise: str, calls: list[str]) -> None:
    """Fail unless the programs went out as top, then backward, send, backward, send, …"""
    sends, backwards = calls.count("send"), calls.count("backward")
    if sends == 0:
        fail(exercise, "nothing was all-reduced: send each layer's gradient with "
                       "progs.all_reduce (after moving it to the stream)")
    if backwards != TOWER.layers or sends != TOWER.layers:
        fail(exercise, f"call progs.backward once per layer and progs.all_reduce once per "
                       f"bucket ({TOWER.layers} each here); yours called them {backwards} and "
                       f"{sends} times")
    work = [c for c in calls if c in ("backward", "send")]
    if work.index("send") == TOWER.layers:
        fail(exercise, "that is the schedule one after the other: nothing is sent until the "
                       "backward pass ends. Dispatch each bucket's all-reduce right after its "
                       "backward program, inside the loop")
    if work != ["backward", "send"] * TOWER.layers:
        fail(exercise, "send each bucket as soon as its gradient's program is dispatched, "
                       "before the next layer's backward program")
    last_send = len(calls) - 1 - calls[::-1].index("send")
    if "wait" in calls[:last_send]:
        fail(exercise, "your loop waits for a result (block_until_ready) before the last "
                       "program is dispatched: the compute device then idles while the bucket "
                       "is sent. Dispatch everything, and let the caller wait")
