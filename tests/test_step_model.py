"""Part four's step model (``models.step``): each strategy's bytes over a host's link, checked
against the bytes step 14–16's compiled programs sent (saved with the package) and against cases
worked by hand; the step time and the balance point, worked by hand."""

import pytest

from course_utils.models.cost_model import Topology
from course_utils.models.step import StepTime, Traffic, balanced_rows, mlp_flops, step_time
from course_utils.problems.classification import LAYERS, N_PARAMS, padded_size
from course_utils.results.strategies import find_run, saved_strategy_results
from course_utils.training.traffic import MODELLED, strategy_traffic

MATRICES = [shape for _, shape in LAYERS if len(shape) == 2]
BIASES = sum(shape[0] for _, shape in LAYERS if len(shape) == 1)


@pytest.mark.parametrize("strategy, label, options", [
    ("data_parallel", "data_parallel", {}),
    ("zero3", "zero3_regather", {}),  # both gathers kept (XLA merges them in "zero3")
    ("bf16", "bf16", {}),
    ("int8", "int8", {}),
    ("topk_ef", "topk_ef", {"topk": 108}),  # 1 % of 10752, rounded up
    ("topk_ef", "topk_ef 0.6%", {"topk": 65}),
    ("powersgd", "powersgd", {"matrices": MATRICES, "dense": BIASES, "rank": 1}),
    ("local_sgd", "local_sgd H=8", {"local_steps": 8}),
])
def test_the_model_gives_the_bytes_the_compiled_programs_sent(strategy, label, options):
    saved = saved_strategy_results()
    p = saved.devices
    n = padded_size(p)
    # one device per host: a host's link carries exactly what its device sends
    modelled = strategy_traffic(strategy, n, Topology(p, 1), **options)
    assert modelled.link_bytes == pytest.approx(find_run(saved, label).bytes_per_step)


