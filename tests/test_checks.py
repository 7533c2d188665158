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
    check_joint_permutation,
    check_predicted_shard_shapes,
    check_reduce_scatter,
    check_shares,
    check_stored_bytes_rule,
    check_two_state_update,
)
from course_utils.checks.budget import _crossing
from course_utils.checks.forbidden import uses_forbidden
from course_utils.checks.gradients import _check_stacked


@pytest.fixture(scope="module")
def setup():
    mesh = data_mesh()
    rows, replicated, sliced = placements(mesh)
    xh, yh, wh = toy_regression()
    placed = jax.device_put(xh, rows), jax.device_put(yh, sliced), jax.device_put(wh, replicated)
    return mesh, (rows, replicated, sliced), (xh, yh, wh), placed


def _shares(xh, yh, wh, divide_by):
    return np.stack(
        [2 * xb.T @ (xb @ wh - yb) / divide_by for xb, yb in zip(np.split(xh, 4), np.split(yh, 4))]
    )


def _right_shares(x, y, w, p):
    n = x.shape[0]
    return np.stack([2 * xb.T @ (xb @ w - yb) / n for xb, yb in zip(np.split(x, p),
                                                                    np.split(y, p))])


def test_shares_function_is_called_on_fresh_data(setup, capsys):
    _, _, (xh, yh, wh), _ = setup
    check_shares(_right_shares)
    assert capsys.readouterr().out.startswith("PASSED: per-device shares (the shares of p = 4, 2")
    notebook = _shares(xh, yh, wh, 16)  # the notebook's arrays, reused
    wrong = [
        (None, "my_shares is not defined"),
        (notebook, "not a function"),
        (lambda x, y, w, p: notebook, r"my_shares\(x, y, w, 4\) has shape \(4, 8\), expected"),
        (lambda x, y, w, p: _right_shares(x, y, w, 4), "use the argument p, not N_DEVICES"),
        (lambda x, y, w: None, r"my_shares\(x, y, w, 4\), with x of shape .* raised TypeError"),
        (lambda x, y, w, p: None, "returned None"),
        (lambda x, y, w, p: _right_shares(x, y, w, p) * p, "global row count"),
        (lambda x, y, w, p: _right_shares(x, y, w, p) * len(x) / 16,  # the notebook's n_rows
         r"my_shares\(x, y, w, 4\) divides by a fixed row count \(16 — the notebook's n_rows\?\)"
         ": use the rows of the x you are given"),
        (lambda x, y, w, p: _right_shares(x, y, w, p) / 2, "0.5× the expected value"),
        (lambda x, y, w, p: np.stack([local_contribution(xb, yb, w, len(x)) for xb, yb in zip(
            np.split(x, p), np.split(y, p))]), "uses local_contribution, which this exercise"),
    ]
    for fn, match in wrong:
        with pytest.raises(ExerciseFailed, match=match):
            check_shares(fn)


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


