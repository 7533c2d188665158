"""Step 19's prose, held to the saved overlap runs: each reading the Read and Why paragraphs make
of the saved figures."""

import pytest

from course_utils.models.links import FRAME_SHARE, rate_bytes_per_s
from course_utils.results.overlap import modelled, over_runs, rates, saved_overlap_results

SAVED = saved_overlap_results()


def _median(rows, rate, field):
    return over_runs(rows, rate, lambda r: getattr(r, field)).median


@pytest.mark.parametrize("rate", rates(SAVED))
def test_the_backward_readings_hold(rate):
    b = SAVED.backward
    compute, comm = _median(b, rate, "compute_s"), _median(b, rate, "communication_s")
    overlapped, model = _median(b, rate, "overlapped_s"), modelled(SAVED, rate).overlapped_s
    # one program about compute + communication; the computing device no better than that
    assert _median(b, rate, "one_program_s") >= 0.9 * _median(b, rate, "serial_s")
    assert _median(b, rate, "same_device_s") > 1.1 * overlapped
    if comm > compute:  # the link limits: close to the max, as the model says
        assert overlapped <= 1.1 * comm and overlapped == pytest.approx(model, rel=0.05)
        assert _median(b, rate, "same_device_s") < _median(b, rate, "serial_s")  # the details
    else:  # the compute limits: above it by about a tenth, more than the model
        assert 1.05 <= overlapped / compute <= 1.2 and overlapped > model


@pytest.mark.parametrize("rate", rates(SAVED))
def test_the_matmul_readings_hold(rate):
    mm = SAVED.matmul
    products, shifts = _median(mm, rate, "compute_s"), _median(mm, rate, "shift_s")
    looped, by_hand = _median(mm, rate, "looped_s"), _median(mm, rate, "by_hand_s")
    m, k, _ = SAVED.sizes.matmul
    block = 4 * m // SAVED.cluster.hosts * k
    link_s = block / (rate_bytes_per_s(rate) * FRAME_SHARE)
    if rate in ("100mbit", "200mbit"):  # well under the parts; the loop's shift at full rate
        assert looped < 0.85 * (products + shifts)
        assert 0.9 <= (looped - products) / link_s <= 1.25
    assert 0.8 <= by_hand / looped <= 1.1  # by hand: about as fast
    assert _median(mm, rate, "gathered_s") <= 1.1 * by_hand  # gathering: as fast or faster
    share = link_s / shifts
    assert 0.4 <= share <= 0.6  # about half the link's rate
