"""Step 19's package copy: the bucketed backward pass on a compute device and a stream, and the
collective matmul, against jax.grad and A @ B, with where each result lives."""

import jax
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.collectives import collective_matmul as cm
from course_utils.collectives import overlap as ov
from course_utils.results.overlap import (
    BackwardRow,
    OverlapResults,
    balanced_rate,
    over_runs,
    overlap_ratio,
)
from course_utils.results.records import from_json

TOWER = ov.Tower(width=32, layers=3, rows=16)


def _meshes(devices_per_host=2):
    devices = np.asarray(jax.devices()[: 2 * devices_per_host]).reshape(2, devices_per_host)
    return ov.stream_meshes(Mesh(devices, ov.AXES))


def _placed(mesh, value, spec):
    return jax.device_put(value, NamedSharding(mesh, spec))


def _problem(compute):
    x, y, ws = ov.tower_problem(TOWER, 2)
    rows = P("host", None)
    return x, y, ws, _placed(compute, x, rows), _placed(compute, y, rows), [
        _placed(compute, w, P()) for w in ws]


def test_every_schedule_gives_the_global_gradient_where_it_was_sent_from():
    compute, stream = _meshes()
    x, y, ws, xs, ys, wss = _problem(compute)
    want = jax.grad(ov.tower_loss)(ws, x, y)
    progs = ov.programs(compute, stream, len(x))
    hs = progs.forward(wss, xs)
    schedules = {
        "overlapped": (ov.overlapped_backward(progs, hs, wss, ys), {1, 3}),
        "serial": (ov.serial_backward(progs, hs, wss, ys), {1, 3}),
        "same device": (ov.overlapped_backward(ov.programs(compute, compute, len(x)), hs, wss,
                                               ys), {0, 2}),
        "one program": (ov.one_program_backward(compute, len(x))(hs, wss, ys), {0, 2}),
    }
    for name, (grads, devices) in schedules.items():
        assert len(grads) == TOWER.layers, name
        for got, expected in zip(grads, want):
            np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-5, atol=1e-6,
                                       err_msg=name)
            assert {d.id for d in got.sharding.device_set} == devices, name
            assert got.sharding.is_fully_replicated, name  # the whole sum on every host


def test_stream_meshes_take_each_hosts_second_device_and_refuse_other_axes():
    compute, stream = _meshes()
    assert [d.id for d in compute.devices] == [0, 2] and [d.id for d in stream.devices] == [1, 3]
    alone = _meshes(devices_per_host=1)
    assert [d.id for d in alone[1].devices] == [d.id for d in alone[0].devices] == [0, 1]
    with pytest.raises(ValueError, match=r"axes \('host', 'device'\)"):
        ov.stream_meshes(Mesh(np.asarray(jax.devices()), ("d",)))


def test_move_copies_each_shard_to_the_device_with_its_index():
    compute, stream = _meshes()
    value = np.arange(8.0, dtype=np.float32).reshape(4, 2)
    moved = ov.move(_placed(compute, value, P("host", None)), NamedSharding(stream, P("host")))
    np.testing.assert_array_equal(np.asarray(moved), value)
    assert {(s.device.id, s.index[0].start) for s in moved.addressable_shards} == {(1, 0), (3, 2)}


@pytest.mark.parametrize("hosts", [2, 4])
def test_the_collective_matmul_three_ways_is_a_times_b_split_by_columns(hosts):
    devices = np.asarray(jax.devices()).reshape(hosts, -1)
    compute, stream = ov.stream_meshes(Mesh(devices, ov.AXES))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 6)).astype(np.float32), rng.standard_normal((6, 8)).astype(
        np.float32)
    a_c, b_c, a_s = (_placed(compute, a, cm.MATMUL_ROWS), _placed(compute, b, cm.MATMUL_COLUMNS),
                     _placed(stream, a, cm.MATMUL_ROWS))
    for c in (cm.gathered_matmul(compute)(a_c, b_c), cm.looped_matmul(compute)(a_c, b_c),
              cm.by_hand_matmul(cm.by_hand_programs(compute, stream), a_c, a_s, b_c)):
        np.testing.assert_allclose(np.asarray(c), a @ b, rtol=1e-5)
        assert c.sharding.spec == cm.MATMUL_COLUMNS and c.sharding.mesh.devices.tolist() == list(
            compute.devices)


def _row(rate, run, compute, comm, overlapped):
    return {"link_rate": rate, "run": run, "compute_s": compute, "communication_s": comm,
            "serial_s": compute + comm, "overlapped_s": overlapped,
            "same_device_s": compute + comm, "one_program_s": compute + comm}


