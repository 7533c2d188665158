"""Self-checks for steps 18 and 20: how many micro-batches a device adds up before one
all-reduce so that a data-parallel step is no longer communication-bound (18), and the link rate
below which a compression scheme reaches a target sooner (20)."""

from __future__ import annotations

import math
import random

import numpy as np

from course_utils.checks.byte_models import BYTE_MODELS
from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.cost_model import Topology, message_steps
from course_utils.models.links import FRAME_SHARE
from course_utils.models.step import balanced_rows, break_even_bits, mlp_flops
from course_utils.training.strategies import DATA_PARALLEL
from course_utils.training.traffic import strategy_traffic

TOLERANCE = 0.02  # relative (step 20's rate); step 18's K is a whole number, compared exactly


def expected_rows(weights: int, hosts: int, devices: int, rate_bits: float, alpha_s: float,
                  flops_per_s: float) -> float:
    """The step model's balanced rows per device: a ring all-reduce of ``weights`` float32
    values over hosts × devices ranks, at ``rate_bits`` (no headers), against 6 FLOPs per weight
    per row (the exercise's count: every layer forms its input's gradient)."""
    traffic = strategy_traffic(DATA_PARALLEL, weights, Topology(hosts, devices))
    return balanced_rows(traffic, [(weights, 1)], flops_per_s=flops_per_s, alpha_s=alpha_s,
                         bytes_per_s=rate_bits / 8, input_gradient=True)


def expected_micro_batches(weights: int, hosts: int, devices: int, rate_bits: float,
                           alpha_s: float, flops_per_s: float, rows: int) -> int:
    """The fewest micro-batches of ``rows`` rows per device whose compute, one all-reduce for
    all of them, takes at least as long as that all-reduce (1: the plain step already does)."""
    return max(1, math.ceil(expected_rows(weights, hosts, devices, rate_bits, alpha_s,
                                          flops_per_s) / rows))


_ARGUMENTS = ("weights", "hosts", "devices", "rate_bits", "alpha_s", "flops_per_s", "rows")

# (weights, hosts, devices per host, bit/s, α in s, FLOP/s, rows) the notebook never uses: α a
# sixth of the time, α nothing, a wide ring, and one where a single micro-batch is enough; chosen
# so that every slip of ``_slipped`` and every rounding gives another K than the right one, and
# than every other slip, at these cases together (tests/test_compute_check.py)
_UNSEEN = ((50_000, 3, 1, 5e7, 1e-3, 1e9, 1), (2_000_000, 8, 2, 4e8, 0.0, 3e10, 8),
           (10_000_000, 4, 8, 1e11, 5e-6, 2e12, 8), (100_000_000, 2, 4, 1e12, 2e-6, 1e11, 8))
# ... and one where K micro-batches' compute equals the all-reduce exactly (12 bytes at a byte a
# second against 3 s of compute each: K = 4 in any float order), so the fewest is the ratio
# itself, not the next whole number above it
_EXACT = (3, 2, 1, 8.0, 0.0, 6.0, 1)


def _fresh_case(rng: random.Random) -> tuple:
    """One more case, drawn anew at every check: answers looked up in a table made beforehand
    (from the package's model, or from the cases a failure message showed) cannot know it.
    Drawn again until K is 2 to 2,000 and the rows' ratio is not a whole number to rounding."""
    while True:
        case = (int(10 ** rng.uniform(4, 8)), rng.randint(2, 8), rng.randint(1, 8),
                10 ** rng.uniform(7, 11), rng.choice((0.0, 10 ** rng.uniform(-6, -3))),
                10 ** rng.uniform(9, 13), 2 ** rng.randint(0, 12))
        ratio = expected_rows(*case[:6]) / case[6]
        if 1 < ratio < 2000 and abs(ratio - round(ratio)) > 1e-6:
            return case