def test_shares_name_the_likely_mistake(setup, capsys):
    _, _, (xh, yh, wh), _ = setup
    _check_stacked(_shares(xh, yh, wh, 16), xh, yh, wh, 4)
    with pytest.raises(
        ExerciseFailed,
        match=r"32 of 32 entries wrong.*4× the expected value.*global row count \(16\)",
    ):
        _check_stacked(_shares(xh, yh, wh, 4), xh, yh, wh, 4)
    with pytest.raises(ExerciseFailed, match=r"shares has shape \(8,\), expected \(4, 8\)"):
        _check_stacked(_shares(xh, yh, wh, 16).sum(axis=0), xh, yh, wh, 4)
    with pytest.raises(ExerciseFailed, match="dtype int64"):
        _check_stacked(np.zeros((4, 8), np.int64), xh, yh, wh, 4)
    with pytest.raises(ExerciseFailed, match=r"my_shares is not defined \(or is None\); assign"):
        _check_stacked(None, xh, yh, wh, 4)
    with pytest.raises(ExerciseFailed, match=r"my_shares is a list; stack it into one array"):
        _check_stacked(list(_shares(xh, yh, wh, 16)), xh, yh, wh, 4)
    twice = 2 * _shares(xh, yh, wh, 16)  # off by 2, not by p: the row-count hint would mislead
    with pytest.raises(ExerciseFailed, match=r"2× the expected value") as failed:
        _check_stacked(twice, xh, yh, wh, 4)
    assert "row count" not in str(failed.value)
    right = _shares(xh, yh, wh, 16)
    where = r"entries wrong, at \(0, 0\), \(0, 1\), \(0, 2\) and \d+ more"
    assert re.search(where, str(failed.value))
    assert f"{right[0, 0]:.6g}" not in str(failed.value)  # where and how far, never the answer
    for wrong, likely in [
        (right.T.copy(), "transposed"),
        (right[::-1].copy(), "in another order"),
        (np.tile(right.sum(axis=0), (4, 1)), "every row is the whole gradient"),
        (np.stack([right.sum(axis=0) / 4] * 4), "add up to the gradient"),  # split evenly
    ]:
        with pytest.raises(ExerciseFailed, match=likely):
            _check_stacked(wrong, xh, yh, wh, 4)


def test_a_failed_check_shows_its_message_without_a_traceback():
    error = ExerciseFailed("ring bytes: all_reduce is 2× too large")
    assert error._render_traceback_() == ["ExerciseFailed: ring bytes: all_reduce is 2× too large"]


def _shard_mapped(mesh, kernel, out_specs):
    specs = (P("data", None), P("data"), P())
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=specs, out_specs=out_specs))


def _share(x_block, y_block, w):
    return 2 * x_block.T @ (x_block @ w - y_block) / (x_block.shape[0] * 4)


def test_reduce_scatter(setup, capsys):
    mesh, (_, _, sliced), host, placed = setup
    mine = _shard_mapped(
        mesh, lambda xb, yb, w: jax.lax.psum_scatter(_share(xb, yb, w), "data", tiled=True),
        P("data"),
    )
    check_reduce_scatter(mine, *placed, *host, 4)
    assert "each device holds 2 of the 8" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match="the package's own kernel; write the shard_map"):
        check_reduce_scatter(reduce_scatter_gradient(mesh), *placed, *host, 4)
    bare = jax.shard_map(  # not jitted: the check compiles it itself
        lambda xb, yb, w: jax.lax.psum_scatter(_share(xb, yb, w), "data", tiled=True),
        mesh=mesh,
        in_specs=(P("data", None), P("data"), P()),
        out_specs=P("data"),
    )
    check_reduce_scatter(bare, *placed, *host, 4)
    with pytest.raises(
        ExerciseFailed,
        match=r"right values but the wrong placement: it is replicated.*\(2,\) per device",
    ):
        check_reduce_scatter(
            _shard_mapped(mesh, lambda xb, yb, w: jax.lax.psum(_share(xb, yb, w), "data"), P()),
            *placed, *host, 4,
        )
    with pytest.raises(ExerciseFailed, match=r"4 whole gradients side by side.*all-reduce"):
        check_reduce_scatter(  # psum with the reduce-scatter's out_specs: p copies of the sum
            _shard_mapped(mesh, lambda xb, yb, w: jax.lax.psum(_share(xb, yb, w), "data"),
                          P("data")),
            *placed, *host, 4,
        )

    # the wrong answer: no kernel at all, the reference placed as sliced
    def placed_reference(x, y, w):
        return jax.device_put(reference_gradient(*host), sliced)

    with pytest.raises(
        ExerciseFailed,
        match=r"the right gradient for x, y, w but a wrong one for other inputs.*computed "
        r"beforehand",
    ):
        check_reduce_scatter(placed_reference, *placed, *host, 4)
    with pytest.raises(ExerciseFailed, match="computed beforehand"):  # jit of a constant
        check_reduce_scatter(jax.jit(placed_reference), *placed, *host, 4)

    def all_reduce_then_slice(x_block, y_block, w):
        whole = jax.lax.psum(_share(x_block, y_block, w), "data")
        return jax.lax.dynamic_slice_in_dim(whole, jax.lax.axis_index("data") * 2, 2)

    with pytest.raises(ExerciseFailed, match=r"has only all-reduce: every device receives more"):
        check_reduce_scatter(
            _shard_mapped(mesh, all_reduce_then_slice, P("data")), *placed, *host, 4
        )
    with pytest.raises(ExerciseFailed, match="is an object of type ArrayImpl, not a function"):
        check_reduce_scatter(reduce_scatter_gradient(mesh)(*placed), *placed, *host, 4)


