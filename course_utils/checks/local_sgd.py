"""Step 16's exercise check: the smallest H whose run of local SGD stays within a byte budget."""

from __future__ import annotations

from functools import partial

import jax
import numpy as np

from course_utils.checks.helpers import call_without, fail, function_given, number, passed

# (bytes per p, steps, budget in averagings): budgets between whole averagings, so no float
# rounding decides (96 / (11 + 1) is whole) ...
_BETWEEN = ((24_000, 100, 7.5), (6_000, 250, 20.2), (24_000, 96, 11.5), (12_000, 50, 60.5))
# ... budgets exactly on a run's total (H = 10 averages 10 times; H = 20 of 250 steps, 12), tried
# when p is a power of two: then every float form of 2(p−1)/p·nbytes is exact ...
_ON = ((24_000, 100, 10), (6_000, 250, 12))
# ... and a budget below one averaging: only an H that never averages fits (steps + 1).
_BELOW = (24_000, 100, 0.5)


def check_local_sgd_h(fn) -> None:
    """Exercise 16: ``fn(nbytes, p, steps, budget)``, the smallest H ≥ 1 whose run of ``steps``
    steps of local SGD (a ring all-reduce of ``nbytes`` over ``p`` devices every H steps, a round
    cut short at the end not averaged) sends at most ``budget`` bytes per device; judged against
    ``local_sgd_bytes`` on sizes, device counts and budgets the notebook never used, budgets
    exactly on a run's total and below one averaging included. It must not be or call
    ``local_sgd_bytes`` or ``train``."""
    from course_utils.training.strategies import local_sgd_bytes
    from course_utils.training.train import train

    exercise = "H for a byte budget"
    function_given(exercise, "my_local_sgd_h", fn)
    p_run = jax.device_count()
    ps = tuple(dict.fromkeys(q for q in (p_run, 2, 3, 8) if q > 1))  # this run's p first

    def answer(args: tuple):
        return number(call_without(
            exercise, fn, args, forbidden=(local_sgd_bytes, train), call=f"my_local_sgd_h{args}",
            refusal="my_local_sgd_h calls {}, which this exercise asks you not to call: "
            "write the bytes of a run yourself, then find H"))

    def whole(args: tuple, got) -> int:
        if got is None or not np.isfinite(got) or got != round(got) or got < 1:
            fail(exercise, f"my_local_sgd_h{args} must return a whole number of steps H ≥ 1")
        return int(got)

    answers = [(args, answer(args)) for p in ps for args in _cases(p)]
    for args, got in answers:
        if (got := whole(args, got)) == _right(*args):
            continue
        why = _h_slip(answers, p_run) or _h_ignored(fn, got, args, p_run)
        sent = local_sgd_bytes(*args[:3], got)
        if sent > args[3] + 0.5:
            what = f"H = {got} sends {sent:.0f} bytes, above the budget of {args[3]}"
        else:
            what = ("a smaller H also stays within the budget: return the smallest"
                    + ("" if why else "; if your search does, your run's bytes are counted too "
                       "high (per device: steps // H averagings of 2(p−1)/p · N)"))
        fail(exercise, f"my_local_sgd_h{args}: {what}" + (f"; {why}" if why else ""))
    for args in (_scaled(p, *_BELOW) for p in ps):  # last: a slip dividing by m fails above
        if whole(args, answer(args)) != _right(*args):
            fail(exercise, f"my_local_sgd_h{args}: this budget is below one averaging, and "
                 "only an H that never averages stays within it: the smallest such H")
    passed(exercise, f"the smallest H for p = {', '.join(map(str, ps))}, runs that H does not "
           "divide included")


def _scaled(p: int, per_p: int, steps: int, averagings: float) -> tuple:
    nbytes = per_p * p
    return nbytes, p, steps, round(averagings * 2 * (p - 1) * nbytes / p)


def _cases(p: int) -> list:
    """The judged (nbytes, p, steps, budget) of ``p``: ``_BETWEEN``, then ``_ON`` if p is a power
    of two."""
    return [_scaled(p, *case) for case in _BETWEEN + (_ON if p & (p - 1) == 0 else ())]


def _smallest_h(run_bytes, steps: int, budget: float, *, below: bool = False) -> int:
    """The smallest H ≥ 1 whose run sends ``run_bytes(H)``, at most ``budget`` (rounding forgiven
    to half a byte); ``below``: less than ``budget``."""
    slack = -0.5 if below else 0.5
    return next(h for h in range(1, steps + 2) if run_bytes(h) <= budget + slack)


def _right(nbytes: int, p: int, steps: int, budget: float) -> int:
    from course_utils.training.strategies import local_sgd_bytes

    return _smallest_h(partial(local_sgd_bytes, nbytes, p, steps), steps, budget)


