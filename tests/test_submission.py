"""course check-submission: per-exercise reports for right, wrong, unsolved, broken submissions."""

import hashlib
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course_utils.tools.errors import CourseError
from course_utils.tools.notebooks.run import find_notebooks
from course_utils.tools.notebooks.student import build
from course_utils.tools.notebooks.submission import (
    FAILED,
    NOT_ATTEMPTED,
    PASSED,
    check_submission,
)

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "notebooks"
EXERCISES = [p for p in find_notebooks(SOLUTIONS) if "### BEGIN SOLUTION" in p.read_text()]


@pytest.fixture(scope="module")
def edition(tmp_path_factory):
    out = tmp_path_factory.mktemp("student")
    build(find_notebooks(SOLUTIONS), out)
    return out


def _answer(edition: Path, tmp_path: Path, name: str, code: str) -> Path:
    """The student notebook ``name`` with its (only) solution cell replaced by ``code``."""
    nb = nbformat.read(edition / name, as_version=4)
    cell = next(c for c in nb.cells if "solution" in c.metadata.get("tags", []))
    cell.source = code
    target = tmp_path / name
    nbformat.write(nb, target)
    return target


def _restore_solutions(edition: Path, tmp_path: Path, solution: Path) -> Path:
    theirs = nbformat.read(edition / solution.name, as_version=4)
    ours = [
        c
        for c in nbformat.read(solution, as_version=4).cells
        if "solution" in c.metadata.get("tags", [])
    ]
    for cell, reference in zip(
        [c for c in theirs.cells if "solution" in c.metadata.get("tags", [])], ours
    ):
        cell.source = reference.source
    target = tmp_path / solution.name
    nbformat.write(theirs, target)
    return target


@pytest.mark.parametrize("solution", EXERCISES, ids=lambda p: p.stem)
def test_solutions_put_back_give_the_solution_notebooks_code(edition, tmp_path, solution):
    # strict nbval runs the solution notebooks in the same test run; with their code restored,
    # a submission is that notebook, so only two are also run end to end below
    restored = nbformat.read(_restore_solutions(edition, tmp_path, solution), as_version=4)
    original = nbformat.read(solution, as_version=4)
    assert [c.source for c in restored.cells if c.cell_type == "code"] == [
        c.source for c in original.cells if c.cell_type == "code"
    ]


@pytest.mark.parametrize("name", ["03_collectives", "07_row_permutation_exercise"])
def test_reference_solutions_put_back_pass(edition, tmp_path, name):
    results = check_submission(
        _restore_solutions(edition, tmp_path, SOLUTIONS / f"{name}.ipynb"), SOLUTIONS
    )
    assert results and all(r.status == PASSED for r in results), results


REBOUND_DATA = """xh, yh = xh[::-1].copy(), yh[::-1].copy()
x2, y2 = jax.device_put(xh, rows), jax.device_put(yh, features)
w2 = jax.device_put(w2h, replicated)
g_all = all_reduce(x2, y2, w2)
g_gathered = all_gather(reduce_scatter(x2, y2, w2))"""


def test_rebinding_xh_and_yh_as_the_text_invites_passes(edition, tmp_path):
    name = "07_row_permutation_exercise.ipynb"
    (result,) = check_submission(_answer(edition, tmp_path, name, REBOUND_DATA), SOLUTIONS)
    assert result.status == PASSED, result


def test_unsolved_is_not_attempted_and_exits_1(course, edition, without_nbgrader):
    # check-submission does not need nbgrader (the instructor extra): here it cannot import it
    path = edition / "07_row_permutation_exercise.ipynb"
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    status, output = course("check-submission", str(path), cwd=ROOT)
    assert status == 1
    assert "check_joint_permutation" in output and NOT_ATTEMPTED in output
    assert "0 passed, 0 failed, 1 not attempted" in output
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_check_submission_imports_no_nbgrader():
    code = "import sys, course_utils.tools.notebooks.submission; print(sorted(sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "'nbgrader'" not in done.stdout


PERMUTE_LABELS_ONLY = """x2 = jax.device_put(xh, rows)
y2 = jax.device_put(yh[::-1].copy(), features)
w2 = jax.device_put(w2h, replicated)
g_all = all_reduce(x2, y2, w2)
g_gathered = all_gather(reduce_scatter(x2, y2, w2))"""

REPLICATED_KERNEL = """def my_kernel(x_block, y_block, w):
    return jax.lax.psum(local_contribution(x_block, y_block, w, n_rows), "data")

specs = (P("data", None), P("data"), P())
my_reduce_scatter = jax.jit(
    jax.shard_map(my_kernel, mesh=mesh, in_specs=specs, out_specs=P())
)
g_mine = my_reduce_scatter(x, y, w)"""

# no kernel at all: the reference gradient computed on the host and placed by features
DEVICE_PUT_REFERENCE = """def my_reduce_scatter(x, y, w):
    return jax.device_put(reference_gradient(xh, yh, wh), features)

g_mine = my_reduce_scatter(x, y, w)"""

