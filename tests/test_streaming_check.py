"""Step 22's exercise check: the slowest rate at which a fragment's quantized sync hides behind
τ inner steps."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

from course_utils.checks import check_slowest_hidden_rate
from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.streaming import _UNSEEN, hiding_rate_bits
from course_utils.models.cost_model import Topology, link_bytes_sent, ring_bytes
from course_utils.models.links import FRAME_SHARE
from course_utils.results.diloco_cluster import MethodRow, sync_link_bytes
from course_utils.training.diloco import sync_traffic
from course_utils.training.quantize import exchange_bytes

# about the saved run's numbers: part four's model, 4 fragments, 4 bits, 2 hosts, τ = 2
STEP22 = dict(n_params=1_118_464, fragments=4, bits=4, hosts=2, tau=2, step_s=0.04)


def _mine(n, f, bits, hosts, tau, step_s, *, per_byte=8, whole=1, ring=None, scales=True,
          steps=None, each=None, scale=4):
    """A student's answer; the keywords make one slip each."""
    values = n // f * whole
    sent = values * (bits / 8 if each is None else each) + (values / 64 * scale if scales else 0)
    share = 2 * (hosts - 1) / hosts if ring is None else ring
    return per_byte * share * sent / ((tau if steps is None else steps) * step_s)


def _in_mbit(n, f, bits, hosts, tau, step_s):
    codes_mbit = n / f * bits / 1e6  # the codes, in Mbit
    scales_mbit = n / f / 64 * 32 / 1e6
    mbit = 0.0
    for _ in ("reduce-scatter", "all-gather"):  # each pass: (R − 1)/R of the fragment
        mbit += (hosts - 1) / hosts * (codes_mbit + scales_mbit)
    return mbit / (tau * step_s) * 1e6


@pytest.mark.parametrize("fn", [
    _mine,
    _in_mbit,
    lambda *a: np.float32(_mine(*a)),
    lambda *a: jnp.asarray(_mine(*a)),
    lambda *a: round(_mine(*a)),
])
def test_right_answers_in_several_forms_pass(fn, capsys):
    check_slowest_hidden_rate(fn, **STEP22)
    assert "PASSED: the slowest rate that still hides a fragment's sync" in capsys.readouterr().out


# (the page's common wrong answers: tests/test_mistakes.py)
@pytest.mark.parametrize("fn, message", [
    (None, "my_slowest_rate is not defined"),
    (lambda *a: "fast", "must return one positive number of bit/s"),
    (lambda n, f: n, r"my_slowest_rate\(1118464, 4, 4, 2, 2, 0.04\) raised"),
    (functools.partial(_mine, per_byte=1 / 8), "bytes to bits is × 8, not ÷ 8"),
    (lambda *a: _mine(*a, each=a[2]), "each value is bits / 8 bytes"),
    (functools.partial(_mine, ring=2), "never sends its own chunk to itself"),
    (lambda *a: _mine(*a, ring=2 * (a[3] - 1)), r"moves \(R − 1\)/R of the fragment, not R − 1"),
    (lambda *a: _mine(*a, ring=(a[3] - 1) / a[3]), "an all-reduce is two passes of the ring"),
    (functools.partial(_mine, steps=1), "tau inner steps to hide behind, not one"),
    (lambda *a: _mine(*a, steps=a[4] + 1), "overlaps tau inner steps, not tau \\+ 1"),
    (functools.partial(_mine, scale=0.5), "a scale is an f32: 4 bytes"),
    (functools.partial(_mine, each=4), "not a whole f32"),
    (functools.partial(_mine, each=1), "not a whole byte"),
    (lambda *a: _mine(*a) / FRAME_SHARE, "that counts frame headers"),
    (lambda *a: _mine(*a) * FRAME_SHARE, "FRAME_SHARE does not belong in it"),
    (lambda *a: _mine(*a) / 1e6, "that is Mbit/s"),
    # the student trial's four (2026-12-05), each once told only a restatement of the goal or
    # "use the arguments": a scale per value, the ring's share dropped (1 at the page's 2
    # hosts), f32 values without scales, 8 / bits bits per value
    (functools.partial(_mine, scale=256), "one 4-byte scale per 64 values, not one per value"),
    (functools.partial(_mine, ring=1), r"the ring's share is missing: .* 2\(R − 1\)/R"),
    (functools.partial(_mine, each=4, scales=False), "not as f32 values"),
    (lambda *a: _mine(*a, each=1 / a[2]), "bits / 8 bytes, not 1 / bits"),
    (lambda *a: 2.3e6, "right at this notebook's numbers|is about|too"),
])
def test_each_slip_is_named(fn, message):
    with pytest.raises(ExerciseFailed, match=message):
        check_slowest_hidden_rate(fn, **STEP22)


