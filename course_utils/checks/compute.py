"""Self-check for step 18: the batch size at which a data-parallel step's compute takes as long
as its all-reduce over the links."""

from __future__ import annotations

import math
import random

import numpy as np

from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.cost_model import Topology, link_bytes_sent, message_steps
from course_utils.models.links import FRAME_SHARE
from course_utils.models.step import balanced_rows, break_even_bits, mlp_flops, step_time
from course_utils.training.strategies import DATA_PARALLEL
from course_utils.training.traffic import strategy_traffic

TOLERANCE = 0.02  # relative; the slips below are all ≥ 1.5× off, or a unit factor


def expected_rows(weights: int, hosts: int, devices: int, rate_bits: float, alpha_s: float,
                  flops_per_s: float) -> float:
    """The step model's balanced rows per device: a ring all-reduce of ``weights`` float32
    values over hosts × devices ranks, at ``rate_bits`` (no headers), against 6 FLOPs per weight
    per row (the exercise's count: every layer forms its input's gradient)."""
    traffic = strategy_traffic(DATA_PARALLEL, weights, Topology(hosts, devices))
    return balanced_rows(traffic, [(weights, 1)], flops_per_s=flops_per_s, alpha_s=alpha_s,
                         bytes_per_s=rate_bits / 8, input_gradient=True)


# (weights, hosts, devices per host, bit/s, α in s, FLOP/s) the notebook never uses
_UNSEEN = ((10_000_000, 4, 8, 1e11, 5e-6, 2e12), (50_000, 3, 1, 5e7, 1e-3, 1e9),
           (2_000_000, 8, 2, 4e8, 0.0, 3e10))


def _fresh_rows_case(rng: random.Random) -> tuple:
    """One more case, drawn anew at every check: answers looked up in a table made beforehand
    (from the package's model, or from the cases a failure message showed) cannot know it.
    Drawn again until it balances at 100 to 10⁶ rows, as the fixed cases do, so an answer
    rounded to whole rows stays within ``TOLERANCE``."""
    while True:
        case = (int(10 ** rng.uniform(4, 8)), rng.randint(2, 8), rng.randint(1, 8),
                10 ** rng.uniform(7, 11), rng.choice((0.0, 10 ** rng.uniform(-6, -3))),
                10 ** rng.uniform(9, 13))
        if 100 <= expected_rows(*case) <= 1e6:
            return case


def check_balanced_rows(fn, *, weights: int, hosts: int, devices: int, rate_bits: float,
                        alpha_s: float, flops_per_s: float) -> None:
    """Exercise 18: ``fn(weights, hosts, devices, rate_bits, alpha_s, flops_per_s)`` → the rows
    per device at which one data-parallel step's compute equals its ring all-reduce over the
    hosts' links (``expected_rows``), within ``TOLERANCE``, at the exercise's numbers and at
    cases the notebook never uses. ``fn`` must not call the package's step model."""
    exercise = "the balanced batch"
    function_given(exercise, "my_balanced_rows", fn)
    forbidden = (balanced_rows, strategy_traffic, step_time, mlp_flops, link_bytes_sent,
                 message_steps, expected_rows)

    def rows(case) -> float:
        call = "my_balanced_rows({}, {}, {}, {:.0e}, {:g}, {:.0e})".format(*case)
        got = call_without(exercise, fn, case, forbidden=forbidden,
                           refusal="my_balanced_rows uses the package's {}, which computes the "
                                   "answer: write the all-reduce's time and the compute per row "
                                   "yourself", call=call)
        value = number(got)
        if value is None or not np.isfinite(value):
            fail(exercise, f"{call} must return one finite number of rows, got {got!r}")
        return value

    case = (weights, hosts, devices, rate_bits, alpha_s, flops_per_s)
    value = rows(case)
    want = expected_rows(*case)
    if not np.isclose(value, want, rtol=TOLERANCE):
        fail(exercise, f"{off_by(value, want)}; {_slip(value, *case) or _WHAT}")
    unseens = (*_UNSEEN, _fresh_rows_case(random.Random()))
    for unseen in unseens:
        got, want = rows(unseen), expected_rows(*unseen)
        if not np.isclose(got, want, rtol=TOLERANCE):
            where = ("right at this notebook's numbers, but not at {} weights, {} hosts × {} "
                     "devices, {:.0e} bit/s, α = {:g} s, {:.0e} FLOP/s".format(*unseen))
            why = _slip(got, *unseen)  # a slip too small to show at the notebook's numbers
            fail(exercise, f"{where}: {off_by(got, want)}; {why}" if why else
                 f"{where}: write the rows from the arguments, not numbers worked out once")
    passed(exercise, f"{value:,.0f} rows per device; and at {len(unseens)} other cases")


