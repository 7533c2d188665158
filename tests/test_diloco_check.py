"""Step 21's self-check passes right answers in several forms, names each honest slip and
refuses the package's byte models."""

import math
import random
from fractions import Fraction

import numpy as np
import pytest

import course_utils as cu
from course_utils.checks import check_smallest_h
from course_utils.checks.diloco import _UNSEEN, _fresh_case, expected_h
from course_utils.checks.helpers import ExerciseFailed

# part four's model on its cluster's 2 hosts × 2 devices at 50 Mbit/s (numbers of this test's own)
CASE = dict(n_params=1_118_464, replicas=2, devices_per_replica=2, rate_bits_per_s=5e7,
            step_seconds=0.0312, fraction=0.1)


def _sync_s(n, r, rate, *, ring=None, factor=32):
    """One sync's seconds: a ring all-reduce of n float32 values over ``ring`` (R) ranks."""
    ring = r if ring is None else ring
    return 2 * (ring - 1) / ring * factor / 8 * n * 8 / rate


def right(n, r, d, rate, step, frac):
    return max(1, math.ceil(_sync_s(n, r, rate) / (frac * step)))


def by_loop(n, r, d, rate, step, frac):  # the smallest H, searched, bytes in bits on the way
    sync_bits = 8 * (2 * (r - 1) / r) * 4 * n
    h = 1
    while sync_bits / rate / h > frac * step:
        h += 1
    return h


def test_right_answers_in_several_forms_pass(capsys):
    check_smallest_h(right, **CASE)
    check_smallest_h(by_loop, **CASE)
    check_smallest_h(lambda *a: float(right(*a)), **CASE)
    check_smallest_h(lambda *a: np.int64(right(*a)), **CASE)
    check_smallest_h(lambda *a: np.float32(right(*a)), **CASE)
    assert capsys.readouterr().out.count("PASSED: the smallest H for a link (H = 230 here") == 5


def test_the_expected_h_is_the_ceiling_of_the_sync_over_its_share():
    sync_s = 2 * (2 - 1) / 2 * 4 * CASE["n_params"] * 8 / CASE["rate_bits_per_s"]
    assert expected_h(**CASE) == math.ceil(sync_s / (CASE["fraction"] * CASE["step_seconds"]))
    assert expected_h(**{**CASE, "devices_per_replica": 8}) == expected_h(**CASE)
    assert expected_h(**{**CASE, "replicas": 1}) == 1


@pytest.mark.parametrize("case", _UNSEEN)
def test_the_check_s_answer_is_the_registry_s_model_of_diloco_s_sync(case):
    # the registry's one model of DiLoCo's sync (bytes over a host's link), n split evenly
    from course_utils.models.cost_model import Topology
    from course_utils.training.diloco import sync_traffic

    n, r, d, rate, step, frac = case
    n = n // (d * r * 64) * d * r * 64
    sent = sync_traffic(n, Topology(r, d)).link_bytes
    assert expected_h(n, r, d, rate, step, frac) == max(
        1, math.ceil(Fraction(8 * sent) / (Fraction(rate) * Fraction(frac) * Fraction(step))))


@pytest.mark.parametrize("drawn", [True, False])
def test_every_judged_case_is_away_from_a_whole_ratio(drawn):
    # a ratio on a whole number lets float rounding decide the ceiling, and misnames the slips
    for case in ([_fresh_case(random.Random(seed)) for seed in range(20)] if drawn else _UNSEEN):
        n, r, _, rate, step, frac = case
        ratio = Fraction(2 * (r - 1), r) * 32 * n / (Fraction(rate) * Fraction(step)
                                                     * Fraction(frac))
        assert 0.02 < float(ratio) % 1 < 0.98 and expected_h(*case) == math.ceil(ratio)


def _with(*, factor=32, ring=lambda r, d: r, rounding=math.ceil, floor_at_one=True):
    def fn(n, r, d, rate, step, frac):
        got = rounding(_sync_s(n, r, rate, ring=ring(r, d), factor=factor) / (frac * step))
        return max(1, got) if floor_at_one else got
    return fn


