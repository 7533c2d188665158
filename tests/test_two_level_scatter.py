"""Step 13's exercise check: the two-level reduce-scatter in one program."""

import jax
import jax.numpy as jnp
import pytest
from notebook_cell import answer

from course_utils import hierarchical_all_reduce, node_local_mesh, ring_scatter_sum
from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.hierarchy import check_two_level_scatter
from course_utils.checks.mesh_order import run_on_two_by_three


def _reordered(x):
    nodes, local = jax.lax.axis_size("node"), jax.lax.axis_size("local")
    x = x.reshape(nodes, local, -1).transpose(1, 0, 2).reshape(-1)  # slices in scatter order
    mine = jax.lax.psum_scatter(x, "local", tiled=True)  # f32[m/local], inside the node
    return jax.lax.psum_scatter(mine, "node", tiled=True)  # f32[m/p], across the nodes


def _by_swapaxes(x):
    n, local = jax.lax.axis_size("node"), jax.lax.axis_size("local")
    x = jnp.swapaxes(x.reshape(n, local, x.shape[0] // (n * local)), 0, 1).ravel()
    return jax.lax.psum_scatter(jax.lax.psum_scatter(x, "local", tiled=True), "node", tiled=True)


def _scatter_dimension(x):  # a 2-D view: scatter rows of local, then rows of node
    nodes, local = jax.lax.axis_size("node"), jax.lax.axis_size("local")
    x = x.reshape(nodes, local, -1)
    mine = jax.lax.psum_scatter(x, "local", scatter_dimension=1, tiled=True)  # [nodes, 1, m/p]
    return jax.lax.psum_scatter(mine, "node", scatter_dimension=0, tiled=True).ravel()


@pytest.mark.parametrize("fn", [_reordered, _by_swapaxes, _scatter_dimension])
def test_right_answers_in_several_forms_pass(fn, capsys):
    check_two_level_scatter(fn, node_local_mesh(2))
    assert "PASSED: two-level reduce-scatter" in capsys.readouterr().out


# (the page's common wrong answers: tests/test_mistakes.py)
@pytest.mark.parametrize("fn, message", [
    (None, "my_two_level_scatter is not defined"),
    (lambda x: jax.lax.psum_scatter(x, ("node", "local"), tiled=True), "the flat schedule"),
    (lambda x: _reordered(x) / 4, "a mean, not the sum"),
    (lambda x: x[: x.shape[0] // 4], "the values are wrong"),
    (lambda x: jax.lax.psum_scatter(x, "local"), "raised"),
    (hierarchical_all_reduce(node_local_mesh(2)), "uses the package's"),
    (lambda x: hierarchical_all_reduce(node_local_mesh(2))(x), "uses the package's "
                                                               "hierarchical_all_reduce"),
])
def test_each_slip_is_named(fn, message):
    with pytest.raises(ExerciseFailed, match=message):
        check_two_level_scatter(fn, node_local_mesh(2))


_BUILT = hierarchical_all_reduce(node_local_mesh(2)).jitted  # a kernel the package built


def _through_built(x):
    total = _BUILT(x[None])[0]
    c = total.shape[0] // jax.lax.axis_size(("node", "local"))
    return jax.lax.dynamic_slice_in_dim(total, jax.lax.axis_index(("node", "local")) * c, c)


def _package_ring_per_level(x):
    nodes, local = jax.lax.axis_size("node"), jax.lax.axis_size("local")
    x = x.reshape(nodes, local, -1).transpose(1, 0, 2).reshape(-1)
    mine = ring_scatter_sum(x.reshape(local, -1), "local")
    return ring_scatter_sum(mine.reshape(nodes, -1), "node")


def _sizes_typed_in(x):
    x = x.reshape(2, 2, -1).transpose(1, 0, 2).reshape(-1)
    return jax.lax.psum_scatter(jax.lax.psum_scatter(x, "local", tiled=True), "node", tiled=True)


@pytest.mark.parametrize("fn, message", [  # the student trial of 2026-12-06
    (_through_built, "uses the package's kernels"),
    (_package_ring_per_level, "uses the package's ring_scatter_sum"),
    (_sizes_typed_in, "a size typed in"),
])
def test_the_trial_s_shortcuts_and_sizes_are_named(fn, message):
    with pytest.raises(ExerciseFailed, match=message):
        check_two_level_scatter(fn, node_local_mesh(2))


def test_on_nodes_of_one_device_the_values_are_checked_and_the_schedule_is_not(capsys):
    mesh = node_local_mesh(jax.device_count())  # one device per node: the levels are one
    check_two_level_scatter(_reordered, mesh)
    out = capsys.readouterr().out
    assert out.startswith("NOT VERIFIED: two-level reduce-scatter (the values are right")
    assert "PASSED" not in out
    with pytest.raises(ExerciseFailed, match="a mean, not the sum"):
        check_two_level_scatter(lambda x: _reordered(x) / jax.device_count(), mesh)


def _swapped(x):  # at 2 × 2 the same program as _reordered; at 2 × 3 not
    nodes, local = jax.lax.axis_size("node"), jax.lax.axis_size("local")
    x = x.reshape(local, nodes, -1).transpose(1, 0, 2).reshape(-1)
    mine = jax.lax.psum_scatter(x, "local", tiled=True)
    return jax.lax.psum_scatter(mine, "node", tiled=True)


def _reads_a_notebook_name(x):
    return _reordered(x)  # a name the subprocess does not have


def test_nodes_and_local_swapped_is_caught_on_two_nodes_of_three():
    assert node_local_mesh(2).shape["local"] == 2  # the 2 × 2 mesh where the two coincide
    with pytest.raises(ExerciseFailed, match="on 2 nodes of 3 devices .*nodes and local swapped "
                                             "in the reorder"):
        check_two_level_scatter(_swapped, node_local_mesh(2))


@pytest.mark.parametrize("fn, why", [
    (lambda x: _reordered(x), "only a function defined with def"),
    (_reads_a_notebook_name, "NameError: name '_reordered' is not defined"),
])
def test_when_the_order_cannot_be_checked_it_is_not_verified_never_passed(fn, why, capsys):
    check_two_level_scatter(fn, node_local_mesh(2))
    out = capsys.readouterr().out
    assert out.startswith("NOT VERIFIED: two-level reduce-scatter (") and "PASSED" not in out
    assert f"the order could not be run on 2 nodes of 3: {why}" in out
    assert "write my_two_level_scatter as one function with def" in out
    assert "run the step with N_DEVICES = 6 or 8" in out


# the sizes as a student reads them on the page: its setup cell defines mesh, NODES and LOCAL
READS_THE_PAGE = {
    "mesh.shape": 'nodes, local = mesh.shape["node"], mesh.shape["local"]',
    "NODES and LOCAL": "nodes, local = NODES, LOCAL",
}


def _page_answer(sizes: str, swapped: bool):
    order = "local, nodes" if swapped else "nodes, local"
    source = (f"def my_two_level_scatter(x):\n    {sizes}\n"
              f"    xr = x.reshape({order}, -1).transpose(1, 0, 2).reshape(-1)\n"
              "    return jax.lax.psum_scatter(jax.lax.psum_scatter(xr, 'local', tiled=True), "
              "'node', tiled=True)\n")
    mesh = node_local_mesh(2)
    return answer(source, "my_two_level_scatter", mesh=mesh, NODES=2, LOCAL=mesh.shape["local"])


@pytest.mark.parametrize("sizes", READS_THE_PAGE.values(), ids=READS_THE_PAGE)
def test_an_answer_reading_the_page_s_names_is_run_on_two_nodes_of_three(sizes, capsys):
    check_two_level_scatter(_page_answer(sizes, swapped=False), node_local_mesh(2))
    assert capsys.readouterr().out.startswith("PASSED: two-level reduce-scatter")
    with pytest.raises(ExerciseFailed, match="on 2 nodes of 3 devices .*nodes and local swapped "
                                             "in the reorder"):
        check_two_level_scatter(_page_answer(sizes, swapped=True), node_local_mesh(2))


def test_a_jitted_shard_map_passed_as_the_function_is_told_to_pass_the_plain_one():
    mesh = node_local_mesh(2)
    spec = jax.P(("node", "local"), None)
    wrapped = jax.jit(jax.shard_map(lambda b: _reordered(b[0])[None], mesh=mesh, in_specs=spec,
                                    out_specs=spec))
    with pytest.raises(ExerciseFailed, match="pass the plain per-device function, not a "
                                             r"jax.shard_map \(or jax.jit of one\)"):
        check_two_level_scatter(wrapped, mesh)


def test_a_subprocess_that_does_not_finish_is_reported():
    run = run_on_two_by_three(_reordered, "course_utils.checks.hierarchy:values_slip", timeout=0.01)
    assert not run.ran and "did not finish" in run.message