def _slip(value: float, weights: int, hosts: int, devices: int, rate_bits: float,
          alpha_s: float, flops_per_s: float) -> str | None:
    """The likely slip behind a wrong ``value`` (``None``: none of those known)."""
    p = hosts * devices
    link_s = 2 * (p - 1) / p * 4 * weights / (rate_bits / 8)
    latency_s = 2 * (p - 1) * alpha_s
    per_row_s = 6 * weights / flops_per_s

    def near(communication_s: float, row_s: float = per_row_s, rtol=TOLERANCE) -> bool:
        return bool(np.isclose(value, communication_s / row_s, rtol=rtol))

    if near(link_s + latency_s, 1.0) or near((link_s + latency_s) * 1e3, 1.0):
        return ("that is the all-reduce's time; divide it by one row's compute time for the "
                "rows that take as long")
    if any(near(link_s * f + latency_s) for f in (8, 1 / 8, 1 / 64)):  # 1/64: × 8 for ÷ 8
        return "the rate is in bits per second: divide it by 8 for bytes"
    if near(link_s / 4 + latency_s):
        return "the gradient has 4 bytes per float32 weight"
    if near(link_s / 2 + latency_s):
        return "an all-reduce is two passes of the ring: 2(p-1)/p of the gradient"
    if near(link_s * p / (p - 1) + latency_s) or near(2 * 4 * weights / (rate_bits / 8)
                                                      + latency_s):
        return "a rank never sends its own chunk: each pass moves (p-1)/p of the gradient"
    if near(link_s * devices + latency_s):
        return ("on a ring numbered host by host each pass crosses a host's link once: "
                "2(p-1)/p of the gradient, not that for each of its devices")
    # the latency is small beside the bytes: these slips are told apart only by exact values
    if alpha_s > 0 and near(link_s, rtol=1e-6):
        return "add the latency: 2(p-1) message steps of alpha_s each"
    if alpha_s > 0 and any(near(link_s + steps * alpha_s, rtol=1e-6)
                           for steps in (1, p - 1, p, 2 * p, hosts - 1, 2 * (hosts - 1))):
        return "a ring all-reduce takes 2(p-1) message steps, each paying alpha_s"
    # these two are close at a few ranks: told apart by exact values, as formulas give them
    if hosts > 1 and near(2 * (hosts - 1) / hosts * 4 * weights / (rate_bits / 8)
                          + 2 * (hosts - 1) * alpha_s, rtol=1e-6):
        return "p is every rank of the ring, hosts × devices, not the hosts alone"
    if near(4 * weights / (rate_bits / 8) + latency_s, rtol=1e-6):
        return "each host's link carries 2(p-1)/p of the gradient, not the gradient once"
    if near((link_s + latency_s) * p):
        return "give the rows per device, not the rows of all p devices together"
    if any(near(link_s * f + latency_s, rtol=1e-3)  # FRAME_SHARE or TCP's 96 %, either way
           for f in (1 / FRAME_SHARE, FRAME_SHARE, 1 / 0.96, 0.96)):
        return "leave out the headers' share: divide the bytes by rate_bits / 8"
    for flops, name in ((2, "forward pass only"), (4, "backward pass only")):
        if near(link_s + latency_s, flops * weights / flops_per_s):
            return (f"{flops} FLOPs per weight per row is the {name}: the exercise counts 6 "
                    "for every weight, forward (2) and backward (4: the weights' and the "
                    "input's gradients)" if flops == 2 else
                    "4 FLOPs per weight leaves out the input's gradient, true of the first "
                    "layer only: the exercise counts 6 for every weight")
    return None


_WHAT = ("the communication time (2(p-1) α plus 2(p-1)/p of the gradient's bytes over the rate) "
         "divided by one row's compute time (6 · weights FLOPs at flops_per_s)")


# (dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s) the notebook never uses:
# fewer steps, more steps, never slower, never sooner
_UNSEEN_RATES = ((140, 6.7e6, 100, 2.7e5, 0.03, 0.04), (80, 6.7e6, 120, 3.4e6, 0.2, 0.0),
                 (50, 6.7e6, 40, 2.1e6, 0.1, 0.0), (50, 6.7e6, 50, 7e6, 0.1, 0.01))


def _fresh_rate_case(rng: random.Random) -> tuple:
    """One more case, drawn anew at every check (as ``_fresh_rows_case``), drawn again until its
    rate is an end or at least 100 Mbit/s, so an answer rounded to whole Mbit/s passes. The
    scheme sends fewer bytes per step, so it never both sends more to the target and computes
    less."""
    while True:
        dp_bytes = 10 ** rng.uniform(6, 8)
        case = (rng.randint(20, 200), dp_bytes, rng.randint(20, 200),
                dp_bytes * 10 ** rng.uniform(-2.5, -0.05), 10 ** rng.uniform(-2, -0.5),
                10 ** rng.uniform(-3, -1))
        rate = break_even_bits(*case)  # an end, or 100 Mbit/s to 1 Tbit/s as the fixed cases
        if math.isinf(rate) or rate == 0 or 1e8 <= rate <= 1e12:
            return case


