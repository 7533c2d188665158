"""Self-checks for steps 12 and 13: buckets, the two-level all-reduce."""

from __future__ import annotations

import traceback

import jax
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from course_utils.checks.forbidden import uses_forbidden
from course_utils.checks.helpers import (
    call_without,
    fail,
    function_given,
    not_verified,
    number,
    passed,
    tiled_hint,
)
from course_utils.collectives.hierarchy import hierarchical_all_reduce
from course_utils.collectives.kernels import Kernel
from course_utils.display import error_line
from course_utils.models.latency import bucketed_step_time, collective_time, plan_buckets
from course_utils.observe.ir import collectives_in


def check_bucket_model(model) -> None:
    """Exercise 12: ``model(sizes, bucket_bytes, ranks, alpha_s, bandwidth_bytes_per_s,
    backward_s)``, the bucketed step-time recurrence, compared with ``bucketed_step_time`` on
    models the notebook never shows; calling the package's copy is refused."""
    exercise = "bucketed step time"
    function_given(exercise, "my_step_time", model)
    rng = np.random.default_rng(1212)
    cases = []
    for ranks, alpha_s, bandwidth, backward_s in [(8, 2e-5, 2e9, 0.004), (32, 1e-4, 1e10, 0.03),
                                                  (4, 1e-6, 5e8, 0.002)]:
        sizes = [int(v) for v in 2 ** rng.integers(12, 22, size=int(rng.integers(20, 60)))]
        for bucket in (2**14, 2**19, 2**23, sum(sizes)):
            cases.append((sizes, bucket, ranks, alpha_s, bandwidth, backward_s))
    for args in cases:
        got = number(call_without(
            exercise, model, args, forbidden=[bucketed_step_time],
            refusal="my_step_time uses the package's {0}: write the recurrence yourself "
                    "(plan_buckets and collective_time are allowed)",
            call="my_step_time(sizes, bucket_bytes, ranks, alpha_s, bandwidth_bytes_per_s, "
                 "backward_s)"))
        if got is None:
            fail(exercise, "my_step_time must return one number, the step time in seconds")
        expected = bucketed_step_time(args[0], args[1], ranks=args[2], alpha_s=args[3],
                                      bandwidth_bytes_per_s=args[4], backward_s=args[5])
        if not np.isclose(got, expected, rtol=1e-6, atol=0):
            why = _bucket_model_slip(got, expected, *args, model=model)
            fail(exercise, f"{why} (a model of {len(args[0])} gradients, bucket {args[1]} bytes, "
                           f"{args[2]} ranks)")
    passed(exercise, f"the recurrence matches the package's model on {len(cases)} new models")