def test_on_two_hosts_of_two_devices_the_bytes_are_the_hand_counted_ones():
    n, t = 2**20, Topology(2, 2)  # 4 MiB of float32 per device; p = 4, H = 2
    mib = 2**20
    by_hand = {
        "data_parallel": 2 * 3 / 4 * 4 * mib,  # a ring over 4 ranks, 2 of them across per step
        "zero3": 3 * 3 / 4 * 4 * mib,  # two all-gathers and a reduce-scatter
        "hsdp": 2 * 1 / 2 * 4 * mib,  # 2(H−1)/H · N: the D devices share the link
        "bf16": 2 * 3 / 4 * 2 * mib,
        "int8": (2 * 1 / 2 + 3 / 4) * (mib + 4 * mib // 64),  # all-to-all + all-gather
        "local_sgd": 2 * 3 / 4 * 4 * mib / 4,
    }
    for strategy, expected in by_hand.items():
        got = strategy_traffic(strategy, n, t, local_steps=4).link_bytes
        assert got == pytest.approx(expected), strategy
    assert strategy_traffic("data_parallel", n, t).messages == 6  # 2(p − 1)
    assert strategy_traffic("hsdp", n, t).messages == 2 + 2  # 2(D − 1) + 2(H − 1)


def test_accumulation_multiplies_the_compute_and_keeps_the_bytes():
    one = step_time(Traffic(50e6, 6), 0.2, alpha_s=1e-3, bytes_per_s=25e6)
    four = step_time(Traffic(50e6, 6), 0.2, alpha_s=1e-3, bytes_per_s=25e6, accumulation=4)
    assert one == StepTime(0.2, pytest.approx(2.006), pytest.approx(2.206))
    assert four.communication_s == one.communication_s and four.compute_s == pytest.approx(0.8)


def test_at_the_balanced_rows_compute_equals_communication():
    traffic = strategy_traffic("data_parallel", padded_size(4), Topology(2, 2))
    rate, alpha, flops = 25e6, 2e-4, 2e10
    rows = balanced_rows(traffic, MATRICES, flops_per_s=flops, alpha_s=alpha, bytes_per_s=rate)
    compute = mlp_flops(1, MATRICES) * rows / flops
    assert compute == pytest.approx(step_time(traffic, compute, alpha_s=alpha,
                                              bytes_per_s=rate).communication_s)
    (a, b), (c, d) = MATRICES  # the first layer's input is the data: no input gradient
    assert mlp_flops(1, MATRICES) == 4 * a * b + 6 * c * d
    assert mlp_flops(1, MATRICES, input_gradient=True) == 6 * (N_PARAMS - BIASES)


def test_the_flop_count_is_what_xla_counts_for_the_gradient():
    """XLA's own count for ``jax.grad`` of the loss, within 5 % (the rest: tanh, softmax)."""
    import jax
    import numpy as np

    from course_utils.problems.classification import PART_FOUR_MLP, init_params, loss_sum

    rows, n = 128, padded_size(1, PART_FOUR_MLP)
    x = np.zeros((rows, PART_FOUR_MLP.features), np.float32)
    y = np.zeros(rows, np.int32)
    w = init_params(n, 0, PART_FOUR_MLP)
    grad = jax.jit(jax.grad(loss_sum), static_argnums=3).lower(w, x, y, PART_FOUR_MLP).compile()
    analysis = grad.cost_analysis()
    counted = (analysis[0] if isinstance(analysis, list) else analysis)["flops"]
    matrices = [s for _, s in PART_FOUR_MLP.layers if len(s) == 2]
    assert counted == pytest.approx(mlp_flops(rows, matrices), rel=0.05)


@pytest.mark.parametrize("call, message", [
    (lambda: strategy_traffic("ddp", 8, Topology(2, 2)), "strategy must be one of"),
    (lambda: strategy_traffic("topk_ef", 8, Topology(2, 2)), "topk must be a whole number"),
    (lambda: strategy_traffic("powersgd", 8, Topology(2, 2)), "needs the weight matrices"),
    (lambda: strategy_traffic("powersgd", 8, Topology(2, 2), matrices=[(2, 2)], dense=5),
     "dense must be a whole number from 0 to 4"),
    (lambda: strategy_traffic("local_sgd", 8, Topology(2, 2), local_steps=0),
     "local_steps must be a positive"),
    (lambda: step_time(Traffic(1, 1), 0.1, alpha_s=0, bytes_per_s=0), "bytes_per_s > 0"),
    (lambda: step_time(Traffic(1, 1), 0.1, alpha_s=0, bytes_per_s=1, accumulation=0),
     "accumulation must be"),
    (lambda: mlp_flops(0, MATRICES), "rows must be"),
])
def test_bad_input_gets_a_message_that_says_what_to_pass(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_every_strategy_is_modelled():
    options = {"topk": 8, "matrices": MATRICES}
    for strategy in MODELLED:
        assert strategy_traffic(strategy, padded_size(4), Topology(2, 2), **options).link_bytes > 0


@pytest.mark.parametrize("strategy, label", [("data_parallel", "data_parallel"),
                                             ("zero3", "zero3_regather"), ("int8", "int8"),
                                             ("topk_ef", "topk_ef"), ("powersgd", "powersgd")])
def test_on_part_four_model_the_bytes_are_those_its_compiled_step_sends(strategy, label):
    from course_utils.devices.setup import data_mesh
    from course_utils.problems.classification import PART_FOUR_MLP
    from course_utils.training.strategies import POWERSGD_RANK
    from course_utils.training.train import train

    mesh = data_mesh()
    p, n = mesh.size, padded_size(mesh.size, PART_FOUR_MLP)
    run = train(mesh, label, steps=1, batch_size=16, mlp=PART_FOUR_MLP)
    matrices = [shape for _, shape in PART_FOUR_MLP.layers if len(shape) == 2]
    dense = sum(shape[0] for _, shape in PART_FOUR_MLP.layers if len(shape) == 1)
    modelled = strategy_traffic(strategy, n, Topology(p, 1), topk=max(1, round(0.01 * n)),
                                matrices=matrices, dense=dense, rank=POWERSGD_RANK)
    assert modelled.link_bytes == pytest.approx(run.bytes_per_step)
