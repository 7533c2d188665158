"""Each self-check passes the reference answer and names what is wrong in typical wrong answers."""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils import (
    all_gather_shards,
    all_reduce_gradient,
    data_mesh,
    local_contribution,
    placements,
    reduce_scatter_gradient,
    reference_gradient,
    toy_regression,
)
from course_utils.checks import (
    ExerciseFailed,
    check_clipped_step,
    check_joint_permutation,
    check_largest_gradient,
    check_predicted_shard_shapes,
)
from course_utils.checks.budget import _crossing
from course_utils.checks.forbidden import uses_forbidden
from course_utils.checks.updates import _unnamed


@pytest.fixture(scope="module")
def setup():
    mesh = data_mesh()
    rows, replicated, sliced = placements(mesh)
    xh, yh, wh = toy_regression()
    placed = jax.device_put(xh, rows), jax.device_put(yh, sliced), jax.device_put(wh, replicated)
    return mesh, (rows, replicated, sliced), (xh, yh, wh), placed


def _right_shares(x, y, w, p):
    n = x.shape[0]
    return np.stack([2 * xb.T @ (xb @ w - yb) / n for xb, yb in zip(np.split(x, p),
                                                                    np.split(y, p))])


def test_a_forbidden_function_imported_inside_the_answer_is_named():
    """``from course_utils import x`` in the function's body names x as much as a global does
    (a student's second round found it passed); an unrelated import does not."""
    from course_utils.models.step import break_even_bits
    from course_utils.training.local import local_sgd_bytes

    def inner_from_module(*args):
        from course_utils.training.local import local_sgd_bytes
        return local_sgd_bytes(*args)

    def inner_from_package(*args):
        from course_utils import break_even_bits
        return break_even_bits(*args)

    def inner_alias(*args):
        import course_utils as cu
        return cu.break_even_bits(*args)

    def own(*args):
        from course_utils import format_bytes
        return format_bytes(args[0])

    assert uses_forbidden(inner_from_module, [local_sgd_bytes]) == "local_sgd_bytes"
    assert uses_forbidden(inner_from_package, [break_even_bits]) == "break_even_bits"
    assert uses_forbidden(inner_alias, [break_even_bits]) == "break_even_bits"
    assert uses_forbidden(own, [break_even_bits, local_sgd_bytes]) is None


def test_a_forbidden_function_read_at_the_call_site_is_named():
    """A notebook's ``cu.ring_payload(...)`` and ``cu.overlap_runs.modelled(...)`` name the
    function as a bare ``ring_payload(...)`` did, loaded already or only through the facade's
    lazy names (the package's cache of them emptied)."""
    import course_utils as cu
    from course_utils.checks.forbidden import public_name
    from course_utils.observe.ir import ring_payload
    from course_utils.results.overlap import modelled

    notebook = {"cu": cu}
    exec("def bare(*a):\n    return cu.ring_payload(*a)\n"
         "def spaced(*a):\n    return cu.overlap_runs.modelled(*a)\n"
         "def own(*a):\n    return cu.format_bytes(a[0])\n", notebook)
    for cached in (True, False):
        if not cached:
            for name in ("ring_payload", "overlap_runs", "format_bytes"):
                vars(cu).pop(name, None)
        assert uses_forbidden(notebook["bare"], [ring_payload]) == "ring_payload"
        assert uses_forbidden(notebook["spaced"], [modelled]) == "modelled"
        assert uses_forbidden(notebook["own"], [ring_payload, modelled]) is None
    assert (public_name(ring_payload), public_name(modelled)) == (
        "ring_payload", "overlap_runs.modelled")
    assert public_name(_crossing) == "_crossing"  # not public: its own name


# the routes a student trial took to a forbidden function (issue 52): each one is named
TRIAL_ROUTES = {
    "a default argument": "def f(sizes, b, r, a, bw, s, _f=bucketed_step_time):\n"
                          "    return _f(sizes, b, r, a, bw, s)\n",
    "a keyword-only default": "def f(*a, _f=bucketed_step_time):\n    return _f(*a)\n",
    "a closure cell": "def make(g):\n    def f(*a):\n        return g(*a)\n    return f\n"
                      "f = make(bucketed_step_time)\n",
    "importlib.import_module": "def f(*a):\n    lat = importlib.import_module("
                                "'course_utils.models.latency')\n"
                                "    return lat.bucketed_step_time(*a)\n",
    "__import__ of a submodule": "def f(*a):\n    m = __import__('course_utils.models.latency', "
                                 "fromlist=['x'])\n    return m.bucketed_step_time(*a)\n",
    "getattr on the package": "def f(*a):\n    return getattr(cu, 'bucketed_step_time')(*a)\n",
    "getattr on an imported module": "def f(*a):\n    m = importlib.import_module("
                                     "'course_utils.models.latency')\n"
                                     "    return getattr(m, 'bucketed_step_time')(*a)\n",
}


@pytest.mark.parametrize("source", TRIAL_ROUTES.values(), ids=TRIAL_ROUTES)
def test_a_forbidden_function_reached_by_the_trial_s_routes_is_named(source):
    import importlib

    import course_utils as cu
    from course_utils.models.latency import bucketed_step_time

    notebook = {"cu": cu, "importlib": importlib, "bucketed_step_time": bucketed_step_time}
    exec(source, notebook)
    assert uses_forbidden(notebook["f"], [bucketed_step_time]) == "bucketed_step_time"