def _bucket_model_slip(got, expected, sizes, bucket, ranks, alpha_s, bandwidth, backward_s, *,
                       model=None):
    """The likely mistake behind a wrong modelled step time, said without the formula: each
    variant of the recurrence a slip gives is run, and the first that matches names the slip;
    then the arguments ``model`` does not read (its time the same when one doubles)."""
    from course_utils.models.cost_model import ALGORITHMS

    total = sum(sizes)

    def variant(*, ready_by="bytes", start="later", algorithm="ring", wait_backward=True,
                size="bytes", ranks_given=ranks, alpha_once=False):
        ready = finished = 0.0
        produced = count = 0
        for b in plan_buckets(sizes, bucket):
            nbytes = sum(sizes[i] for i in b)
            before = produced  # the bytes produced before this bucket's gradients
            produced, count = produced + nbytes, count + len(b)
            share = {"bytes": produced / total, "count": count / len(sizes),
                     "first": (before + sizes[b[0]]) / total,
                     "start": (produced - sizes[b[-1]]) / total}[ready_by]
            ready = backward_s * share
            begin = {"later": max(ready, finished), "sum": ready + finished,
                     "ready": ready, "finished": finished}[start]
            sent = {"bytes": nbytes, "bits": 8 * nbytes, "cap": bucket, "count": len(b)}[size]
            finished = begin + collective_time(sent, ranks_given,
                                               alpha_s=0.0 if alpha_once else alpha_s,
                                               bandwidth_bytes_per_s=bandwidth,
                                               algorithm=algorithm) + alpha_once * alpha_s
        return max(finished, backward_s) if wait_backward else finished

    others = [a for a in ALGORITHMS if a != "ring"]
    slips = [
        (1e3 * expected, "your time is in milliseconds: return seconds"),
        (1e6 * expected, "your time is in microseconds: return seconds"),
        (variant(size="bits"), "collective_time takes the bucket's size in bytes, not bits"),
        (variant(size="cap"), "a bucket's all-reduce sends the bytes of the gradients in it "
         "(the sum of their sizes), not bucket_bytes, the most a bucket may hold"),
        (variant(size="count"), "collective_time takes the bucket's bytes (the sum of its "
         "gradients' sizes), not how many gradients it holds (len(bucket))"),
        (variant(ready_by="first"), "a bucket can start only when its LAST gradient is ready, "
         "not its first"),
        (variant(ready_by="start"), "a gradient is ready once it has been produced: count its "
         "own bytes in the bytes produced so far"),
        (variant(alpha_once=True), "a ring all-reduce pays α at each of its 2(p − 1) message "
         "steps, not once per all-reduce (collective_time counts them for you)"),
        (variant(ranks_given=ranks - 1), "pass collective_time the number of ranks, ranks, not "
         "ranks - 1 (the model counts the ring's p - 1 steps itself)"),
        (variant(ready_by="count"), "a bucket's last gradient is ready in proportion to the "
         "bytes produced so far (backward_s × bytes so far / all bytes), not to the number of "
         "gradients"),
        (variant(start="sum"), "a bucket starts at the later of two times, when its last "
         "gradient is ready and when the previous all-reduce is done, not after both added up"),
        (variant(start="ready"), "a bucket also waits for the previous bucket's all-reduce: "
         "one all-reduce at a time"),
        (variant(start="finished"), "a bucket also waits for its last gradient to be ready"),
        (backward_s + variant(start="finished", wait_backward=False), "no all-reduce overlaps "
         "the backward pass in yours: a bucket can start as soon as its last gradient is "
         "ready, while the backward pass goes on"),
        *((variant(algorithm=a), f"each bucket's all-reduce is timed as the ring "
           f"(collective_time(..., algorithm=\"ring\")), not as {a}") for a in others),
    ]
    for value, why in slips:
        if np.isclose(got, value, rtol=1e-6):
            return why
    args = (sizes, bucket, ranks, alpha_s, bandwidth, backward_s)
    if model is not None and (unread := _unread_arguments(model, args, got)):
        return unread
    return ("too short" if got < expected else "too long") + (
        ": follow each bucket in order: its last gradient's ready time, its start (the later of "
        "that and the previous all-reduce's end), its end (start + its all-reduce's time)")


# the arguments of exercise 12's model that a student may leave for the notebook's own numbers
_MODEL_ARGUMENTS = ((2, "ranks", "RANKS"), (3, "alpha_s", "ALPHA_S"),
                    (4, "bandwidth_bytes_per_s", "LINK_BYTES_PER_S"), (5, "backward_s", ""))


def _unread_arguments(model, args: tuple, got: float) -> str:
    """What to say when ``model``'s time stays the same with one of its arguments doubled while
    the right time changes (the notebook's number used instead), or ``""``."""
    unread, shown = [], 0
    right = bucketed_step_time(args[0], args[1], ranks=args[2], alpha_s=args[3],
                               bandwidth_bytes_per_s=args[4], backward_s=args[5])
    for index, name, notebook in _MODEL_ARGUMENTS:
        other = tuple(2 * v if k == index else v for k, v in enumerate(args))
        if np.isclose(right, bucketed_step_time(other[0], other[1], ranks=other[2],
                                                alpha_s=other[3], bandwidth_bytes_per_s=other[4],
                                                backward_s=other[5]), rtol=1e-9):
            continue  # the right time does not show this argument here either
        shown += 1
        try:  # a probe only: the call with the case's own arguments already ran
            again = number(model(*other))
        except Exception:  # noqa: BLE001 - a probe that fails names nothing
            continue
        if again is not None and np.isclose(again, got, rtol=1e-12):
            unread.append((name, notebook))
    if not unread or len(unread) == shown:  # none read: a number typed in, not one global
        return ""
    names = " and ".join(name for name, _ in unread)
    globals_ = [notebook for _, notebook in unread if notebook]
    instead = (f"not the notebook's {' and '.join(globals_)}" if globals_ else
               "not the notebook's numbers")
    return (f"your time does not change with the argument{'s' if len(unread) > 1 else ''} "
            f"{names}: use the arguments, {instead}")


