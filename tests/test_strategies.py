"""The registry (``training.strategies``): one description per strategy, which train, the step
model, the labels, the saved plan and part four's rows read; the optimizer the inner step applies
is the description's, and memory per device counts every part of its state."""

import dataclasses

import jax.numpy as jnp
import numpy as np
import pytest

from course_utils import data_mesh, train
from course_utils.training.optimizers import Optimizer
from course_utils.training.strategies import SPECS, STRATEGIES, spec


def _adam_like(lr: float = 0.01) -> Optimizer:
    """An optimizer whose state is AdamW's shape: two moments and a count."""

    def init(w0):
        return np.zeros_like(w0), np.zeros_like(w0), np.zeros((), np.int32)

    def update(g, state, w):
        m, v, count = state
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        return w - lr * m / (jnp.sqrt(v) + 1e-8), (m, v, count + 1)

    return Optimizer(init, update)


@pytest.mark.parametrize("base", ["data_parallel", "zero2"])
def test_the_inner_optimizer_is_the_description_s_and_its_whole_state_is_counted(base,
                                                                                 monkeypatch):
    mesh = data_mesh()
    entry = dataclasses.replace(spec(base), name="adam_like", optimizer=_adam_like())
    monkeypatch.setitem(SPECS, "adam_like", entry)
    run, ref = train(mesh, "adam_like", steps=3), train(mesh, base, steps=3)
    n, p = run.params.size, mesh.size
    per_device = n if entry.parts.optimizer == "replicated" else n // p  # zero2: moments sliced
    assert run.memory.optimizer == 2 * 4 * per_device + 4  # two float32 moments and the count
    assert run.memory.parameters == ref.memory.parameters
    assert run.loss[0] == ref.loss[0] and run.loss[-1] != ref.loss[-1]  # other updates


def test_every_reader_reads_the_registry():
    from course_utils.figures.labels import human
    from course_utils.results.strategies import MEMORY_RUNS, PLAN, TRADEOFF_FAMILIES, run_label
    from course_utils.training.part_four import PART_FOUR_ROWS
    from course_utils.training.traffic import MODELLED

    assert all(human(name) == s.label for name, s in SPECS.items())
    assert MODELLED == tuple(name for name, s in SPECS.items() if s.traffic is not None)
    planned = {run_label(run) for run in PLAN}
    drawn = {label for _, members in TRADEOFF_FAMILIES for label, _ in members}
    assert drawn | {label for label, _ in MEMORY_RUNS} <= planned
    assert {run["strategy"] for run in PLAN} <= set(STRATEGIES)
    assert {r.strategy for r in PART_FOUR_ROWS} | {r.modelled for r in PART_FOUR_ROWS} <= set(SPECS)
    assert {r.trained for r in PART_FOUR_ROWS} <= set(STRATEGIES)


def test_train_refuses_a_sync_it_does_not_run(monkeypatch):
    entry = spec("local_sgd")
    streamed = dataclasses.replace(entry, name="streamed",
                                   sync=entry.sync._replace(fragments=4))
    monkeypatch.setitem(SPECS, "streamed", streamed)
    with pytest.raises(ValueError, match="streamed syncs in fragments, in fewer bits or "
                                         "overlapped; train runs these in an outer step across"):
        train(data_mesh(), "streamed", steps=1)
    with pytest.raises(ValueError, match=r"local_steps applies to .*\bstreamed only; zero1 syncs"):
        train(data_mesh(), "zero1", steps=1, local_steps=2)