def test_the_trial_s_disguised_shortcuts_are_refused_by_their_checks():
    import importlib

    from notebook_cell import answer

    from course_utils.checks import check_bucket_model, check_int8_feedback
    from course_utils.models.latency import bucketed_step_time

    model = answer("def my_step_time(sizes, bucket_bytes, ranks, alpha_s, bandwidth_bytes_per_s, "
                   "backward_s, _f=bucketed_step_time):\n    return _f(sizes, bucket_bytes, "
                   "ranks=ranks, alpha_s=alpha_s, bandwidth_bytes_per_s=bandwidth_bytes_per_s, "
                   "backward_s=backward_s)\n", "my_step_time",
                   bucketed_step_time=bucketed_step_time)
    with pytest.raises(ExerciseFailed, match="uses the package's bucketed_step_time"):
        check_bucket_model(model)
    feedback = answer("def my_int8_feedback(g, residual):\n    c = importlib.import_module("
                      "'course_utils.collectives.compression')\n    sent = c.dequantize_int8("
                      "*c.quantize_int8(g + residual))\n    return sent, g + residual - sent\n",
                      "my_int8_feedback", importlib=importlib)
    with pytest.raises(ExerciseFailed, match="calls the package's (de)?quantize_int8"):
        check_int8_feedback(feedback, 0.5)


def test_strings_and_defaults_that_name_nothing_forbidden_are_not_refused():
    import importlib

    import course_utils as cu
    from course_utils.models.latency import bucketed_step_time

    notebook = {"cu": cu, "importlib": importlib}
    exec("def f(sizes, _scale=2.0, *, algorithm='ring'):\n"
         "    lat = importlib.import_module('course_utils.models.latency')\n"
         "    return _scale * lat.collective_time(sum(sizes), 8, algorithm=algorithm, "
         "alpha_s=1e-5, bandwidth_bytes_per_s=1e9)\n", notebook)
    assert uses_forbidden(notebook["f"], [bucketed_step_time]) is None


def test_uses_forbidden_follows_wrappers_copies_and_helpers():
    import functools
    import types

    assert uses_forbidden(reference_gradient, (reference_gradient,)) == "reference_gradient"
    copy = types.FunctionType(reference_gradient.__code__, reference_gradient.__globals__)
    assert uses_forbidden(copy, (reference_gradient,)) == "reference_gradient"
    assert uses_forbidden(jax.jit(functools.partial(reference_gradient)), (reference_gradient,))
    import inspect
    import textwrap

    home = dict(reference_gradient.__globals__)  # recompiled from the package's source
    exec(textwrap.dedent(inspect.getsource(reference_gradient)), home)
    assert uses_forbidden(home["reference_gradient"], (reference_gradient,)) == "reference_gradient"

    def through_a_dict(x, y, w):  # the copy called through the dict it was made in
        return home["reference_gradient"](x, y, w)

    assert uses_forbidden(through_a_dict, (reference_gradient,)) == "reference_gradient"
    renamed = types.FunctionType(reference_gradient.__code__.replace(co_name="mine",
                                                                     co_firstlineno=1), {})
    assert uses_forbidden(renamed, (reference_gradient,)) == "reference_gradient"  # its name

    def helper(x, y, w):
        return reference_gradient(x, y, w)

    def nested(x, y, w, p):
        return [(lambda a: helper(a, y, w))(b) for b in np.split(x, p)]

    assert uses_forbidden(nested, (reference_gradient,)) == "reference_gradient"
    import course_utils
    from course_utils import collectives

    notebook = {"course_utils": course_utils, "collectives": collectives}  # no other names
    exec("def through_modules(x, y, w):  # named on the modules the code names\n"
         "    return (course_utils.reference_gradient(x, y, w),\n"
         "            collectives.kernels.all_reduce_gradient)\n", notebook)
    through_modules = notebook["through_modules"]
    assert uses_forbidden(through_modules, (reference_gradient,)) == "reference_gradient"
    assert uses_forbidden(through_modules, (all_reduce_gradient,)) == "all_reduce_gradient"
    assert uses_forbidden(through_modules, (local_contribution,)) is None
    assert uses_forbidden(_right_shares, (reference_gradient, local_contribution)) is None
    assert uses_forbidden(nested, ("helper",)) is None  # defined beside it: the student's own


def test_a_failed_check_shows_its_message_without_a_traceback():
    error = ExerciseFailed("ring bytes: all_reduce is 2× too large")
    assert error._render_traceback_() == ["ExerciseFailed: ring bytes: all_reduce is 2× too large"]


def test_predicted_shard_shapes(setup):
    mesh, _, (xh, _, _), _ = setup
    placed = jax.device_put(xh, NamedSharding(mesh, P(None, "data")))
    check_predicted_shard_shapes([(16, 2)] * 4, placed)
    check_predicted_shard_shapes([[np.int64(16), 2]] * 4, placed)  # lists and NumPy ints too
    with pytest.raises(
        ExerciseFailed,
        match=r"device 0: dimension 0: it is 4× too small; dimension 1: it is 4× too large",
    ) as failed:
        check_predicted_shard_shapes([(4, 8)] * 4, placed)
    assert "(16, 2)" not in str(failed.value)  # the answer is not given away
    with pytest.raises(ExerciseFailed, match="a list of 4 tuples"):
        check_predicted_shard_shapes((16, 2), placed)
    with pytest.raises(ExerciseFailed, match=r"a list of 4 tuples.*device 0's entry is 4"):
        check_predicted_shard_shapes([4, 4, 4, 4], placed)
    with pytest.raises(ExerciseFailed, match=r"whole numbers \(ints\); device 0's entry is \(16.0"):
        check_predicted_shard_shapes([(16.0, 2.0)] * 4, placed)