def test_the_balanced_rate_and_the_ratio_read_the_runs():
    rows = [_row("100mbit", r, 0.6, 1.4, 1.45) for r in range(3)] + [
        _row("200mbit", r, 0.6, c, o) for r, (c, o) in enumerate([(0.7, 0.75), (0.72, 0.8),
                                                                  (0.69, 0.9)])]
    meta = {"command": "course cluster --measure overlap", "runs": 3, "seconds": 1.0,
            "machine": {"python": "3.11", "jax": "0.10.2", "jaxlib": "0.10.2", "cores": 2}}
    cluster = {"hosts": 2, "devices_per_host": 2, "plan": "full", "tcp": "reno",
               "default_tcp": "cubic"}
    sizes = {"width": 8, "layers": 2, "rows": 4, "matmul": [4, 4, 4]}
    results = from_json(OverlapResults, {"meta": meta, "cluster": cluster, "sizes": sizes,
                                         "backward": rows, "matmul": []})
    assert balanced_rate(results) == "200mbit"
    ratios = over_runs(results.backward, "200mbit", overlap_ratio)
    assert ratios.median == pytest.approx(0.8 / 0.72) and ratios.high == pytest.approx(0.9 / 0.69)
    assert overlap_ratio(from_json(BackwardRow, _row("x", 0, 1.0, 0.5, 1.5))) == 1.5
    with pytest.raises(ValueError, match=r"no run at 1gbit; the rates measured are"):
        over_runs(results.backward, "1gbit", overlap_ratio)


def _right(progs, hs, ws, y):
    g, summed = progs.top(hs[-1], y), []
    for i in reversed(range(len(ws))):
        grad, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
        summed.append(progs.all_reduce(jax.device_put(grad, progs.stream)))
    return summed[::-1]


def _reading(progs, hs, ws, y):  # waits without block_until_ready: np.asarray of each sum
    g, summed = progs.top(hs[-1], y), []
    for i in reversed(range(len(ws))):
        grad, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
        summed.append(progs.all_reduce(jax.device_put(grad, progs.stream)))
        np.asarray(summed[-1])
    return summed[::-1]


def _first_layer_first(progs, hs, ws, y):
    g, summed = progs.top(hs[-1], y), []
    for i in range(len(ws)):
        grad, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
        summed.append(progs.all_reduce(jax.device_put(grad, progs.stream)))
    return summed


def _grad_returned(progs, hs, ws, y):  # the right calls, then other arrays of the right values
    jax.block_until_ready(_right(progs, hs, ws, y))
    grads = jax.grad(ov.tower_loss)([np.asarray(w) for w in ws], np.asarray(hs[0]),
                                    np.asarray(y))
    return [jax.device_put(g, NamedSharding(progs.stream.mesh, P())) for g in grads]


def _unsent(progs, hs, ws, y):
    g, grads = progs.top(hs[-1], y), []
    for i in reversed(range(len(ws))):
        grad, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
        grads.append(grad)
    return grads[::-1]


def _g_in_sent(progs, hs, ws, y):
    g, summed = progs.top(hs[-1], y), []
    for i in reversed(range(len(ws))):
        _, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
        summed.append(progs.all_reduce(jax.device_put(g, progs.stream)))
    return summed[::-1]


@pytest.mark.parametrize("fn, message", [
    (lambda *a: _right(*a)[::-1], "your list is last layer first"),
    (_reading, "your loop waits for a result"),
    (lambda *a: ov.overlapped_backward(*a), "calls the package's overlapped_backward"),
    (_unsent, "nothing went through progs.all_reduce"),
    (_first_layer_first, r"starts at the top.*layers \[0, 1, 2, 3\]"),
    (_grad_returned, "gradient 0 is not what progs.all_reduce returned"),
    (lambda *a: [np.asarray(g) for g in _right(*a)], "gradient 0 is a numpy.ndarray"),
    (lambda *a: [(o := _right(*a))[0], o[0], o[2], o[3]], "gradient 1 is layer 0's all-reduce"),
    (lambda p, *a: [jax.device_put(g, p.stream) for g in _right(p, *a)],
     r"gradient 0 is split over devices \[1, 3\]"),
    (_g_in_sent, r"gradient 0 should be one array f32\[32, 32\]"),
    (lambda *a: _right(*a)[:2], "return a list of 4 gradients"),
])
def test_the_overlap_check_names_each_mistake(fn, message):
    from course_utils.checks import ExerciseFailed, check_overlapped_backward

    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 2), ov.AXES)
    with pytest.raises(ExerciseFailed, match=message):
        check_overlapped_backward(fn, mesh)