def check_micro_batches(fn, *, weights: int, hosts: int, devices: int, rate_bits: float,
                        alpha_s: float, flops_per_s: float, rows: int) -> None:
    """Exercise 18: ``fn(weights, hosts, devices, rate_bits, alpha_s, flops_per_s, rows)`` → the
    fewest micro-batches K of ``rows`` rows per device that a data-parallel step adds up before
    its one all-reduce for the step to be no longer communication-bound
    (``expected_micro_batches``), exactly, at the exercise's numbers and at cases the notebook
    never uses (one where K = 1). The package's step model is refused; a wrong answer is matched
    against each known slip at every case."""
    exercise = "micro-batches before one all-reduce"
    function_given(exercise, "my_micro_batches", fn)
    forbidden = (balanced_rows, mlp_flops, message_steps, expected_rows,
                 expected_micro_batches, *BYTE_MODELS)
    page = (weights, hosts, devices, rate_bits, alpha_s, flops_per_s, rows)
    cases = (page, *_UNSEEN, _EXACT, _fresh_case(random.Random()))
    answers = []
    for case in cases:
        call = "my_micro_batches({}, {}, {}, {:.3g}, {:.3g}, {:.3g}, {})".format(*case)
        got = call_without(exercise, fn, case, forbidden=forbidden, call=call,
                           refusal="my_micro_batches uses the package's {}, which computes the "
                                   "answer: write the all-reduce's time and the compute of a "
                                   "micro-batch yourself")
        value = number(got)
        if value is None or not math.isfinite(value) or value < 0:
            fail(exercise, f"{call} must return one whole number of micro-batches, got {got!r}")
        answers.append((case, call, value))
    wrong = [(case, call, value) for case, call, value in answers
             if not _right(value, case)]
    if not wrong:
        passed(exercise, f"K = {expected_micro_batches(*page)} micro-batches of {rows} rows; "
                         f"right at {len(cases) - 1} other cases, one with K = 1")
        return
    case, call, value = wrong[0]
    where = "" if case is page else " (a case the page never shows)"
    why = _slip(answers, page)
    if len(wrong) == 1 and case == _EXACT and value == expected_micro_batches(*case) + 1:
        why = ("here K micro-batches' compute equals the all-reduce exactly, and that K is "
               "enough: the fewest K with compute at least as long, not the next one above")
    fail(exercise, f"{call}: {off_by(value, expected_micro_batches(*case))}{where}; {why}")


def _ratio(case) -> float:
    """K before rounding: the all-reduce's time over one micro-batch's compute."""
    return expected_rows(*case[:6]) / case[6]


def _right(value: float, case) -> bool:
    """Whether ``value`` is K, allowing for the last bit of a ratio that rounds to a whole."""
    ratio = _ratio(case)
    if case == _EXACT:  # a whole ratio in any float order: K is the ratio itself
        return value == max(1, math.ceil(ratio))
    return value in {max(1, math.ceil(ratio * (1 - 1e-9))), max(1, math.ceil(ratio * (1 + 1e-9)))}


def _times(weights, hosts, devices, rate_bits, alpha_s, flops_per_s):
    """The right all-reduce parts: ranks, seconds of bytes, seconds of α, one row's compute."""
    p = hosts * devices
    return p, 2 * (p - 1) / p * 4 * weights / (rate_bits / 8), 2 * (p - 1) * alpha_s, (
        6 * weights / flops_per_s)


def _slipped(case) -> dict[str, list[float]]:
    """For each known slip in the all-reduce's time or the compute, the ratios it gives (K
    before rounding) at ``case``; a slip may have several forms (bits taken twice, ÷ 8 or × 8)."""
    w, h, d, bits, a, f, rows = case
    p, link_s, latency_s, row_s = _times(w, h, d, bits, a, f)
    once = 4 * w / (bits / 8)

    def k(communication_s: float, per_row_s: float = row_s) -> float:
        return communication_s / (rows * per_row_s)

    return {
        "the rate is in bits per second: divide it by 8 for bytes":
            [k(link_s * x + latency_s) for x in (8, 1 / 8, 1 / 64)],
        "the gradient has 4 bytes per float32 weight": [k(link_s / 4 + latency_s)],
        "an all-reduce is two passes of the ring: 2(p-1)/p of the gradient":
            [k(link_s / 2 + latency_s)],
        "a rank never sends its own chunk: each pass moves (p-1)/p of the gradient":
            [k(2 * once + latency_s)],
        "on a ring numbered host by host each pass crosses a host's link once: 2(p-1)/p of the "
        "gradient, not that for each of its devices": [k(link_s * d + latency_s)],
        "add the latency: 2(p-1) message steps of alpha_s each": [k(link_s)],
        "a ring all-reduce takes 2(p-1) message steps, each paying alpha_s":
            [k(link_s + s * a) for s in (1, p - 1, p, 2 * p, h - 1, 2 * (h - 1))],
        "p is every rank of the ring, hosts × devices, not the hosts alone":
            [k(2 * (h - 1) / h * once + 2 * (h - 1) * a)],
        "each host's link carries 2(p-1)/p of the gradient, not the gradient once":
            [k(once + latency_s)],
        "leave out the headers' share: divide the bytes by rate_bits / 8":
            [k(link_s * x + latency_s) for x in (1 / FRAME_SHARE, FRAME_SHARE, 1 / 0.956, 0.956,
                                                1 / 0.96, 0.96)],
        "2 FLOPs per weight per row is the forward pass only: the exercise counts 6 for every "
        "weight, forward (2) and backward (4: the weights' and the input's gradients)":
            [k(link_s + latency_s, 2 * w / f)],
        "4 FLOPs per weight leaves out the input's gradient, true of the first layer only: the "
        "exercise counts 6 for every weight": [k(link_s + latency_s, 4 * w / f)],
        "the devices compute side by side: the step's compute is one device's K · rows rows, "
        "not all p devices' rows added up": [k(link_s + latency_s) / p],
    }