def test_reduce_scatter_rejects_collectives_besides_the_one_reduce_scatter(setup):
    mesh, _, host, placed = setup

    def gather_rows(x_block, y_block, w):  # the student pass's cheat: the whole data everywhere
        x, y = (jax.lax.all_gather(a, "data", tiled=True) for a in (x_block, y_block))
        return jax.lax.psum_scatter(2 * x.T @ (x @ w - y) / x.shape[0] / 4, "data", tiled=True)

    def sum_twice(x_block, y_block, w):  # a psum besides: the right numbers
        share = _share(x_block, y_block, w)
        return jax.lax.psum_scatter(share, "data", tiled=True) + 0 * jax.lax.psum(share, "data")[0]

    def two_halves(x_block, y_block, w):  # two reduce-scatters of half the rows each
        half = x_block.shape[0] // 2
        one, two = (_share(x_block[r], y_block[r], w) for r in (slice(None, half),
                                                                 slice(half, None)))
        return 0.5 * sum(jax.lax.psum_scatter(s, "data", tiled=True) for s in (one, two))

    for kernel, found in ((gather_rows, "has all-gather besides the reduce-scatter: devices "
                           "receive other devices' rows"),
                          (sum_twice, "has all-reduce besides .* receives the whole sum"),
                          (two_halves, "has 2 reduce-scatters: the share is sent in pieces")):
        with pytest.raises(ExerciseFailed, match=found):
            check_reduce_scatter(_shard_mapped(mesh, kernel, P("data")), *placed, *host, 4)

    with pytest.raises(ExerciseFailed, match="my_reduce_scatter is not defined"):
        check_reduce_scatter(None, *placed, *host, 4)
    with pytest.raises(ExerciseFailed, match=r"computed beforehand"):  # the host reference
        check_reduce_scatter(lambda x, y, w: reference_gradient(*host), *placed, *host, 4)
    with pytest.raises(
        ExerciseFailed,
        match=r"(?s)raised ValueError:.*out_specs.*each device holds a different slice",
    ):
        check_reduce_scatter(  # psum_scatter into out_specs=P(): JAX refuses to trace it
            _shard_mapped(
                mesh,
                lambda xb, yb, w: jax.lax.psum_scatter(_share(xb, yb, w), "data", tiled=True),
                P(),
            ),
            *placed,
            *host,
            4,
        )
    with pytest.raises(ExerciseFailed, match=r"(?s)ValueError:.*pass tiled=True to cut the vector"):
        check_reduce_scatter(
            _shard_mapped(
                mesh, lambda xb, yb, w: jax.lax.psum_scatter(_share(xb, yb, w), "data"), P("data")
            ),
            *placed,
            *host,
            4,
        )
    unchecked = jax.jit(
        jax.shard_map(
            lambda xb, yb, w: jax.lax.psum_scatter(_share(xb, yb, w), "data", tiled=True),
            mesh=mesh,
            in_specs=(P("data", None), P("data"), P()),
            out_specs=P(),
            check_vma=False,
        )
    )
    with pytest.raises(ExerciseFailed, match=r"has the shape of one slice, \(2,\)"):
        check_reduce_scatter(unchecked, *placed, *host, 4)
    def half(x, y, w):  # computed from its inputs, but placed on a 2 × 2 mesh
        g = reference_gradient(*map(np.asarray, (x, y, w))).astype(np.float32)
        return jax.device_put(g, NamedSharding(jax.make_mesh((2, 2), ("a", "b")), P("a")))

    with pytest.raises(
        ExerciseFailed,
        match=r"wrong shard shape: devices hold \[\(4,\)\], expected \(2,\) per device",
    ):
        check_reduce_scatter(half, *placed, *host, 4)
    with pytest.raises(ExerciseFailed, match="4× the expected value"):
        check_reduce_scatter(
            _shard_mapped(
                mesh,
                lambda xb, yb, w: jax.lax.psum_scatter(4 * _share(xb, yb, w), "data", tiled=True),
                P("data"),
            ),
            *placed,
            *host,
            4,
        )


