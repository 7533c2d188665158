"""Step 17's exercise check: a flat and a two-level reduce-scatter's time from the link rate."""

import numpy as np
import pytest

from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.links import check_reduce_scatter_times
from course_utils.models.cost_model import Topology, link_bytes_sent
from course_utils.models.links import FRAME_SHARE, link_time_s

STEP_17 = {"hosts": 2, "devices": 4, "nbytes": 16 * 2**20, "rate_bits": 1e9}  # its exercise
MEASURED = 254.2  # the saved 2 × 4 run's flat reduce-scatter at 1 Gbit/s, 16 MiB (ms)


def _times(flat=1.0, two=1.0, swap=False):
    """A student's answer, each time scaled by a slip's factor."""
    def my_reduce_scatter_ms(hosts, devices, n_bytes, rate_bits):
        p = hosts * devices
        times = (flat * (p - 1) / p * n_bytes / (rate_bits / 8) * 1e3,
                 two * (hosts - 1) / hosts * n_bytes / (rate_bits / 8) * 1e3)
        return times[::-1] if swap else times

    return my_reduce_scatter_ms


def _by_steps(hosts, devices, n_bytes, rate_bits):
    # another right form: chunks of N/p per ring step, and the D slices' passes across the hosts
    p, rate = hosts * devices, rate_bits / 8
    flat_s = (p - 1) * (n_bytes / p) / rate
    two_level_s = devices * (hosts - 1) * (n_bytes / devices / hosts) / rate
    return [flat_s * 1000, two_level_s * 1000]


@pytest.mark.parametrize("fn", [_times(), _by_steps,
                                lambda *args: np.array(_times()(*args), np.float32),
                                lambda *args: tuple(np.float64(t) for t in _times()(*args))])
def test_right_answers_in_several_forms_pass(fn, capsys):
    check_reduce_scatter_times(fn, **STEP_17, measured_ms=MEASURED)
    assert "PASSED: reduce-scatter times" in capsys.readouterr().out


# (the page's common wrong answers: tests/test_mistakes.py)
@pytest.mark.parametrize("fn, message", [
    (None, "my_reduce_scatter_ms is not defined"),
    (lambda h, d, n, bits: ("fast", 1.0), "two finite numbers of milliseconds"),
    (lambda h, d, n, bits: 1.0, r"must return two numbers, \(flat_ms, two_level_ms\)"),
    (lambda h, d: (1.0, 1.0), r"my_reduce_scatter_ms\(2, 4, 16777216, 1e\+09\) raised TypeError"),
    (_times(flat=8 / 7), "never sends its own chunk"),
    (_times(two=2), "that is the two-level all-reduce's time"),
    (_times(two=1 / 4), "share its one link"),
    (_times(two=7 / 4), "that is the flat ring's time"),
    (_times(two=3), "only the phase across the hosts crosses"),
    (_times(flat=1e-3), "milliseconds, not seconds"),
    (_times(flat=1e3), "milliseconds, not microseconds"),
    (_times(flat=2**20 / 1e6), "Mbit and Gbit are 10\\^6"),
    (_times(flat=1 / 0.96), "you counted the frame headers"),
    (_times(flat=1 / FRAME_SHARE, two=1 / FRAME_SHARE), "flat: .*you counted the frame headers"),
    (_times(flat=1514 / 1460), "you counted the frame headers"),
    (_times(two=1538 / 1448), "two-level: .*you counted the frame headers"),
    (_times(two=1.057), "too large; close: compute with the exact numbers"),
    (_times(swap=True), "the two times are swapped"),
    (_times(flat=1.1), "flat: it is 10 % too large; count the chunks"),
    (lambda h, d, n, bits: (MEASURED, 67.1), "that is a measured time, not a prediction"),
    (lambda h, d, n, bits: (117.4, 67.1), r"not at 2 hosts × 2 devices, 4 MiB"),
])
def test_each_slip_is_named(fn, message):
    with pytest.raises(ExerciseFailed, match=message):
        check_reduce_scatter_times(fn, **STEP_17, measured_ms=MEASURED)


@pytest.mark.parametrize("fn, name", [
    (lambda h, d, n, bits: (link_time_s("all_gather", n, h, d, bits / 8) * 1e3, 67.1),
     "link_time_s"),
    (lambda h, d, n, bits: (link_bytes_sent("all_gather", "ring", n, Topology(h, d))
                            / (bits / 8) * 1e3, 67.1), "link_bytes_sent"),
])
def test_the_package_link_model_is_refused(fn, name):
    with pytest.raises(ExerciseFailed, match=f"uses the package's {name}, which computes"):
        check_reduce_scatter_times(fn, **STEP_17, measured_ms=MEASURED)