def _matches(answers, forms) -> bool:
    """Whether ``forms(case)`` (the candidate answers at a case) holds every answer."""
    return all(any(math.isclose(value, c, rel_tol=1e-6, abs_tol=1e-9) for c in forms(case))
               for case, _, value in answers)


def _slip(answers, page) -> str:
    """The slip that explains the answers at every case, or what to compute."""
    def rounded(x: float) -> list[float]:
        return [x, math.floor(x), math.ceil(x), round(x)]

    def time(case):
        _, link_s, latency_s, _ = _times(*case[:6])
        return [link_s + latency_s, *rounded(1e3 * (link_s + latency_s))]

    if len({value for _, _, value in answers}) == 1:
        return ("your K is the same at every case: write it from the arguments, not a number "
                "worked out once")
    if _matches(answers, time):
        return ("that is the all-reduce's time; K is how many micro-batches of rows rows take "
                "as long to compute")
    if _matches(answers, lambda case: rounded(expected_rows(*case[:6]))):
        return ("that is the rows per device whose compute takes as long as the all-reduce; K "
                "counts micro-batches of rows rows")
    if _matches(answers, lambda case: [expected_micro_batches(*case) * case[6]]):
        return "that is K · rows, the rows of the accumulated step: return K"
    if _matches(answers, lambda case: [_ratio(case)]):
        return ("K counts whole micro-batches: round the ratio up, to the fewest whose compute "
                "covers the all-reduce")
    if any(not float(value).is_integer() for _, _, value in answers):
        return "K counts whole micro-batches: return a whole number"
    if _matches(answers, lambda case: [0 if _ratio(case) < 1 else
                                       expected_micro_batches(*case)]):
        return ("where one micro-batch already computes longer than the all-reduce, K is 1 "
                "(the plain step), not 0")
    if _matches(answers, lambda case: [math.floor(_ratio(case)),
                                       max(1, math.floor(_ratio(case)))]):
        return ("rounded down: with that many micro-batches the compute is still shorter than "
                "the all-reduce; round up")
    if _matches(answers, lambda case: [round(_ratio(case)), max(1, round(_ratio(case)))]):
        return "rounded to the nearest: K is the ratio rounded up"
    for why, forms in _slipped(page).items():
        for j in range(len(forms)):  # one form of the slip at every case
            if _matches(answers, lambda case, why=why, j=j: [
                    max(1, math.ceil(_slipped(case)[why][j]))]):
                return why
    for names in (*_ARGUMENTS, "hosts and devices"):
        fixed = {i for i, name in enumerate(_ARGUMENTS) if name in names.split(" and ")}

        def typed(case, fixed=fixed):
            return [expected_micro_batches(*(page[i] if i in fixed else v
                                             for i, v in enumerate(case)))]

        if _matches(answers, typed):
            return (f"your K does not change with {names}: use the arguments, not this "
                    "notebook's numbers")
    return _WHAT


_WHAT = ("K is the fewest micro-batches whose compute (K · rows rows at 6 · weights FLOPs each, "
         "at flops_per_s) takes as long as the one all-reduce (2(p-1) α plus 2(p-1)/p of the "
         "gradient's bytes over the rate)")


# (dp_steps, dp_bytes, scheme_steps, scheme_bytes, compute_s, own_s) the notebook never uses:
# fewer steps, more steps, never slower, never sooner
_UNSEEN_RATES = ((140, 6.7e6, 100, 2.7e5, 0.03, 0.04), (80, 6.7e6, 120, 3.4e6, 0.2, 0.0),
                 (50, 6.7e6, 40, 2.1e6, 0.1, 0.0), (50, 6.7e6, 50, 7e6, 0.1, 0.01))


def _fresh_rate_case(rng: random.Random) -> tuple:
    """One more case, drawn anew at every check (as ``_fresh_case``), drawn again until its
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