def test_reduce_scatter_refuses_a_rebound_device_count(setup):
    mesh, _, host, placed = setup
    with pytest.raises(ExerciseFailed, match="N_DEVICES was changed after setup"):
        check_reduce_scatter(reduce_scatter_gradient(mesh), *placed, *host, 1)


def test_reduce_scatter_catches_the_package_kernel_however_wrapped(setup):
    mesh, _, host, placed = setup
    package = reduce_scatter_gradient(mesh)
    for cheat in (
        package.jitted,  # the accepted cheat
        jax.jit(package),  # jax.jit of the Kernel: an AttributeError about tracers inside
        jax.jit(lambda x, y, w: package.jitted(x, y, w)),  # a wrapper that calls it
        lambda x, y, w: package(x, y, w),
    ):
        with pytest.raises(ExerciseFailed, match="package's"):
            check_reduce_scatter(cheat, *placed, *host, 4)


def test_reduce_scatter_catches_precomputed_results_and_explains_errors(setup):
    mesh, (_, _, sliced), host, placed = setup
    g = reduce_scatter_gradient(mesh)(*placed)
    with pytest.raises(ExerciseFailed, match="computed beforehand") as failed:
        check_reduce_scatter(lambda x, y, w: g, *placed, *host, 4)
    assert "computed beforehand" in str(failed.value)
    one = jnp.asarray(reference_gradient(*host))
    with pytest.raises(ExerciseFailed, match="lives on one device: it was computed outside"):
        check_reduce_scatter(
            lambda x, y, w: jnp.asarray(reference_gradient(*map(np.asarray, (x, y, w)))),
            *placed, *host, 4,
        )
    assert one.shape == (8,)

    def kernel(xb, yb, w):  # local_contribution itself is the package's, and allowed
        return jax.lax.psum_scatter(local_contribution(xb, yb, w, 16), "data", tiled=True)

    wrong = {
        "of type NamedSharding.*\\n.*PartitionSpecs, P\\(...\\), not NamedShardings":
            dict(in_specs=(P("data", None), P("data"), P()), out_specs=sliced),
        "pytree structure.*not a list": dict(in_specs=[P("data", None), P("data"), P()],
                                             out_specs=P("data")),
        "broadcasting.*P\\(\\) hands a device": dict(in_specs=(P(), P("data"), P()),
                                                     out_specs=P("data")),
    }
    for match, specs in wrong.items():
        fn = jax.jit(jax.shard_map(kernel, mesh=mesh, **specs))
        with pytest.raises(ExerciseFailed, match=f"(?s){match}"):
            check_reduce_scatter(fn, *placed, *host, 4)
    def with_global_count(xb, yb, w):  # divides by the global 16 rows, as the notebook does
        return jax.lax.psum_scatter(2 * xb.T @ (xb @ w - yb) / 16, "data", tiled=True)

    whole = jax.jit(jax.shard_map(with_global_count, mesh=mesh, in_specs=(P(), P(), P()),
                                  out_specs=P("data")))
    with pytest.raises(ExerciseFailed, match=r"(?s)4× the expected.*\(P\(\) in in_specs\)"):
        check_reduce_scatter(whole, *placed, *host, 4)
    two = jax.jit(jax.shard_map(lambda xb, yb: xb, mesh=mesh,
                                in_specs=(P("data", None), P("data"), P()), out_specs=P("data")))
    with pytest.raises(ExerciseFailed, match="(?s)positional arguments.*three blocks"):
        check_reduce_scatter(two, *placed, *host, 4)


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


