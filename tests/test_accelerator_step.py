"""The saved timing of part four's step on a TPU chip (``accelerator_step.json``, made by
``scripts/time_step_on_accelerator.py``; CI has no accelerator, so the record is what is tested)."""

import re

from course_utils.models.step import mlp_flops
from course_utils.problems.classification import PART_FOUR_MLP
from course_utils.results.accelerator import load_accelerator_step

SAVED = load_accelerator_step()


def test_the_record_says_where_and_how_it_was_made():
    assert SAVED.platform == "tpu" and SAVED.device_kind.startswith("TPU")
    assert SAVED.libtpu and SAVED.meta.machine.jax and SAVED.precision
    assert re.fullmatch(r"[0-9a-f]{40}", SAVED.meta.commit or "")
    assert SAVED.meta.command_line.startswith("python scripts/time_step_on_accelerator.py")


def test_each_batch_is_timed_over_its_repeats_and_its_flops_are_the_models():
    matrices = [s for _, s in PART_FOUR_MLP.layers if len(s) == 2]
    assert [t.rows for t in SAVED.timings] == sorted(t.rows for t in SAVED.timings)
    for t in SAVED.timings:
        assert len(t.blocked_ms) == len(t.back_to_back_ms) == SAVED.meta.runs >= 3
        assert t.flops == mlp_flops(t.rows, matrices)
        # dispatched back to back, a step does not wait for the host: never slower
        assert t.back_to_back <= t.blocked
    big = SAVED.timings[-1]  # the largest batch computes at tens of TFLOP/s
    assert 1e13 < big.flops_per_s < 2e14