def _h_slip(answers: list, p_run: int) -> str:
    """The slip whose H equals the answer in every judged case, or ``""``."""
    def ring(nbytes, p):
        return 2 * (p - 1) / p * nbytes

    def whole(nbytes, p, budget):
        return int((budget + 0.5) // ring(nbytes, p))

    def per_round(cost, below=False):
        return lambda n, p, s, b: _smallest_h(lambda h: s // h * cost(n, p), s, b, below=below)

    slips = (
        (lambda n, p, s, b: per_round(ring, below=True)(n, p, s, b), "at most the budget: a "
         "run that spends exactly the budget fits"),
        (lambda n, p, s, b: max(_right(n, p, s, b) - 1, 1), "that is one below the answer, the "
         "largest H whose run does not fit: return the smallest H whose run does"),
        (lambda n, p, s, b: _right(n, p, s, b) + 1, "that is one above the answer: the H before "
         "it also fits; return the smallest H whose run fits"),
        (lambda n, p, s, b: s // _right(n, p, s, b), "that is the number of averagings, "
         "steps // H: return H itself"),
        (lambda n, p, s, b: _smallest_h(lambda h: s / h * ring(n, p), s, b), "a run averages "
         "steps // H times, a whole number (a round cut short is not averaged), not steps / H "
         "rounds"),
        (lambda n, p, s, b: _smallest_h(lambda h: ring(n, p) / h, s, b), "the budget is for the "
         "whole run: count the bytes of its steps // H averagings, not one step's share of an "
         "averaging"),
        (lambda n, p, s, b: -(-s // max(whole(n, p, b), 1)), "a run averages steps // H times "
         "(a round cut short is not averaged), not steps / H: a smaller H may already fit"),
        (lambda n, p, s, b: -(-s // (whole(n, p, b) + 1)), "when steps / (m + 1) is a whole "
         "number, that H averages m + 1 times: H must be above steps / (m + 1)"),
        (lambda n, p, s, b: s // max(whole(n, p, b), 1), "with H = steps // m the run averages "
         "at most m times, but a smaller H may too: find the smallest"),
        (lambda n, p, s, b: int(s // (b / ring(n, p) + 1)) + 1, "the budget pays for whole "
         "averagings only: round budget / (bytes of one averaging) down first"),
        (per_round(lambda n, p: 2 * n), "the ring's factor (p−1)/p is missing"),
        (per_round(lambda n, p: (p - 1) / p * n), "count both passes of the ring all-reduce "
         "(reduce-scatter and all-gather)"),
        (per_round(lambda n, p: n), "one all-reduce of N bytes sends 2(p−1)/p·N per device, "
         "not N"),
        (per_round(lambda n, p: 4 * ring(n, p)), "nbytes is already in bytes: do not multiply "
         "by 4"),
        (per_round(lambda n, p: ring(n, p) / 4), "nbytes is already in bytes: do not divide by 4"),
        (per_round(lambda n, p: 8 * ring(n, p)), "nbytes is already in bytes: do not count bits "
         "(× 8)"),
        (per_round(lambda n, p: 2 * p / (p - 1) * n), "the ring's factor is (p−1)/p, not p/(p−1)"),
        (per_round(lambda n, p: ring(n, p_run)), "use the argument p, not N_DEVICES"),
        (per_round(lambda n, p: p * ring(n, p)), "that counts the bytes of every device: the "
         "budget is one device's, 2(p−1)/p·N per averaging"),
        (lambda n, p, s, b: _smallest_h(lambda h: (s // h + 1) * ring(n, p), s, b), "a run "
         "averages steps // H times, no extra averaging at the start or the end"),
    )
    for slip, why in slips:
        if p_run > 1 or "N_DEVICES" not in why:
            if all(slip(*args) == got for args, got in answers):
                return why
    return ""


def _h_ignored(fn, got: int, args: tuple, p_run: int) -> str:
    """The argument ``fn`` ignores (the notebook's ``n`` or ``p`` used instead), or ``""``."""
    from course_utils.problems.classification import padded_size

    nbytes, p, steps, budget = args
    mine = {_right(4 * padded_size(p_run), q, steps, budget) for q in (p, p_run)}
    probes = (("nbytes", [(2 * nbytes, p, steps, budget)]),  # p: a small change may not show
              ("p", [(nbytes, p + 1, steps, budget), (nbytes, 2 * p + 1, steps, budget)]))
    for name, others in probes:
        try:
            again = [number(fn(*other)) for other in others]
        except Exception:  # noqa: BLE001 - a probe only: the main call already ran
            continue
        if (all(_right(*other) == got for other in others)
                or any(a is None or not np.isclose(a, got) for a in again)):
            continue
        if name == "p":
            notebook = got == _right(nbytes, p_run, steps, budget)
            return ("the result does not change with the argument p: use the arguments, not "
                    "this notebook's p" if notebook else "your H does not depend on p: the "
                    "ring's factor (p−1)/p comes from it")
        return ("the result does not change with the argument nbytes: use the arguments, not "
                "this notebook's n (4 · n bytes)" if got in mine else "your H does not depend "
                "on nbytes: the bytes per averaging come from it")
    return ""