def _held(all_reduce=None, reduce_scatter=None, all_gather=None):
    """The right rule (input and output blocks), with any entry replaced by ``f(n, p)``."""
    right = {"all_reduce": lambda n, p: 2 * n, "reduce_scatter": lambda n, p: n + n / p,
             "all_gather": lambda n, p: n / p + n}
    given = {"all_reduce": all_reduce, "reduce_scatter": reduce_scatter, "all_gather": all_gather}
    return lambda n, p: {k: (given[k] or f)(n, p) for k, f in right.items()}


@pytest.mark.parametrize(
    "rule, match",
    [
        (_held(all_reduce=lambda n, p: n + n / p), "every device holds the whole"),
        (_held(reduce_scatter=lambda n, p: (n + n / p) / 4), r"bytes \(4 per float32"),
        (_held(reduce_scatter=lambda n, p: n + (p - 1) * n / p), "what a ring sends per rank"),
        (_held(all_gather=lambda n, p: str(n)), "give a number of bytes"),
        (_held(all_reduce=lambda n, p: 16 * n), "bytes, not bits"),
        (_held(all_reduce=lambda n, p: 2 * n / 2**20), "not KiB or MiB"),
        (_held(all_reduce=lambda n, p: 2 * n * p), "not all 4 together"),
        (_held(all_reduce=lambda n, p: n), "the input block is still on the device"),
        (_held(reduce_scatter=lambda n, p: n), "count the output too"),
        (_held(all_gather=lambda n, p: 2 * n), "starts from the reduce-scattered slice"),
        (_held(reduce_scatter=lambda n, p: n + n / (p - 1)), "the rule with p − 1 in place of p"),
        (_held(all_gather=lambda n, p: n / (p - 1) + n), "the rule with p − 1 in place of p"),
        (lambda n, p: _held()(32, 4), "the rule for a 32-byte gradient, not the 48 bytes given: "
                                      "use the arguments n_bytes and p"),  # the notebook's globals
        (lambda n, p: _held()(32, p), "use the arguments n_bytes and p"),  # gradient_bytes only
        (_held(all_reduce=lambda n, p: float("nan")), "finite number"),
        (lambda n, p: {**_held()(n, p), "psum": n}, "'psum' is not asked for$"),
        (lambda n, p: n, "must be a dict with the keys all_gather, all_reduce, reduce_scatter"),
    ],
)
def test_stored_bytes_rule_names_the_likely_mistake(rule, match):
    with pytest.raises(ExerciseFailed, match=match) as failed:
        check_stored_bytes_rule(rule, jax.devices())
    assert "measured" not in str(failed.value)  # the answer is not given away