@pytest.mark.parametrize("hosts, per_host", [(1, 1), (1, 2)])
def test_on_one_host_the_check_passes_the_loop_and_still_tells_a_wait(hosts, per_host, capsys):
    from course_utils.checks import ExerciseFailed, check_overlapped_backward

    mesh = Mesh(np.asarray(jax.devices()[: hosts * per_host]).reshape(hosts, per_host), ov.AXES)
    check_overlapped_backward(_right, mesh)  # one host: the gate must not run in this thread
    assert "PASSED: the overlapped backward pass" in capsys.readouterr().out
    with pytest.raises(ExerciseFailed, match="your loop waits for a result"):
        check_overlapped_backward(_reading, mesh)


def test_the_overlap_check_passes_the_loop_even_if_it_waits_once_all_is_dispatched(capsys):
    from course_utils.checks import check_overlapped_backward

    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 2), ov.AXES)
    check_overlapped_backward(_right, mesh)
    check_overlapped_backward(lambda *a: jax.block_until_ready(_right(*a)), mesh)
    out = capsys.readouterr().out
    assert out.count("PASSED: the overlapped backward pass") == 2
    assert "equal to the package's copy" in out


def test_one_program_of_the_cluster_tower_sends_one_combined_all_reduce():
    compute, _ = _meshes()
    big, rows = ov.TOWER, P("host", None)
    n = big.rows * compute.size

    def spec(shape, s):
        return jax.ShapeDtypeStruct(shape, np.float32, sharding=NamedSharding(compute, s))

    hs = [spec((n, big.width), rows) for _ in range(big.layers + 1)]
    ws = [spec((big.width, big.width), P()) for _ in range(big.layers)]
    text = ov.one_program_backward(compute, n).lower(hs, ws, hs[-1]).compile().as_text()
    assert text.count(" all-reduce(") == 1  # the 16 psums of 1 MiB merged by the combiner


_THUNKS = """
import jax, numpy as np
from jax.sharding import Mesh, NamedSharding
from course_utils.collectives import collective_matmul as cm, overlap as ov
compute, _ = ov.stream_meshes(Mesh(np.asarray(jax.devices()).reshape(2, 2), ov.AXES))
a = jax.device_put(np.ones((128, 32), np.float32), NamedSharding(compute, cm.MATMUL_ROWS))
b = jax.device_put(np.ones((32, 128), np.float32), NamedSharding(compute, cm.MATMUL_COLUMNS))
cm.looped_matmul(compute)(a, b).block_until_ready()
"""


def test_the_collective_matmul_on_two_hosts_runs_its_operations_one_after_another():
    """Step 19's Why: on two hosts the loop is a program of few thunks, which XLA:CPU's thunk
    executor runs sequentially (its log says so), so nothing inside it overlaps."""
    import os
    import re
    import subprocess
    import sys

    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", TF_CPP_VMODULE="thunk_executor=2",
               XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", _THUNKS], env=env, capture_output=True,
                          text=True, timeout=300, check=True)
    made = re.findall(r"ThunkExecutor with (\d+) thunks.*is_sequential=(\w+)", done.stderr)
    assert made, "XLA no longer logs its thunk executors: re-check step 19's matmul Why"
    thunks, sequential = made[-1]
    assert sequential == "true" and int(thunks) <= 8, made


def _overlap(serial=False, moved=True):
    def loop(progs, hs, ws, y):
        g, grads, summed = progs.top(hs[-1], y), [], []
        for i in reversed(range(len(ws))):
            grad, g = progs.backward(hs[i], hs[i + 1], g, ws[i])
            grad = jax.device_put(grad, progs.stream) if moved else grad
            (grads if serial else summed).append(grad if serial else progs.all_reduce(grad))
        return [progs.all_reduce(grad) for grad in grads][::-1] if serial else summed[::-1]

    return loop


@pytest.mark.parametrize("fn, message", [
    (_overlap(serial=True), "that is the schedule one after the other"),
    (_overlap(moved=False), r"move each gradient there first, jax.device_put\(grad, progs"),
])
def test_the_page_loop_check_names_the_serial_loop_and_the_unmoved_gradient(fn, message):
    from course_utils.checks import ExerciseFailed, check_overlapped_backward

    mesh = Mesh(np.asarray(jax.devices()).reshape(2, 2), ov.AXES)
    with pytest.raises(ExerciseFailed, match=message):
        check_overlapped_backward(fn, mesh)