class _NotAVector(Exception):
    """The student's function returned a tuple or list (raised while tracing, caught below)."""


def _two_level_kernel(fn, mesh: Mesh):
    spec = P(("node", "local"), None)

    def per_device(b):
        out = fn(b[0])
        if isinstance(out, (tuple, list)):
            raise _NotAVector(f"a {type(out).__name__} of {len(out)}")
        return out[None]

    return jax.jit(jax.shard_map(per_device, mesh=mesh, in_specs=spec, out_specs=spec))


def _wrong_sum_hint(got: np.ndarray, blocks: np.ndarray, nodes: int, local: int) -> str:
    """The likely mistake behind a wrong sum on some device, or a generic line."""
    total = blocks.sum(axis=0)
    node_sums = blocks.reshape(nodes, local, -1).sum(axis=1)
    p = nodes * local
    close = lambda a, b: np.allclose(a, b, rtol=1e-4, atol=1e-4)  # noqa: E731
    if nodes > 1 and close(got, total / nodes):
        return ("every device holds the sum divided by the number of nodes: that is a mean "
                "across the nodes; use jax.lax.psum over 'node', not pmean")
    if close(got, total / p) or (local > 1 and close(got, total / local)):
        return "every device holds a mean, not the sum: use psum and psum_scatter, not pmean"
    if nodes > 1 and close(got, np.repeat(node_sums, local, axis=0)):
        return ("every device holds its own node's sum only: the all-reduce across the nodes "
                "(jax.lax.psum over 'node') is missing")
    mine = total.reshape(local, -1)  # slice j: what device j of every node holds after crossing
    if nodes > 1 and close(got, np.stack([np.tile(mine[d % local], local) for d in range(p)])):
        return ("every device holds its own slice of the sum, repeated: the all-gather collects "
                "from the other nodes, which hold the same slice; gather inside the node "
                "('local'), where each device holds another slice")
    return "every device must end with the sum over all devices of all nodes"


_TWO_LEVEL_REFUSAL = ("my_two_level uses the package's hierarchical_all_reduce (or a kernel it "
                      "built, such as two_level), the answer: write the three collectives yourself")


def _through_hierarchy(error: BaseException) -> bool:
    """Whether ``error`` was raised inside a package kernel (the student called ``two_level``)."""
    return any(f.filename.endswith(("collectives/hierarchy.py", "collectives/kernels.py"))
               for f in traceback.extract_tb(error.__traceback__))