def test_stored_bytes_rule_is_judged_on_sizes_the_notebook_never_showed(capsys):
    devices = jax.devices()
    check_stored_bytes_rule(_held(), devices)  # floats from "/" are accepted
    assert "48 B on p = 4 and 24 B on p = 2" in capsys.readouterr().out
    check_stored_bytes_rule(
        lambda n, p: {"all_reduce": np.int64(2 * n), "reduce_scatter": n + n // p,
                      "all_gather": [n // p + n][0]},
        devices,
    )
    wrong = [
        (_held(reduce_scatter=lambda n, p: 2 * n), "keeps one slice of the sum"),
        (lambda n, p: {"all_reduce": n}, "it lacks 'all_gather', 'reduce_scatter'"),
        (lambda n: {"all_reduce": n}, r"stored_bytes\(48, 4\) raised TypeError"),
        ({"all_reduce": 64, "reduce_scatter": 40, "all_gather": 40}, "must be a function"),
        (None, "stored_bytes is not defined"),
    ]
    for rule, match in wrong:
        with pytest.raises(ExerciseFailed, match=match):
            check_stored_bytes_rule(rule, devices)
    with pytest.raises(ExerciseFailed, match="the device list was changed after setup"):
        check_stored_bytes_rule(_held(), devices[:1])  # a one-device list from a rebound name
    with pytest.raises(ExerciseFailed, match="right for p = 4, not for p = 2: use the argument p"):
        check_stored_bytes_rule(lambda n, p: _held()(n, 4), devices)


def _two_state_step(mesh, update=None, *, collective="psum_scatter", lr=0.1, b1=0.9, b2=0.999,
                    eps=1e-3, gather=True, first_slice=False, whole_w=False, check_vma=True,
                    invarying=True, extra_gather=False):
    """A student's jitted two-state step; ``update(w, m, s, g)`` replaces the right rule."""

    def right(w, m, s, g):
        m = b1 * m + (1 - b1) * g
        s = b2 * s + (1 - b2) * g**2
        return w - lr * m / (jnp.sqrt(s) + eps), m, s

    def kernel(x_block, y_block, w, m, s):
        partial = 2 * x_block.T @ (x_block @ w - y_block) / (x_block.shape[0] * mesh.size)
        if extra_gather:  # every device gathers all rows: right numbers, one more collective
            x_all = jax.lax.all_gather(x_block, "data", tiled=True)
            y_all = jax.lax.all_gather(y_block, "data", tiled=True)
            partial = 2 * x_all.T @ (x_all @ w - y_all) / (x_all.shape[0] * mesh.size)
        k = m.shape[0]
        i = jax.lax.axis_index("data")
        if collective == "psum":  # all-reduced, then cut: the same numbers
            g = jax.lax.dynamic_slice_in_dim(jax.lax.psum(partial, "data"), i * k, k)
        else:
            g = jax.lax.psum_scatter(partial, "data", tiled=True)
        w_slice = w[:k] if first_slice else jax.lax.dynamic_slice_in_dim(w, i * k, k)
        w_slice = w if whole_w else w_slice  # forgot to cut this device's slice
        w_new, m, s = (update or right)(w_slice, m, s, g)
        to = {"to": "invarying"} if invarying else {}  # the gathered w_next: the same everywhere
        return (jax.lax.all_gather(w_new, "data", tiled=True, **to) if gather else w_new), m, s

    specs = (P("data", None), P("data"), P(), P("data"), P("data"))
    out = (P() if gather else P("data"), P("data"), P("data"))
    return jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=specs, out_specs=out,
                                 check_vma=check_vma))