def test_predicted_shard_shapes_refuse_a_rebound_mesh(setup):
    _, _, (xh, _, _), _ = setup
    one = jax.sharding.Mesh(np.asarray(jax.devices()[:1]), ("data",))  # `mesh = ...` in an answer
    placed = jax.device_put(xh.T, NamedSharding(one, P("data")))
    with pytest.raises(ExerciseFailed, match=r"mesh was changed after setup \(1, but JAX runs 4 "
                       r"devices\): do not rebind"):
        check_predicted_shard_shapes([(8, 16)], placed)


def test_predicted_shard_shapes_of_a_transpose_name_the_likely_mistake(setup):
    mesh, _, (xh, _, _), _ = setup
    placed = jax.device_put(xh.T, NamedSharding(mesh, P("data")))  # (8, 16): blocks of (2, 16)
    check_predicted_shard_shapes([(2, 16)] * 4, placed)
    check_predicted_shard_shapes(([np.int32(2), 16],) * 4, placed)  # a tuple of lists too
    with pytest.raises(ExerciseFailed, match=r"a block of an array of shape \(16, 8\)"):
        check_predicted_shard_shapes([(4, 8)] * 4, placed)  # xh's rows split, not xh.T's
    with pytest.raises(ExerciseFailed, match="the split is on the wrong dimension"):
        check_predicted_shard_shapes([(8, 4)] * 4, placed)
    with pytest.raises(ExerciseFailed, match="wrong order"):
        check_predicted_shard_shapes([(16, 2)] * 4, placed)
    with pytest.raises(ExerciseFailed, match="that is the whole array") as failed:
        check_predicted_shard_shapes([(8, 16)] * 4, placed)
    assert "(2, 16)" not in str(failed.value)