def check_two_level(fn, mesh: Mesh) -> None:
    """Exercise 13: ``fn(x)``, this device's f32[m] → the all-reduced f32[m], in two levels on a
    ``("node", "local")`` mesh: checked on every device against a flat ``psum`` and through the
    compiled program's collectives and their device groups. With nodes of one device (or one
    node) the two schedules are the same program: the sum is checked, the schedule is not, and
    the check says so instead of printing PASSED."""
    exercise = "two-level all-reduce"
    function_given(exercise, "my_two_level", fn)
    if isinstance(fn, Kernel) or uses_forbidden(fn, [hierarchical_all_reduce]) is not None:
        fail(exercise, _TWO_LEVEL_REFUSAL)
    nodes, local = mesh.shape["node"], mesh.shape["local"]
    p = nodes * local
    blocks = np.random.default_rng(13).standard_normal((p, 4 * local)).astype(np.float32)
    kernel = _two_level_kernel(fn, mesh)
    try:
        got = np.asarray(kernel(blocks))
    except _NotAVector as what:
        fail(exercise, f"my_two_level returns {what}; return one array, this device's whole "
                        "sum f32[m] (the all_gather's result), not a tuple")
    except Exception as error:  # noqa: BLE001 - the student's function failed: say how, in a line
        text = str(error)
        if _through_hierarchy(error):
            fail(exercise, _TWO_LEVEL_REFUSAL)
        if "context mesh" in text or ("mesh" in text and hasattr(fn, "__wrapped__")):
            fail(exercise, "my_two_level must be the function ONE device runs, x: f32[m] → "
                            "f32[m], written with jax.lax collectives; the check puts it in "
                            "jax.shard_map on the mesh itself: pass the plain function, not a "
                            f"jax.shard_map (or jax.jit) of it ({error_line(error)})")
        dims = ("; x is this device's 1-D vector here, f32[m]: its only dimension is 0 "
                "(scatter_dimension and axis keep their default)"
                if ("tuple index" in text or "out of bounds for array of dimension" in text)
                else "")
        fail(exercise, f"running my_two_level on every device raised {error_line(error)}"
                        f"{tiled_hint(error, 'local')}{dims}")
    if got.ndim != 2:
        fail(exercise, f"my_two_level must return a vector, f32[m]; yours returns shape "
                        f"{got.shape[1:]} on each device (all_gather with tiled=True lays the "
                        "slices end to end)")
    expected = np.tile(blocks.sum(axis=0), (p, 1))
    if got.shape != expected.shape:
        fail(exercise, f"each device should end with the whole vector, {blocks.shape[1]} values;"
                        f" yours end with {got.shape[1]} (did you all-gather inside the node?)")
    wrong = [d for d in range(p) if not np.allclose(got[d], expected[d], rtol=1e-4, atol=1e-4)]
    if wrong:
        fail(exercise, f"the sum is wrong on device(s) {wrong}: "
                        f"{_wrong_sum_hint(got, blocks, nodes, local)}")
    if local < 2 or nodes < 2:
        not_verified(exercise, f"the sum is right on every device, but on {nodes} node(s) of "
                     f"{local} device(s) a two-level schedule and a flat psum are the same "
                     "program, so the schedule cannot be checked; run with N_DEVICES = 4, 6 or 8")
        return
    node_groups = [list(range(n * local, (n + 1) * local)) for n in range(nodes)]
    across = [list(range(i, p, local)) for i in range(local)]
    program = collectives_in(kernel, blocks).hlo
    ops = [(o.op, o.replica_groups) for o in program]
    everyone = [[list(range(p))], []]
    if any(op == "all-reduce" and groups in everyone for op, groups in ops):
        fail(exercise, "the right sum, but through one all-reduce over all devices: that is "
                        "the flat schedule; use the axes 'local' and 'node' one at a time")
    if (not any(op == "reduce-scatter" and groups == node_groups for op, groups in ops)
            and any(op == "reduce-scatter" and groups == across for op, groups in ops)):
        fail(exercise, "the right sum, but your psum_scatter runs across the nodes ('node') and "
                        "the rest inside them: the axes are swapped, so each device's slice "
                        "crosses the network; reduce-scatter over 'local' first")
    if not any(op == "reduce-scatter" and groups == node_groups for op, groups in ops):
        fail(exercise, "the right sum, but nothing is reduce-scattered inside the nodes, so "
                        "each device sends its whole vector across the network; start with "
                        "jax.lax.psum_scatter over 'local'")
    if not any(op == "all-reduce" and groups == across for op, groups in ops):
        fail(exercise, "the right sum, but no all-reduce across the nodes on the slices; "
                        "all-reduce each device's slice over 'node'")
    slice_bytes = 4 * blocks.shape[1] // local
    crossing = [o.bytes for o in program
                if o.op == "all-reduce" and o.replica_groups == across]
    if len(crossing) > 1:
        fail(exercise, f"the right sum, but {len(crossing)} all-reduces cross the nodes, each "
                        "sending the slice over the network again: one psum over 'node' is the "
                        "schedule")
    if max(crossing) > slice_bytes:
        fail(exercise, f"the right sum, but the all-reduce across the nodes carries "
                        f"{max(crossing) // slice_bytes}× a slice per device: reduce-scatter "
                        "inside the node before crossing, so only 1/local of the vector does")
    passed(exercise, f"reduce-scatter in {nodes} nodes of {local}, all-reduce across the nodes"
                      ", all-gather in the nodes")