def test_two_state_update(setup):
    mesh = setup[0]
    kwargs = dict(lr=0.1, beta1=0.9, beta2=0.999, eps=1e-3)
    check = lambda step: check_two_state_update(step, mesh, (16, 8), **kwargs)  # noqa: E731
    check(_two_state_step(mesh))
    with pytest.raises(ExerciseFailed, match="all-gather, all-gather, all-gather, reduce-scatter"):
        check(_two_state_step(mesh, extra_gather=True))
    lr, b1, b2, eps = 0.1, 0.9, 0.999, 1e-3
    mistakes = {
        "β1 and 1−β1 are swapped": lambda w, m, s, g: (
            w - lr * ((1 - b1) * m + b1 * g) / (jnp.sqrt(b2 * s + (1 - b2) * g**2) + eps),
            (1 - b1) * m + b1 * g, b2 * s + (1 - b2) * g**2),
        "the gradient must be squared": lambda w, m, s, g: (
            w, b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g),
        "ε goes outside the square root": lambda w, m, s, g: (
            w - lr * (b1 * m + (1 - b1) * g) / jnp.sqrt(b2 * s + (1 - b2) * g**2 + eps),
            b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g**2),
        "the step goes the wrong way": lambda w, m, s, g: (
            w + lr * (b1 * m + (1 - b1) * g) / (jnp.sqrt(b2 * s + (1 - b2) * g**2) + eps),
            b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g**2),
        "no bias correction": lambda w, m, s, g: (
            w - lr * ((b1 * m + (1 - b1) * g) / (1 - b1))
            / (jnp.sqrt((b2 * s + (1 - b2) * g**2) / (1 - b2)) + eps),
            b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g**2),
        "use the updated states m_next and s_next": lambda w, m, s, g: (
            w - lr * m / (jnp.sqrt(s) + eps), b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g**2),
        # each device divided by its own rows: the gradient is p (4) times too large
        "the gradient is p× too large: divide each device's share by the global row": lambda w,
        m, s, g: (w - lr * (b1 * m + 4 * (1 - b1) * g) / (
            jnp.sqrt(b2 * s + 16 * (1 - b2) * g**2) + eps),
            b1 * m + 4 * (1 - b1) * g, b2 * s + 16 * (1 - b2) * g**2),
        "m and s are swapped in the step": lambda w, m, s, g: (
            w - lr * (b2 * s + (1 - b2) * g**2) / (jnp.sqrt(b1 * m + (1 - b1) * g) + eps),
            b1 * m + (1 - b1) * g, b2 * s + (1 - b2) * g**2),
        "m and s are swapped": lambda w, m, s, g: (
            w - lr * (b2 * s + (1 - b2) * g**2) / (jnp.sqrt(b1 * m + (1 - b1) * g) + eps),
            b2 * s + (1 - b2) * g**2, b1 * m + (1 - b1) * g),
        "the step uses the gradient g where the new momentum m_next belongs": lambda w, m, s,
        g: (w - lr * g / (jnp.sqrt(b2 * s + (1 - b2) * g**2) + eps), b1 * m + (1 - b1) * g,
            b2 * s + (1 - b2) * g**2),
    }
    for match, update in mistakes.items():
        with pytest.raises(ExerciseFailed, match=match):
            check(_two_state_step(mesh, update))
    with pytest.raises(ExerciseFailed, match="every device updated the first slice of w"):
        check(_two_state_step(mesh, first_slice=True))
    # the cheat the check cannot see in the numbers: an all-reduced gradient, then cut
    with pytest.raises(ExerciseFailed, match="the program all-reduces the gradient"):
        check(_two_state_step(mesh, collective="psum"))
    rs, ag = reduce_scatter_gradient(mesh), all_gather_shards(mesh)

    def with_kernels(x, y, w, m, s):  # right numbers, but Kernel calls cannot be traced
        g = rs(x, y, w)
        m, s = 0.9 * m + 0.1 * g, 0.999 * s + 0.001 * g**2
        w_slices = jax.device_put(w, placements(mesh).sliced)
        return ag(w_slices - 0.1 * m / (jnp.sqrt(s) + 1e-3)), m, s

    with pytest.raises(ExerciseFailed, match="calls the package's kernels .reduce_scatter_grad"):
        check(with_kernels)
    jitted_rs, jitted_ag = rs.jitted, ag.jitted

    @jax.jit
    def with_jitted_kernels(x, y, w, m, s):  # the student pass's accepted cheat: no own shard_map
        g = jitted_rs(x, y, w)
        m, s = 0.9 * m + 0.1 * g, 0.999 * s + 0.001 * g**2
        w_slices = jax.lax.with_sharding_constraint(w, placements(mesh).sliced)
        return jitted_ag(w_slices - 0.1 * m / (jnp.sqrt(s) + 1e-3)), m, s

    with pytest.raises(ExerciseFailed, match="runs the package's kernels .* write the jax.shard"):
        check(with_jitted_kernels)
    with pytest.raises(ExerciseFailed, match="is .or wraps. one of the package's kernels"):
        check(rs)
    check(_two_state_step(mesh, check_vma=False, invarying=False))  # the check off: right too
    # all_gather without to="invarying", the check on: JAX's whole explanation, then the hint
    with pytest.raises(ExerciseFailed, match=r"(?s)raised ValueError:\n.*out_specs.*"
                       r"check_vma=False argument.*\nout_specs=P\(\) for w_next.*"
                       r"all_gather\(\.\.\., to=\"invarying\"\)"):
        check(_two_state_step(mesh, invarying=False))
    with pytest.raises(ExerciseFailed, match=r"(?s)raised TypeError:.*broadcasting.*\nw is the "
                       "whole vector on every device .*cut this device's slice of w"):
        check(_two_state_step(mesh, whole_w=True))
    with pytest.raises(ExerciseFailed, match=r"w_next has the right values but the wrong place"):
        check(_two_state_step(mesh, gather=False))
    # a result computed beforehand (on the notebook's data) does not follow the check's inputs
    fixed = _two_state_step(mesh)(*_placed_two_state(mesh))
    with pytest.raises(ExerciseFailed, match="returns the same arrays for different inputs"):
        check(lambda *args: fixed)
    with pytest.raises(ExerciseFailed, match="must return .w_next, m_next, s_next., three arrays"):
        check(lambda *args: fixed[0])
    with pytest.raises(  # the check cell passes None for a name the student has not defined
        ExerciseFailed, match=r"two_state_step is not defined \(or is None\)"
    ):
        check(None)