def check_break_even(fn, *, dp_steps: float, dp_bytes: float, scheme_steps: float,
                     scheme_bytes: float, compute_s: float, own_s: float) -> None:
    """Exercise 20: ``fn(dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s)`` →
    the link rate in bit/s below which the scheme reaches the target sooner than data
    parallelism (``math.inf``: at every rate; 0: at none), within ``TOLERANCE``, at the
    exercise's numbers (the steps may be fractional: interpolated, or a mean over seeds) and
    at cases the notebook never uses. ``fn`` must not call
    ``break_even_bits``."""

    exercise = "the break-even rate"
    function_given(exercise, "my_break_even", fn)

    def judge(case, first: bool) -> float:
        call = "my_break_even({:g}, {:.3g}, {:g}, {:.3g}, {:g}, {:g})".format(*case)
        raw = call_without(exercise, fn, case, forbidden=(break_even_bits,),
                           refusal="my_break_even uses the package's {}, which computes "
                                   "the answer: write both times yourself", call=call)
        got, want = number(raw), break_even_bits(*case)
        if got is None or math.isnan(got):
            fail(exercise, f"{call} must return one number of bit/s (math.inf or 0.0 at the "
                           f"ends), got {raw!r}")
        if math.isinf(want) or want == 0:
            if got != want:
                end = ("the scheme is sooner at every rate here (it sends fewer bytes and "
                       "computes no longer): return math.inf" if math.isinf(want) else
                       "the scheme is sooner at no rate here (no fewer bytes to the target, "
                       "and no less compute): return 0.0")
                fail(exercise, f"{call}: {end}")
            return got
        if math.isinf(got):
            fail(exercise, f"{call} is infinite, but the scheme's extra compute to the target "
                           "(its steps, each with compute_s and its own work own_s, against data "
                           "parallelism's steps of compute_s) is positive here: it pays only "
                           "below a finite rate")
        if not np.isclose(got, want, rtol=TOLERANCE):
            if not first and typed is not None and np.isclose(got, typed, rtol=1e-9):
                fail(exercise, f"right at this notebook's numbers, but {call} gives the same "
                               "number: write the rate from the arguments, not a number worked "
                               "out once")
            where = "" if first else f"right at this notebook's numbers, but not at {call}: "
            fail(exercise, f"{where}{off_by(got, want)}; {_rate_slip(got, *case)}")
        return got

    typed = None
    value = typed = judge((dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s),
                          True)
    unseens = (*_UNSEEN_RATES, _fresh_rate_case(random.Random()))
    for unseen in unseens:
        judge(unseen, False)
    passed(exercise, f"{value / 1e6:,.0f} Mbit/s; and at {len(unseens)} other cases")


def _rate_slip(got, dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s) -> str:
    """The likely slip behind a wrong break-even rate ``got``."""
    saved = dp_steps * dp_bytes - scheme_steps * scheme_bytes
    extra = scheme_steps * (compute_s + own_s) - dp_steps * compute_s

    def near(value: float, rtol: float = TOLERANCE) -> bool:
        return bool(np.isclose(got, value, rtol=rtol))

    if near(saved / extra):
        return "that is bytes per second: the rate is in bits per second, 8 per byte"
    if near(saved / extra / 8):
        return "bytes to bits is × 8, not ÷ 8: the rate is in bits per second"
    if near(8 * saved / extra / 1e6):
        return "that is Mbit/s: return bit/s"
    if own_s > 0 and near(8 * (dp_bytes - scheme_bytes) / own_s):
        return ("that compares one step of each; count each one's steps to the target: their "
                "bytes and their compute differ in number of steps")
    if own_s > 0 and near(8 * saved / (scheme_steps * own_s), rtol=1e-3):
        return "count the compute of every step: the two take different numbers of steps"
    if scheme_steps != dp_steps and near(8 * saved / ((scheme_steps - dp_steps) * compute_s)):
        return "add the scheme's own work, own_s, to each of its steps"
    if any(near(8 * saved / extra * f, rtol=1e-3)
           for f in (FRAME_SHARE, 1 / FRAME_SHARE, 0.96, 1 / 0.96)):
        return "leave out the headers: the exercise divides the bytes by the rate alone"
    if near(8 * saved / extra, rtol=0.1):
        return ("close: use the steps and bytes exactly as given (the steps are the seeds' means, "
                "not one seed's)")
    return ("the rate where the bytes saved to the target, over the link, take as long as the "
            "extra seconds of compute to the target")