REVERSE_LABELS_REPLICATED = """xh, yh = xh[::-1].copy(), yh[::-1].copy()
x2, y2 = jax.device_put(xh, rows), jax.device_put(yh, replicated)
w2 = jax.device_put(w2h, replicated)
g_all = all_reduce(x2, y2, w2)
g_gathered = all_gather(reduce_scatter(x2, y2, w2))"""

WITHOUT_W2 = """x2 = jax.device_put(xh[::-1].copy(), rows)
y2 = jax.device_put(yh[::-1].copy(), features)
g_all = all_reduce(x2, y2, w2h)
g_gathered = all_gather(reduce_scatter(x2, y2, w2h))"""

LOCAL_NORMALIZATION = """my_shares = np.stack([2 * xb.T @ (xb @ wh - yb) / len(yb)
                      for xb, yb in zip(np.split(xh, N_DEVICES), np.split(yh, N_DEVICES))])"""


RING_STEP_WITHOUT_SEND = """def my_step(partial, chunks, s, axis_name):
    i = jax.lax.axis_index(axis_name)
    return partial + chunks[(i - s - 2) % chunks.shape[0]]"""
WRONG_BUDGET_ROW = """row = {"ranks": N_DEVICES, "all_reduce_bytes": nbytes,
       "scatter_gather_bytes": nbytes, "shard_storage_bytes": nbytes // N_DEVICES}"""


ZERO1_LIKE_DP = """predicted_memory = {
    "data_parallel": 12 * n, "zero1": 12 * n, "zero2": 4 * n + 8 * n // p, "zero3": 12 * n // p
}"""
LINK_IN_BITS = """p = H * D
my_flat_ms = 2 * (p - 1) / p * N_BYTES / RATE_BITS * 1e3
my_two_level_ms = 2 * (H - 1) / H * N_BYTES / RATE_BITS * 1e3"""
FEEDBACK_OF_G = """def my_error_feedback(g, residual, k):
    _, idx = jax.lax.top_k(jnp.abs(g), k)
    sent = jnp.zeros_like(g).at[idx].set(g[idx])
    return sent, g + residual - sent"""

@pytest.mark.parametrize(
    "name, code, message",
    [
        ("07_row_permutation_exercise.ipynb", PERMUTE_LABELS_ONLY, "g_all: 8 of 8 entries wrong"),
        (
            "03_collectives.ipynb",
            REPLICATED_KERNEL,
            "right values but the wrong placement: it is replicated",
        ),
        (
            "03_collectives.ipynb",
            DEVICE_PUT_REFERENCE,
            "the right result, but the compiled program of my_reduce_scatter has no collective",
        ),
        (
            "03_collectives.ipynb",
            "g_mine = jax.device_put(reference_gradient(xh, yh, wh), features)",
            "my_reduce_scatter is not defined",
        ),
        (
            "07_row_permutation_exercise.ipynb",
            REVERSE_LABELS_REPLICATED,
            "y2 has the right values but the wrong placement: it is replicated",
        ),
        ("07_row_permutation_exercise.ipynb", WITHOUT_W2, "w2 is not defined"),
        ("02_partial_gradients.ipynb", LOCAL_NORMALIZATION, "4× the expected value"),
        ("08_communication_budget.ipynb", WRONG_BUDGET_ROW, "that is N; in each of its two passes"),
        ("11_ring_by_hand.ipynb", RING_STEP_WITHOUT_SEND, "no device receives anything"),
        ("12_latency_and_bucketing.ipynb", "my_bucket = max(EX_CANDIDATES)", "a smaller bucket"),
        (
            "13_hierarchical_all_reduce.ipynb",
            'def my_two_level(x):\n    return jax.lax.psum(x, ("node", "local"))',
            "that is the flat schedule",
        ),
        (
            "05_timing.ipynb",
            'predicted_stored = {"all_reduce": 32, "reduce_scatter": 32, "all_gather": 32}',
            "each device keeps one slice of the sum",
        ),
        (
            "04_placement_checks.ipynb",
            "predicted = [(4, 8)] * N_DEVICES",
            "wrong shard shape on device 0",
        ),
        (
            "07_row_permutation_exercise.ipynb",
            "g_all = 1 / 0",
            "the solution cell raised ZeroDivisionError",
        ),
        ("14_zero_stages.ipynb", ZERO1_LIKE_DP, "zero1 keeps optimizer in slices of n/p"),
        ("15_compressed_communication.ipynb", FEEDBACK_OF_G, "you send the top k of g alone"),
        ("16_local_sgd.ipynb", "my_h = 16", "so does a smaller H"),
        ("17_simulated_cluster.ipynb", LINK_IN_BITS, "the rate is in bits per second"),
    ],
)
def test_wrong_solutions_fail_with_their_specific_message(edition, tmp_path, name, code, message):
    (result,) = check_submission(_answer(edition, tmp_path, name, code), SOLUTIONS)
    assert result.status == FAILED and message in result.message