def _largest(memory_bytes, p):
    step = 4 * p
    return {"all_reduce": memory_bytes / 2 // step * step,
            "reduce_scatter": memory_bytes * p / (p + 1) // step * step,
            "all_gather": memory_bytes * p / (p + 1) // step * step}


def _largest_by_values(memory_bytes, p):  # a second form: whole values per device, then bytes
    per_device = {"all_reduce": 2 * p, "reduce_scatter": p + 1, "all_gather": p + 1}
    return {k: np.int64(4 * p * int(memory_bytes // (4 * v))) for k, v in per_device.items()}


def _largest_by_search(memory_bytes, p):  # a third form: grow by one value per device
    held = {"all_reduce": lambda n: 2 * n, "reduce_scatter": lambda n: n + n / p,
            "all_gather": lambda n: n / p + n}
    found = {}
    for kind, f in held.items():
        n = 0
        while f(n + 4 * p) <= memory_bytes:
            n += 4 * p
        found[kind] = n
    return found


def test_largest_gradient_passes_in_any_right_form(capsys):
    for fn in (_largest, _largest_by_values, _largest_by_search):
        check_largest_gradient(fn, jax.devices(), memory_bytes=2**20)
    out = capsys.readouterr().out
    assert out.count("PASSED: the largest gradient that fits") == 3
    assert "at 1,048,576 bytes of memory on p = 4 the sliced path fits 1.60×" in out


@pytest.mark.parametrize("fn, match", [
    (lambda m, p: {k: v + 4 * p for k, v in _largest(m, p).items()}, "round down, not up"),
    (lambda m, p: {k: v - 4 * p for k, v in _largest(m, p).items()},
     r"4·p = 16 bytes larger still fits .*round down once"),
    (lambda m, p: {**_largest(m, p), "all_reduce": m / 4 // (4 * p) * 4 * p},
     r"\['all_reduce'\]: a gradient .* larger still fits .* \(it is 2× too small\)"),
    (lambda m, p: {k: v // 4 * 4 for k, v in _largest(m, p).items() for v in [v + 4]},
     r"not a whole number of float32 values on each of the 4 devices: round down to a multiple "
     r"of 4·p bytes \(a multiple of 4 is whole values in all"),
    (lambda m, p: {k: math.floor(v / 4 * 4) for k, v in {
        "all_reduce": m / 2, "reduce_scatter": m * p / (p + 1), "all_gather": m * p / (p + 1)
    }.items()}, "not a whole number of float32 values"),
    (lambda m, p: {k: v / 4 for k, v in _largest(m, p).items()}, r"count bytes \(4 per float32"),
    (lambda m, p: {"all_reduce": m // (4 * p) * 4 * p, "reduce_scatter": m // 4 * 4 * p,
                   "all_gather": m // (4 * p) * 4 * p}, "the call's input is still on device 0"),
    (lambda m, p: {**_largest(m, p), "reduce_scatter": m * (p + 1) / p // (4 * p) * 4 * p,
                   "all_gather": m * (p + 1) / p // (4 * p) * 4 * p}, "p and p . 1 are swapped"),
    (lambda m, p: {**_largest(m, p), "all_gather": m / (p + 1) // (4 * p) * 4 * p},
     r"\['all_gather'\]: that is the size of one slice, the all-gather's input"),
    (lambda m, p: {**_largest(m, p), "all_gather": _largest(m, p)["all_reduce"]},
     r"\['all_gather'\]: the all-gather starts from the reduce-scattered slice"),
    (lambda m, p: {**_largest(m, p), "reduce_scatter": m // (4 * p) * 4 * p,
                   "all_gather": m // (4 * p) * 4 * p},
     r"\['reduce_scatter'\]: device 0 also holds its output, one slice"),
    (lambda m, p: {**_largest(m, p), "all_gather": m // (4 * p) * 4 * p},
     r"\['all_gather'\]: device 0 still holds its input, one slice"),
    (lambda m, p: {**_largest(m, p), "reduce_scatter": m // (4 * p) * 4 * (p - 1),
                   "all_gather": m // (4 * p) * 4 * (p - 1)}, r"not N/\(p − 1\)"),
    (lambda m, p: {**_largest(m, p), "all_reduce": m // (12 * p) * 4 * p},
     r"\['all_reduce'\]: device 0 holds two whole gradients .* not three"),
    (lambda m, p: {**_largest(m, p), "all_reduce": _largest(m, p)["reduce_scatter"],
                   "reduce_scatter": _largest(m, p)["all_reduce"]},
     r"\['all_reduce'\]: when the all-reduce returns device 0 holds the whole sum"),
    (lambda m, p: {k: v / 2**20 for k, v in _largest(m, p).items()},
     r"the sizes are in MiB: return bytes"),
    (lambda m, p: {"all_reduce": m * p / (2 * (p - 1)) // (4 * p) * 4 * p,
                   "reduce_scatter": m * p / (p - 1) // (4 * p) * 4 * p,
                   "all_gather": m * p / (p - 1) // (4 * p) * 4 * p},
     r"those are the sizes at which a ring sends memory_bytes per rank"),
    (lambda m, p: _largest(m, 4), r"largest_gradient\(3001, 2\): that is the answer for p = 4"),
    (lambda m, p: _largest(2**20, p), "use the argument memory_bytes"),
    (lambda m, p: _largest(m * p, p), r"largest_gradient\(1048576, 4\): memory_bytes is what "
                                      r"device 0 has, not the memory of all p devices pooled"),
])
def test_largest_gradient_names_the_slip(fn, match):
    with pytest.raises(ExerciseFailed, match=match) as failed:
        check_largest_gradient(fn, jax.devices(), memory_bytes=2**20)
    assert "838848" not in str(failed.value) and "524288" not in str(failed.value)


def test_largest_gradient_refuses_the_package_and_bad_input():
    from course_utils import communication_budget, values_per_device
    from course_utils.checks.storage import largest_gradient_bytes

    def check(fn):
        check_largest_gradient(fn, jax.devices(), memory_bytes=2**20)

    shortcuts = {
        "communication_budget": lambda m, p: communication_budget(m, [p])[0],
        "values_per_device": lambda m, p: {k: values_per_device(jnp.zeros(4)) for k in (
            "all_reduce", "reduce_scatter", "all_gather")},
        "checks.storage.largest_gradient_bytes": lambda m, p: largest_gradient_bytes(m, p),
    }
    for name, fn in shortcuts.items():
        with pytest.raises(ExerciseFailed, match=f"uses the package's {name}"):
            check(fn)
    wrong = [
        (None, "largest_gradient is not defined"),
        (_largest(2**20, 4), "not a function"),
        (lambda m: 1, r"largest_gradient\(1048576, 4\) raised TypeError"),
        (lambda m, p: 1 / 0, "raised ZeroDivisionError"),
        (lambda m, p: [1, 2, 3], "must be a dict with the keys"),
        (lambda m, p: {"all_reduce": 16}, "it lacks 'all_gather', 'reduce_scatter'"),
        (lambda m, p: {**_largest(m, p), "all_gather": "16"}, "must be a positive number"),
        (lambda m, p: {**_largest(m, p), "all_gather": float("nan")}, "must be a positive"),
        (lambda m, p: {**_largest(m, p), "all_gather": 0}, "must be a positive number"),
    ]
    for fn, match in wrong:
        with pytest.raises(ExerciseFailed, match=match):
            check(fn)
    with pytest.raises(ExerciseFailed, match="the device list was changed after setup"):
        check_largest_gradient(_largest, jax.devices()[:1], memory_bytes=2**20)


def _clipped_step(mesh, *, norm="slices", clip=0.1, lr=0.1, beta=0.9, gather_norm=False):
    """A student's jitted clipped step; ``norm`` names how the whole gradient's norm is found."""
    axis = "data"

    def kernel(x_block, y_block, w, v_slice):
        n_rows = x_block.shape[0] * jax.lax.axis_size(axis)
        partial = 2 * x_block.T @ (x_block @ w - y_block) / n_rows
        if norm == "partials first":  # each device clips its partial before the reduce-scatter
            partial = partial * jnp.minimum(1.0, clip / jnp.linalg.norm(partial))
        g = jax.lax.psum_scatter(partial, axis, tiled=True)
        squares = jnp.sum(g * g)
        length = {
            "slices": lambda: jnp.sqrt(jax.lax.psum(squares, axis)),
            # every device's sum of squares gathered (p numbers), then added: right too
            "gathered squares": lambda: jnp.sqrt(jnp.sum(
                jax.lax.all_gather(squares[None], axis, tiled=True))),
            "gathered gradient": lambda: jnp.linalg.norm(jax.lax.all_gather(g, axis, tiled=True)),
            "pmean": lambda: jnp.sqrt(jax.lax.pmean(squares, axis)),
            "pmax": lambda: jax.lax.pmax(jnp.linalg.norm(g), axis),
            "max abs": lambda: jax.lax.pmax(jnp.max(jnp.abs(g)), axis),
            "weights": lambda: jnp.linalg.norm(w),
            "slice vector": lambda: jnp.sqrt(jnp.sum(jax.lax.psum(g * g, axis))),
            "half": lambda: 2 * jnp.sqrt(jax.lax.psum(squares, axis)),  # no slip with a name
            "slice means": lambda: jnp.sqrt(jax.lax.psum(jnp.mean(g * g), axis)),  # an RMS
            "mean": lambda: jnp.sqrt(jax.lax.psum(squares, axis) / w.shape[0]),  # g's RMS
            # C²/‖g‖ in the where below: min(1, ‖g‖/C), the ratio inverted
            "inverted": lambda: clip**2 / jnp.sqrt(jax.lax.psum(squares, axis)),
            "partials first": lambda: jnp.zeros(()),  # clipped above: this clips nothing
        }[norm]()
        # a where in place of min: a second right form
        g = jnp.where(length > clip, g * clip / length, g)
        k = g.shape[0]
        w_slice = jax.lax.dynamic_slice_in_dim(w, jax.lax.axis_index(axis) * k, k)
        v_next = beta * v_slice + g
        return jax.lax.all_gather(w_slice - lr * v_next, axis, tiled=True, to="invarying"), v_next

    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=(P(axis, None), P(axis), P(),
                                                              P(axis)),
                                 out_specs=(P(), P(axis))))


def test_clipped_step_passes_right_forms_and_refuses_what_sends_the_gradient(setup, capsys):
    mesh = setup[0]

    def check(step):
        check_clipped_step(step, mesh, lr=0.1, beta=0.9, clip=0.1)

    check(_clipped_step(mesh))
    check(_clipped_step(mesh, norm="gathered squares"))
    assert capsys.readouterr().out.count("PASSED: clipping by the global norm") == 2
    with pytest.raises(ExerciseFailed, match=r"gathers more than the new weights \(all-gathers "
                       r"of 256, 256 bytes\)"):
        check(_clipped_step(mesh, norm="gathered gradient"))
    with pytest.raises(ExerciseFailed, match=r"v_next .clipping acts.: the gradient was scaled "
                       r"by 0.188, where min\(1, C/‖g‖\) is 0.0625 \(3× too large\): the norm "
                       "you clipped by, or the threshold, is not ‖g‖ or CLIP"):
        check(_clipped_step(mesh, clip=0.3))  # the page's CLIP not used
    slips = [
        ("pmean", r"the factor is √p = 2× too large, .* averaged \(pmean divides by p\)"),
        ("pmax", r"the largest slice's norm \(a pmax\), not the whole gradient's"),
        ("max abs", r"the largest entry \(max \|g\|, the ∞-norm\), not the Euclidean norm"),
        ("weights", "that is the norm of the weights w, not of the gradient"),
        ("partials first", "each device clipped its partial gradient before the reduce-scatter"),
        ("slice vector", r"all-reduces 64 bytes, a slice-long vector .*: sum the slice's squares "
                         "to one number on each device first"),
        ("half", r"scaled by 0.031\d, where min\(1, C/‖g‖\) is 0.0625 \(2× too small\)"),
        ("slice means", r"each slice's squares were averaged \(jnp.mean, a root mean square\)"),
        ("mean", r"the squares were averaged \(a root mean square, ‖g‖/√n\), not summed"),
        ("inverted", r"one shorter than the threshold was shrunk \(by ‖g‖/C\): the ratio is "
                     "inverted"),
    ]
    for norm, match in slips:
        with pytest.raises(ExerciseFailed, match=match):
            check(_clipped_step(mesh, norm=norm))
    with pytest.raises(ExerciseFailed, match=r"w_next .* entries wrong"):
        check(_clipped_step(mesh, lr=0.2))
    with pytest.raises(ExerciseFailed, match="is .or wraps. one of the package's kernels"):
        check(reduce_scatter_gradient(mesh))
    wrong = [
        (None, "clipped_step is not defined"),
        (np.zeros(3), "not a function"),
        (lambda x, y, w: (w, w), r"calling clipped_step\(x, y, w, v with x of shape \(24, 64\)\) "
                                 "raised TypeError"),
        (lambda x, y, w, v: w, r"must return \(w_next, v_next\), two arrays; got ArrayImpl"),
        (lambda x, y, w, v: (w, "v"), "v_next must be an array of numbers"),
    ]
    for step, match in wrong:
        with pytest.raises(ExerciseFailed, match=match):
            check(step)
    two = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("data",))  # a rebound mesh
    with pytest.raises(ExerciseFailed, match="mesh was changed after setup"):
        check_clipped_step(_clipped_step(two), two, lr=0.1, beta=0.9, clip=0.1)


def test_clipped_step_reads_an_unnamed_slip_from_the_values():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 4)), rng.normal(size=8)
    w, v = rng.normal(size=4), rng.normal(size=4)
    g = 2 * x.T @ (x @ w - y) / 8
    factor = min(1.0, 0.1 / np.linalg.norm(g))
    right = 0.9 * v + factor * g

    def why(got):
        return _unnamed(got, right, (x, y, w, v), p=2, beta=0.9, clip=0.1)

    assert why(right[:2]).startswith("v_next has shape (2,), not (4,)")
    assert why(0.9 * v + factor * g[::-1]).startswith("v_next − β·v is not the gradient times")
    assert why(0.9 * v + factor * g * [1, 1, 3, 3]).startswith(
        "the devices scaled their slices by different factors")
    assert f"({1 / 0.7:.3g}× too small)" in why(0.9 * v + 0.7 * factor * g)
    assert "positive" in why(0.9 * v - factor * g)


def kernels(mesh):
    return all_reduce_gradient(mesh), reduce_scatter_gradient(mesh), all_gather_shards(mesh)


def test_joint_permutation(setup, capsys):
    mesh, (rows, replicated, sliced), (xh, yh, wh), _ = setup
    w2h = wh + np.float32(0.17)
    all_reduce, scatter, gather = kernels(mesh)
    x2, y2 = xh[::-1].copy(), yh[::-1].copy()
    check_joint_permutation(all_reduce(x2, y2, w2h), gather(scatter(x2, y2, w2h)), xh, yh, w2h, 4)
    assert "PASSED: joint row permutation" in capsys.readouterr().out
    labels_only = all_reduce(xh, y2, w2h)
    with pytest.raises(ExerciseFailed, match=r"g_all: only the labels y, or only the rows of x, "
                       "were reordered, .*same permutation"):
        check_joint_permutation(labels_only, gather(scatter(x2, y2, w2h)), xh, yh, w2h, 4)
    # the likely mistakes are named, without the answer's numbers
    named = {
        "only the labels y, or only the rows of x": all_reduce(x2, yh, w2h),
        r"the permutation went to the columns \(features\)": all_reduce(
            xh[:, ::-1].copy(), y2, w2h),
        "the gradient at the original weights w": all_reduce(x2, y2, wh),
    }
    for match, wrong in named.items():
        with pytest.raises(ExerciseFailed, match=match) as failed:
            check_joint_permutation(wrong, gather(scatter(x2, y2, w2h)), xh, yh, w2h, 4)
        assert "instead of" not in str(failed.value)
    with pytest.raises(
        ExerciseFailed, match=r"g_gathered has the right values but the wrong placement.*\(8,\)"
    ):
        check_joint_permutation(all_reduce(x2, y2, w2h), scatter(x2, y2, w2h), xh, yh, w2h, 4)
    with pytest.raises(ExerciseFailed, match="g_all: 8 of 8 entries wrong"):
        check_joint_permutation(
            all_reduce(x2, y2, wh + 1), gather(scatter(x2, y2, w2h)), xh, yh, w2h, 4
        )


def test_joint_permutation_checks_the_placed_inputs(setup, capsys):
    mesh, (rows, replicated, sliced), (xh, yh, wh), _ = setup
    w2h = wh + np.float32(0.17)
    all_reduce, scatter, gather = kernels(mesh)
    original = xh.copy(), yh.copy()
    xh, yh = xh[::-1].copy(), yh[::-1].copy()  # the student rebinds xh, yh as the text invites
    inputs = dict(
        x2=jax.device_put(xh, rows),
        y2=jax.device_put(yh, sliced),
        w2=jax.device_put(w2h, replicated),
    )
    g_all, g_gathered = all_reduce(xh, yh, w2h), gather(scatter(xh, yh, w2h))

    def check(**changed):
        check_joint_permutation(g_all, g_gathered, *original, w2h, 4, **{**inputs, **changed})

    check()
    assert "PASSED: joint row permutation" in capsys.readouterr().out
    # the two cheats of the student pass: one result reused, and a target computed and placed
    with pytest.raises(ExerciseFailed, match="g_gathered is g_all itself"):
        check_joint_permutation(g_all, g_all, *original, w2h, 4, **inputs)
    placed_target = jax.device_put(reference_gradient(*original, w2h), replicated)
    for results in ((placed_target, g_gathered), (g_all, placed_target)):
        with pytest.raises(ExerciseFailed, match="the right numbers, but not the bits"):
            check_joint_permutation(*results, *original, w2h, 4, **inputs)
    with pytest.raises(
        ExerciseFailed,
        match=r"y2 has the right values but the wrong placement: it is replicated.*\(4,\) per",
    ):
        check(y2=jax.device_put(yh, replicated))
    with pytest.raises(ExerciseFailed,
                       match=r"w2 is not defined \(or is None\); place w2h replicated as w2"):
        check(w2=None)
    with pytest.raises(ExerciseFailed, match=r"w2: 8 of 8 entries wrong.*w2 is w \+ 0.17"):
        check(w2=jax.device_put(wh + 1, replicated))
    with pytest.raises(ExerciseFailed, match=r"w2 is a ndarray on the host"):
        check(w2=w2h)
    with pytest.raises(ExerciseFailed, match=r"x2 is not defined"):
        check(x2=None)
    with pytest.raises(ExerciseFailed, match=r"x2 holds the rows of x in their original order"):
        check(x2=jax.device_put(original[0], rows))
    with pytest.raises(ExerciseFailed, match=r"x2 has the right values but the wrong placement"):
        check(x2=jax.device_put(xh, replicated))
    with pytest.raises(ExerciseFailed, match=r"y2 is not ordered like the rows of x2"):
        check(y2=jax.device_put(original[1], sliced))
    with pytest.raises(ExerciseFailed, match=r"in their original order while y2 is reordered"):
        check(x2=jax.device_put(original[0], rows))
    with pytest.raises(ExerciseFailed, match=r"x2 reorders the columns \(features\) of x"):
        check(x2=jax.device_put(original[0][:, ::-1].copy(), rows))
    with pytest.raises(ExerciseFailed, match=r"w2 holds the original weights w"):
        check(w2=jax.device_put(wh, replicated))  # named, not "8 of 8 entries wrong"
    with pytest.raises(ExerciseFailed, match=r"y2 is not defined"):
        check(y2=None)


def _closed_form(p, alpha_s, bytes_per_s):
    extra_bytes = math.log2(p) - 2 * (p - 1) / p
    if extra_bytes <= 0:
        return math.inf
    return alpha_s * bytes_per_s * (2 * (p - 1) - math.log2(p)) / extra_bytes


def _by_search(p, alpha_s, bytes_per_s):  # both times written out, the crossing bisected
    def ring(n):
        return 2 * (p - 1) * alpha_s + 2 * (p - 1) / p * n / bytes_per_s

    def doubling(n):
        return math.log2(p) * (alpha_s + n / bytes_per_s)

    if doubling(1e30) <= ring(1e30):
        return float("inf")
    low, high = 0.0, 1e15
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if doubling(mid) < ring(mid) else (low, mid)
    return low


def test_the_crossover_passes_in_any_right_form_and_refuses_the_package_s_models(capsys):
    import course_utils as cu
    from course_utils.checks import check_rd_crossover

    page = dict(alpha_s=5e-6, bytes_per_s=12.5e9)
    for right in (_closed_form, _by_search,
                  lambda p, a, b: np.float64(_closed_form(p, a, b)),  # a NumPy number
                  lambda p, a, b: np.inf if p == 2 else _closed_form(p, a, b)):
        check_rd_crossover(right, **page)
        assert "PASSED: the ring against recursive doubling" in capsys.readouterr().out

    def with_models(p, alpha_s, bytes_per_s):
        times = [cu.collective_time(n, p, alpha_s=alpha_s, bandwidth_bytes_per_s=bytes_per_s,
                                    algorithm=a) for n in (0, 1e9)
                 for a in ("ring", "recursive_doubling")]
        return _closed_form(p, alpha_s, bytes_per_s) + 0 * sum(times)

    wrong = [
        (None, "rd_crossover_bytes is not defined"),
        (with_models, "uses the package's collective_time"),
        (lambda p, a, b: -1.0, "must return one number of bytes ≥ 0"),
        (lambda p, a, b: _closed_form(p, a, b) if p > 2 else 0.0, "never slower"),
        (lambda p, a, b: _closed_form(4, a, b), "use the argument p"),
        (lambda p, a, b: _closed_form(p, 5e-6, 12.5e9), "a case the page never shows"),
    ]
    for fn, match in wrong:
        with pytest.raises(ExerciseFailed, match=match):
            check_rd_crossover(fn, **page)


@pytest.mark.parametrize(
    "got, expected, message",
    [
        (8.0, 4.0, "it is 2× too large"),
        (1.0, 4.0, "it is 4× too small"),
        (-4.0, 4.0, "it has the wrong sign$"),
        (-6.0, 4.0, "it has the wrong sign, and its size is off too"),
        (4.4, 4.0, "it is 10 % too large$"),
        (3.0, 4.0, "it is 25 % too small$"),
        (4.01, 4.0, "it is 0.25 % too large: close, so check for rounding too early"),
        (9.0, 4.0, "it is about 2.25× too large"),
        (1.0, 234.88, "it is about 235× too small"),
        (0.0, 4.0, "it is 0, but it should not be"),
        (float("inf"), 4.0, "give a finite number"),
    ],
)
def test_off_by_names_the_kind_of_miss(got, expected, message):
    from course_utils.checks.helpers import off_by

    assert re.search(message, off_by(got, expected))


# The wrong answers tests/test_submission.py once ran as whole notebooks (one check-submission run
# each), checked here at function level; the others have twins in test_hierarchy.py (step 13),
# test_algorithm_checks.py (steps 11, 12) and test_training_checks.py (step 16).
def test_two_level_names_the_likely_mistake():
    from jax.sharding import PartitionSpec as P

    from course_utils import node_local_mesh
    from course_utils.checks import check_two_level

    mesh = node_local_mesh(2)
    rs = lambda x: jax.lax.psum_scatter(x, "local", tiled=True)  # noqa: E731
    ag = lambda x: jax.lax.all_gather(x, "local", tiled=True)  # noqa: E731
    right = lambda x: ag(jax.lax.psum(rs(x), "node"))  # noqa: E731
    with pytest.raises(ExerciseFailed, match="returns a tuple of 2; return one array"):
        check_two_level(lambda x: (right(x), rs(x)), mesh)
    whole = jax.shard_map(right, mesh=mesh, in_specs=P(("node", "local")),
                          out_specs=P(("node", "local")))
    for passed_instead in (whole, jax.jit(whole)):
        with pytest.raises(ExerciseFailed, match="pass the plain function, not a jax.shard_map"):
            check_two_level(passed_instead, mesh)
    with pytest.raises(ExerciseFailed, match="use jax.lax.psum over 'node', not pmean"):
        check_two_level(lambda x: ag(jax.lax.pmean(rs(x), "node")), mesh)
    with pytest.raises(ExerciseFailed, match=r"its own node's sum only.*'node'\) is missing"):
        check_two_level(lambda x: ag(rs(x)), mesh)


def test_two_level_on_nodes_of_one_device_never_passes_a_flat_psum(capsys):
    from course_utils import node_local_mesh
    from course_utils.checks import check_two_level

    for nodes in (jax.device_count(), 1):  # p nodes of 1 device, one node of p
        check_two_level(lambda x: jax.lax.psum(x, ("node", "local")), node_local_mesh(nodes))
        out = capsys.readouterr().out
        assert "PASSED" not in out and "N_DEVICES = 4, 6 or 8" in out
        assert out.startswith("NOT VERIFIED: two-level all-reduce (the sum is right")


@pytest.mark.parametrize("returned", [
    lambda sent, residual: (sent, residual, sent),  # three things
    lambda sent, residual: sent,  # the dense vector alone
])
def test_int8_feedback_returning_the_wrong_number_of_things(returned):
    from course_utils.checks import check_int8_feedback

    def feedback(g, residual):
        acc = g + residual
        buckets = acc.reshape(-1, 64)
        scale = jnp.max(jnp.abs(buckets), axis=1, keepdims=True) / 127
        sent = (jnp.round(buckets / scale) * scale).reshape(-1)
        return returned(sent, acc - sent)

    expected = "return two vectors, \\(sent, new_residual\\)"
    with pytest.raises(ExerciseFailed, match=expected) as info:
        check_int8_feedback(feedback, 0.5)
    assert "unpack" not in str(info.value)


def test_predicted_shard_shapes_of_step_4_names_the_device(setup):
    mesh, _, (xh, _, _), _ = setup
    placed = jax.device_put(xh, NamedSharding(mesh, P(None, "data")))
    with pytest.raises(ExerciseFailed, match="wrong shard shape on device 0: dimension 0"):
        check_predicted_shard_shapes([(4, 8)] * 4, placed)


def test_joint_permutation_reads_the_second_path_s_reduce_scatter():
    """The second path must pass through its reduce-scatter: ``g_scattered`` sliced, and
    ``g_gathered`` its all-gather."""
    mesh = data_mesh()
    rows, replicated, sliced = placements(mesh)
    xh, yh, wh = toy_regression(16, 8)
    w2h = wh + np.float32(0.17)
    x2 = jax.device_put(xh[::-1].copy(), rows)
    y2 = jax.device_put(yh[::-1].copy(), sliced)
    w2 = jax.device_put(w2h, replicated)
    g_all = all_reduce_gradient(mesh)(x2, y2, w2)
    scattered = reduce_scatter_gradient(mesh)(x2, y2, w2)
    gathered = all_gather_shards(mesh)(scattered)
    inputs = {"x2": x2, "y2": y2, "w2": w2}
    check_joint_permutation(g_all, gathered, xh, yh, w2h, 4, **inputs, g_scattered=scattered)
    for wrong, message in [(None, "assign the reduce-scatter of x2, y2, w2 to g_scattered"),
                           (g_all, "wrong placement")]:
        with pytest.raises(ExerciseFailed, match=message):
            check_joint_permutation(g_all, gathered, xh, yh, w2h, 4, **inputs, g_scattered=wrong)


def test_joint_permutation_judges_the_students_reorder(setup, capsys):
    mesh, (rows, replicated, sliced), (xh, yh, wh), _ = setup
    w2h = wh + np.float32(0.17)
    all_reduce, scatter, gather = kernels(mesh)

    def rotate(n, p):  # every block moves to the next device
        return np.roll(np.arange(n), n // p)

    def check(reorder, order=None):
        order = rotate(len(xh), 4) if order is None else order
        x2, y2 = xh[order], yh[order]
        inputs = dict(x2=jax.device_put(x2, rows), y2=jax.device_put(y2, sliced),
                      w2=jax.device_put(w2h, replicated))
        check_joint_permutation(all_reduce(x2, y2, w2h), gather(scatter(x2, y2, w2h)), xh, yh,
                                w2h, 4, **inputs, reorder=reorder)

    check(rotate)
    back = [(i + 4) % 16 for i in range(16)]  # the other way round, as a list
    check(lambda n, p: [(i + n // p) % n for i in range(n)], np.array(back))
    check(lambda n, p: tuple(np.roll(np.arange(n), -(n // p))), np.array(back))
    assert capsys.readouterr().out.count("PASSED: joint row permutation") == 3
    reversal = lambda n, p: np.arange(n)[::-1]  # noqa: E731
    with pytest.raises(ExerciseFailed, match=r"reorder\(9, 3\), device 1 still holds .*reversal"):
        check(reversal, np.arange(16)[::-1])
    with pytest.raises(ExerciseFailed, match=r"reorder\(16, 4\), device 0 still holds"):
        check(lambda n, p: np.arange(n))
    with pytest.raises(ExerciseFailed, match=r"reorder\(16, 4\) must return each row index"):
        check(lambda n, p: np.roll(np.arange(n), n // p) / 1.5)
    with pytest.raises(ExerciseFailed, match=r"reorder\(16, 4\), with x of shape|raised"):
        check(lambda n: np.arange(n))
    with pytest.raises(ExerciseFailed, match=r"x2 is not xh reordered by reorder\(16, 4\)"):
        check(rotate, np.roll(np.arange(16), 8))
    with pytest.raises(ExerciseFailed, match="reorder is not defined"):
        check(None)