# (the page's common wrong answers: tests/test_mistakes.py)
@pytest.mark.parametrize("fn, said", [
    (_with(factor=0.5), r"bytes to bits is × 8, not ÷ 8"),
    (_with(factor=8), "n_params counts float32 values: 4 bytes each"),
    (lambda n, r, d, rate, step, frac: max(1, math.ceil(_sync_s(n / d, r, rate)
                                                        / (frac * step))),
     "the replica's link carries every device's slice: D slices of n/D values"),
    (lambda n, r, d, rate, step, frac: max(1, math.ceil(
        (r - 1) / r * 32 * n / rate / (frac * step))), "count both passes of the ring"),
    (lambda n, r, d, rate, step, frac: max(1, math.ceil(32 * n / rate / (frac * step))),
     r"sends 2\(R − 1\)/R of the outer gradient's bytes, not the bytes once"),  # no ring factor
    (_with(factor=16), "half the bytes: count both passes .* 4-byte float32 values"),  # bf16
    (_with(rounding=lambda x: x), "H is a whole number of inner steps; round up"),
    (_with(rounding=round), "round up, not to the nearest"),
    (lambda *a: math.floor(_with(rounding=lambda x: x)(*a)) + 1,
     "at most the fraction: an H at which the sync adds exactly the fraction fits"),
    (_with(floor_at_one=False), "with one replica nothing crosses"),
    (lambda n, r, d, rate, step, frac: right(1_118_464, r, d, rate, step, frac),
     "does not change with the argument n_params: use the arguments"),
    (lambda n, r, d, rate, step, frac: right(n, r, d, rate, step, frac) + (d > 3),
     "changes with devices_per_replica, which it should not"),
    (lambda *a: 230, "does not change with the argument"),
    (lambda n, r, d, rate, step, frac: right(n, r, d, rate, step, 1.0),
     "does not change with the argument fraction: the sync may add only fraction of a step: "
     "divide its seconds by fraction · step_seconds"),
    (lambda n, r, d, rate, step, frac: right(n, r, d, rate, step, frac) + 8 - d,
     "your H falls as devices_per_replica grows: the replica's link carries every device's"),
    (lambda *a: max(1, right(*a) // 2),
     r"gives H = 115: at that H the sync adds 0.1995 of an inner step, more than the fraction "
     r"0.1: a larger H is needed"),
    (lambda *a: right(*a) + 1, "a smaller H also keeps the sync within the fraction"),
    (lambda n, r, d, rate, step, frac: max(1, math.ceil(
        2 * (r - 1) * 32 * n / rate / (frac * step))), "the sync's seconds are overcounted"),
])
def test_each_slip_is_named(fn, said):
    with pytest.raises(ExerciseFailed, match=said):
        check_smallest_h(fn, **CASE)


def test_the_package_models_and_the_checks_own_answer_are_refused():
    from course_utils.models.cost_model import Topology, bytes_sent
    from course_utils.training.local import local_sgd_bytes
    from course_utils.training.traffic import strategy_traffic

    def by_model(n, r, d, rate, step, frac):
        sent = bytes_sent("all_reduce", "ring", 4 * n, Topology(1, r))
        return max(1, math.ceil(8 * sent / rate / (frac * step)))

    def by_local(n, r, d, rate, step, frac):
        return max(1, math.ceil(8 * local_sgd_bytes(4 * n, r, 1, 1) / rate / (frac * step)))

    def by_strategy(n, r, d, rate, step, frac):
        sent = strategy_traffic("diloco", n, Topology(r, d), local_steps=1).link_bytes
        return max(1, math.ceil(8 * sent / rate / (frac * step)))

    for fn, name in ((by_model, "bytes_sent"), (by_local, "local_sgd_bytes"),
                     (by_strategy, "strategy_traffic"), (expected_h, "expected_h")):
        with pytest.raises(ExerciseFailed, match=f"uses the package's {name}"):
            check_smallest_h(fn, **CASE)


def _h_from_bytes(sent, rate, step, frac):
    return max(1, math.ceil(8 * sent / rate / (frac * step)))


# each right but for the package's model: step 8's ring_bytes and ring_time, step 17's link model
# (link_bytes calls link_bytes_sent, which a check that followed only the first would miss)
def by_ring_bytes(n, r, d, rate, step, frac):
    return _h_from_bytes(cu.ring_bytes(4 * n, r).all_reduce, rate, step, frac)


def by_ring_time(n, r, d, rate, step, frac):
    seconds = cu.ring_time(4 * n, r, alpha_s=0, bytes_per_s=rate / 8).all_reduce
    return max(1, math.ceil(seconds / (frac * step)))


def by_link_bytes(n, r, d, rate, step, frac):
    return _h_from_bytes(cu.link_bytes("all_reduce", 4 * n, r, 1), rate, step, frac)


def by_link_time(n, r, d, rate, step, frac):
    seconds = cu.link_time_s("all_reduce", 4 * n, r, 1, rate / 8)
    return max(1, math.ceil(seconds / (frac * step)))


def by_bus_factor(n, r, d, rate, step, frac):
    return _h_from_bytes(cu.bus_factor("all_reduce", r) * 4 * n, rate, step, frac)


def by_bus_bandwidth(n, r, d, rate, step, frac):  # step 10's bus bandwidth: 2(R − 1)/R at 1
    return _h_from_bytes(cu.busbw_gbps(1.0, "all_reduce", r) * 4 * n, rate, step, frac)


@pytest.mark.parametrize("name, fn", [
    ("ring_bytes", by_ring_bytes), ("ring_time", by_ring_time), ("link_bytes", by_link_bytes),
    ("link_time_s", by_link_time), ("bus_factor", by_bus_factor),
    ("busbw_gbps", by_bus_bandwidth)])
def test_step_8s_and_step_17s_models_are_refused(name, fn):
    with pytest.raises(ExerciseFailed, match=f"uses the package's {name},"):
        check_smallest_h(fn, **CASE)


def test_no_function_and_a_raising_function_get_one_line():
    with pytest.raises(ExerciseFailed, match="define the function my_smallest_h"):
        check_smallest_h(None, **CASE)
    with pytest.raises(ExerciseFailed, match=r"my_smallest_h\(1118464, 2, 2, 50000000.0, "
                       r"0.0312, 0.1\) raised ZeroDivisionError"):
        check_smallest_h(lambda *a: 1 / 0, **CASE)


def test_a_failing_call_is_printed_with_every_digit_so_it_can_be_rerun():
    rate = 2.0**30 + 1  # printed with :.3g this was 1.07e+09, not the rate the check passed
    with pytest.raises(ExerciseFailed) as failed:
        check_smallest_h(lambda *a: right(*a) + 1, **{**CASE, "rate_bits_per_s": rate,
                                                       "step_seconds": np.float64(1 / 3)})
    call = str(failed.value).split("my_smallest_h(")[1].split(") gives")[0]
    assert [float(a) for a in call.split(", ")] == [1118464, 2, 2, rate, 1 / 3, 0.1]
    with pytest.raises(ExerciseFailed, match="must return a whole number"):
        check_smallest_h(lambda *a: "many", **CASE)