def test_a_loop_is_stopped_by_the_timeout(edition, tmp_path):
    path = _answer(edition, tmp_path, "08_communication_budget.ipynb", "while True:\n    pass")
    (result,) = check_submission(path, SOLUTIONS, timeout=5)
    assert result.status == FAILED and "longer than 5 s" in result.message


def test_the_submissions_checks_are_not_the_ones_that_run(edition, tmp_path):
    path = _answer(edition, tmp_path, "08_communication_budget.ipynb", WRONG_BUDGET_ROW)
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if "check" in cell.metadata.get("tags", []):
            cell.source = "print('PASSED: trust me')"
    nbformat.write(nb, path)
    (result,) = check_submission(path, SOLUTIONS)
    assert result.status == FAILED and "PASSED" not in result.message


@pytest.mark.parametrize(
    "content, name, message",
    [
        ("this is not json", "07_x.ipynb", "is not a Jupyter notebook"),
        ('{"cells": 3}', "07_x.ipynb", "is not a Jupyter notebook"),
        (None, "99_unknown.ipynb", "no solution notebook"),
        ("no file", "missing.ipynb", "no such file"),
    ],
)
def test_broken_submissions_get_one_line(course, tmp_path, content, name, message):
    path = tmp_path / name
    if content is None:
        nbformat.write(nbformat.v4.new_notebook(), path)
    elif content != "no file":
        path.write_text(content)
    status, output = course("check-submission", str(path), cwd=ROOT)
    assert status == 2
    assert message in output and len(output.strip().splitlines()) == 1


def test_a_deleted_solution_cell_is_reported(edition, tmp_path):
    nb = nbformat.read(edition / "07_row_permutation_exercise.ipynb", as_version=4)
    nb.cells = [c for c in nb.cells if "solution" not in c.metadata.get("tags", [])]
    nbformat.write(nb, tmp_path / "07_row_permutation_exercise.ipynb")
    with pytest.raises(CourseError, match="has 0 cells tagged 'solution', the exercise has 1"):
        check_submission(tmp_path / "07_row_permutation_exercise.ipynb", SOLUTIONS)


def test_a_broken_course_setup_is_not_blamed_on_the_submission(edition, tmp_path):
    name = "07_row_permutation_exercise.ipynb"
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    nb = nbformat.read(SOLUTIONS / name, as_version=4)
    setup = next(c for c in nb.cells if c.cell_type == "code" and "import" in c.source)
    setup.source += "\nfrom course_utils import no_such_name"
    nbformat.write(nb, solutions / name)
    submission = _restore_solutions(edition, tmp_path, SOLUTIONS / name)
    with pytest.raises(CourseError, match=r"the course's own cell \d+, before any exercise, "
                       r"raised ImportError: cannot import name 'no_such_name'.*not a fault of "
                       r"the submission: reinstall the course"):
        check_submission(submission, solutions)


def test_a_step_without_exercises_has_nothing_to_check(course):
    status, output = course("check-submission", str(SOLUTIONS / "01_mesh_setup.ipynb"), cwd=ROOT)
    assert status == 0 and "this step has no exercises" in output


SCATTER_INTO_P = """def my_kernel(x_block, y_block, w):
    partial = local_contribution(x_block, y_block, w, n_rows)
    return jax.lax.psum_scatter(partial, "data", tiled=True)

specs = (P("data", None), P("data"), P())
my_reduce_scatter = jax.jit(
    jax.shard_map(my_kernel, mesh=mesh, in_specs=specs, out_specs=P())
)
g_mine = my_reduce_scatter(x, y, w)"""


def test_a_jax_error_is_shown_whole(edition, tmp_path):
    (result,) = check_submission(_answer(edition, tmp_path, "03_collectives.ipynb", SCATTER_INTO_P))
    assert result.status == FAILED and result.message.startswith("the solution cell raised")
    assert len(result.message.splitlines()) > 1, result.message  # JAX explains on later lines


def test_a_kernel_that_does_not_start_gets_one_line(edition, tmp_path, monkeypatch, capsys):
    from course_utils.tools.cli import main
    from course_utils.tools.notebooks import submission

    def slow_start(*args, **kwargs):
        raise RuntimeError("Kernel didn't respond in 60 seconds")

    monkeypatch.setattr(submission, "run_in_fresh_kernel", slow_start)
    path = _answer(edition, tmp_path, "07_row_permutation_exercise.ipynb", "pass")
    assert main(["check-submission", str(path)]) == 2
    out = capsys.readouterr().err.strip()
    assert out.count("\n") == 0 and out.startswith("course check-submission: error: ")
    assert "Kernel didn't respond in 60 seconds" in out
    assert "check fewer notebooks at once and try again" in out