def _placed_two_state(mesh):
    rows, replicated, sliced = placements(mesh)
    xh, yh, wh = toy_regression()
    m, s = np.zeros(8, np.float32), np.full(8, 1e-4, np.float32)
    return (jax.device_put(xh, rows), jax.device_put(yh, sliced), jax.device_put(wh, replicated),
            jax.device_put(m, sliced), jax.device_put(s, sliced))


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


def test_memory_prediction_of_zero1_counted_like_data_parallel():
    from test_training_checks import MEASURED, N, P, right_memory  # what train measures

    from course_utils.checks import check_memory_prediction

    def zero1_like_dp(n, p):  # zero1 predicted as data parallel
        return {**right_memory(n, p), "zero1": 12 * n}

    with pytest.raises(
        ExerciseFailed, match=r"counts 0 of the three parts as 1/p slices; zero1 keeps the "
        r"momentum \(optimizer state\) in slices of n/p$"
    ):
        check_memory_prediction(zero1_like_dp, MEASURED, N, P)


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


def test_shares_refusal_names_the_notebook_function_that_was_called():
    cells: dict = {"np": np}  # the notebook's namespace: gradient_share in one cell, my_shares
    exec(compile("def gradient_share(x_block, y_block, w, n_rows):\n"  # in the next
                 "    return 2 * x_block.T @ (x_block @ w - y_block) / n_rows\n",
                 "<cell 4>", "exec"), cells)
    exec(compile("def my_shares(x, y, w, p):\n"
                 "    return np.stack([gradient_share(a, b, w, len(x))\n"
                 "                     for a, b in zip(np.split(x, p), np.split(y, p))])\n",
                 "<cell 27>", "exec"), cells)
    with pytest.raises(ExerciseFailed, match="my_shares uses gradient_share, which"):
        check_shares(cells["my_shares"])


def test_reduce_scatter_catches_a_fixed_row_count_and_names_a_wrong_in_spec(setup):
    mesh, _, host, placed = setup
    n_rows = host[0].shape[0]

    def fixed_rows(x_block, y_block, w):  # the notebook's n_rows, closed over
        return jax.lax.psum_scatter(local_contribution(x_block, y_block, w, n_rows), "data",
                                    tiled=True)

    with pytest.raises(ExerciseFailed, match=rf"right for x of {n_rows} rows but 2× too large "
                       r".*fixed row count.*x_block.shape\[0\] × p"):
        check_reduce_scatter(_shard_mapped(mesh, fixed_rows, P("data")), *placed, *host, 4)

    def kernel(x_block, y_block, w):
        return jax.lax.psum_scatter(_share(x_block, y_block, w), "data", tiled=True)

    for specs, named in (((P("data", None), P("data"), P("data")), r"w's in_specs entry .* P\(\)"),
                         ((P(None, "data"), P("data"), P()), r"x's in_specs entry .* "
                          r"P\('data', None\)")):
        wrong = jax.jit(jax.shard_map(kernel, mesh=mesh, in_specs=specs, out_specs=P("data")))
        with pytest.raises(ExerciseFailed, match=rf"(?s)dot_general.*{named}"):
            check_reduce_scatter(wrong, *placed, *host, 4)


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
