"""Guards on step 16's prose: the local step sends nothing and keeps a copy per device, H = 1 is
data parallelism on the same minibatches, the package's byte model is what ``train`` reads off
the compiled programs, and what the notebook reads off the saved held-out losses."""

import numpy as np
import pytest

from course_utils import data_mesh, padded_size
from course_utils.results.strategies import PLAN_STEPS as STEPS
from course_utils.results.strategies import find_run, saved_strategy_results
from course_utils.training.strategies import local_sgd_bytes
from course_utils.training.train import train

MESH = data_mesh()
BATCH = {"batch_size": 64, "heldout_every": 4}
SAVED = saved_strategy_results()


def heldout(label: str, step: int) -> float:
    return dict(find_run(SAVED, label).heldout_loss)[step]


def test_h1_is_data_parallelism_and_the_local_step_sends_nothing():
    p, n = MESH.size, padded_size(MESH.size)
    dp = train(MESH, "data_parallel", steps=8, **BATCH)
    h1 = train(MESH, "local_sgd", steps=8, local_steps=1, **BATCH)
    h4 = train(MESH, "local_sgd", steps=8, local_steps=4, **BATCH)
    assert h1.collectives == h4.collectives == ()  # the averaging is a program of its own
    assert h4.shards["params"] == [(n,)] * p  # every device a whole copy of its own
    np.testing.assert_allclose(h1.params, dp.params, atol=1e-6)
    assert np.allclose([b for _, b in h1.heldout_loss], [b for _, b in dp.heldout_loss],
                       atol=1e-6)
    assert h4.bytes_per_step * 4 == pytest.approx(dp.bytes_per_step)


@pytest.mark.parametrize("steps, h", [(8, 4), (10, 4), (9, 2)])
def test_the_byte_model_is_what_train_reads_off_the_programs(steps, h):
    run = train(MESH, "local_sgd", steps=steps, local_steps=h, **BATCH)
    nbytes = 4 * padded_size(MESH.size)
    assert run.bytes_per_step * steps == pytest.approx(local_sgd_bytes(nbytes, MESH.size,
                                                                       steps, h))


def test_the_saved_held_out_losses_read_as_the_notebook_says():
    early, last = 32, 2 * STEPS
    assert heldout("local_sgd H=1", STEPS) == pytest.approx(heldout("data_parallel", STEPS),
                                                            abs=1e-5)
    same = [heldout(f"local_sgd H={h}", early) for h in (1, 4, 8, 16)]
    assert max(same) - min(same) < 0.001  # "hardly differ with H after 32 steps"
    skewed = [heldout(f"local_sgd H={h} skewed", early) for h in (1, 4, 8, 16)]
    assert skewed == sorted(skewed) and skewed[-1] - skewed[0] > 0.05  # "grows with H"
    plateau = [loss for step, loss in find_run(SAVED, "data_parallel").heldout_loss
               if step >= 64]
    ends = [heldout(f"local_sgd H={h}{tail}", last) for h in (1, 4, 8, 16)
            for tail in ("", " skewed")]
    assert max(ends) - min(ends) < max(plateau) - min(plateau)  # "cannot rank the H"