def test_an_answer_typed_in_from_the_notebook_is_named():
    typed = hiding_rate_bits(*STEP22.values())
    with pytest.raises(ExerciseFailed, match="gives the same number: compute the rate from the "
                                             "arguments"):
        check_slowest_hidden_rate(lambda *a: typed, **STEP22)


def test_the_check_s_own_model_is_refused_however_wrapped():
    for fn in (hiding_rate_bits, functools.partial(hiding_rate_bits),
               lambda *a: hiding_rate_bits(*a)):
        with pytest.raises(ExerciseFailed, match="uses the check's own hiding_rate_bits"):
            check_slowest_hidden_rate(fn, **STEP22)


def _by_exchange(n, f, bits, hosts, tau, step_s):
    return 8 * exchange_bytes(n // f, hosts, f"int{bits}") / (tau * step_s)


def _by_ring(n, f, bits, hosts, tau, step_s):
    fragment = n / f * (bits / 8 + 4 / 64)
    return 8 * link_bytes_sent("all_reduce", "ring", fragment, Topology(hosts, 1)) / (tau * step_s)


def _by_sync_model(n, f, bits, hosts, tau, step_s):  # the registry's model of one sync
    sync = sync_traffic(n, Topology(hosts, 1), fragments=f, dtype=f"int{bits}").link_bytes
    return 8 * sync / (tau * step_s)


def _by_cluster_model(n, f, bits, hosts, tau, step_s):  # right at the page's numbers only
    return 8 * sync_link_bytes(MethodRow("streaming_diloco"), n, hosts) / (tau * step_s)


def _by_ring_bytes(n, f, bits, hosts, tau, step_s):  # the student trial's: the ring's factor
    return 8 * ring_bytes(n / f * (bits / 8 + 4 / 64), hosts).all_reduce / (tau * step_s)


@pytest.mark.parametrize("fn", [_by_exchange, _by_ring, _by_sync_model, _by_cluster_model,
                                _by_ring_bytes])
def test_the_package_s_byte_models_are_refused(fn):
    with pytest.raises(ExerciseFailed, match=r"uses the package's (exchange_bytes|link_bytes_sent|"
                                             r"sync_traffic|diloco_cluster\.sync_link_bytes|"
                                             r"ring_bytes), which counts the sync's bytes"):
        check_slowest_hidden_rate(fn, **STEP22)


@pytest.mark.parametrize("case", [tuple(STEP22.values()), *_UNSEEN])
def test_the_check_s_model_is_the_cluster_run_s(case):
    # the cluster's model of one sync, where the fragment splits into whole blocks per host
    n, f, bits, hosts, tau, step_s = case
    n = n // (f * hosts * 64) * f * hosts * 64
    assert hiding_rate_bits(n, f, bits, hosts, tau, step_s) == pytest.approx(
        _by_sync_model(n, f, bits, hosts, tau, step_s), rel=1e-12)


def test_each_call_tries_a_fresh_case():
    seen = []

    def recording(*case):
        seen.append(case)
        return _mine(*case)

    check_slowest_hidden_rate(recording, **STEP22)
    check_slowest_hidden_rate(recording, **STEP22)
    half = len(seen) // 2
    assert seen[:half - 1] == seen[half:-1]  # the fixed cases, twice
    assert seen[half - 1] != seen[-1]  # the drawn one, anew
