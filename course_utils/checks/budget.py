"""Self-check of step 08: one row of the communication budget, in whole bytes."""

from __future__ import annotations

import math

import jax

from course_utils.checks.helpers import (
    ExerciseFailed,
    call_without,
    check_keys,
    fail,
    function_given,
    number,
    off_by,
    passed,
    scalar,
    unit_causes,
)
from course_utils.models.cost import communication_budget, divisible_size


def check_budget_row(budget_row, *, table_nbytes: int | None = None) -> None:
    """Exercise 08: the student's ``budget_row(nbytes, p)``, one row of the communication budget
    predicted from the ring's formulas, called for this run's p and for p = 2, 3 and 8, at
    gradient sizes the notebook never used. It must not be or call ``communication_budget``
    (``ring_bytes`` of step 5 is allowed). ``table_nbytes``: the N of the notebook's table, named
    when a row was computed for it instead of the argument ``nbytes``."""
    exercise = "budget_row"
    function_given(exercise, "budget_row", budget_row)
    p_run = jax.device_count()
    checked = False
    for p in dict.fromkeys((p_run, 2, 3, 8)):  # this run's p first
        nbytes = 4 * divisible_size(5 * 2**15 + 3, p)  # not the notebook's sizes
        row = call_without(
            exercise, budget_row, (nbytes, p), forbidden=(communication_budget,),
            refusal="budget_row calls {}, which this exercise asks you not to call: write each "
            "entry from the formulas for p and N (ring_bytes is allowed)",
            call=f"budget_row({nbytes}, {p})")
        failure = None
        try:
            _check_row(row, nbytes, p, table_nbytes=table_nbytes, call=f"budget_row({nbytes}, {p})")
        except ExerciseFailed as error:
            failure = str(error)
        if failure and checked and _right_row(row, nbytes, p_run):
            failure = (f"budget for p = {p}: budget_row({nbytes}, {p}) gives the row for "
                       f"p = {p_run}: use the argument p, not N_DEVICES")
        if failure:
            raise ExerciseFailed(failure)  # outside the except: no traceback into the package
        checked = True
    passed(exercise, f"rows for p = {', '.join(map(str, dict.fromkeys((p_run, 2, 3, 8))))}")


def _right_row(row, nbytes: int, p: int) -> bool:
    """Whether ``row``'s bytes are those of ``nbytes`` on ``p`` ranks, to within a byte of
    rounding (``nbytes`` need not divide by ``p``)."""
    sent = 2 * (p - 1) * nbytes / p
    expected = {"all_reduce_bytes": sent, "scatter_gather_bytes": sent,
                "shard_storage_bytes": nbytes / p}
    if not isinstance(row, dict):
        return False
    got = {k: number(row.get(k)) for k in expected}
    return all(g is not None and abs(g - v) < 1 for (k, v), g in zip(expected.items(),
                                                                     got.values()))


def _check_row(
    row: dict, nbytes: int, ranks: int, *, table_nbytes: int | None = None, call: str = "row"
) -> None:
    """One row of the budget against the ring model, naming the likely slip.

    Whole numbers count in every natural form (int, a float such as ``1179648.0`` from ``/``,
    NumPy or 0-d JAX scalars)."""
    exercise = f"budget for p = {ranks}"
    (expected,) = communication_budget(nbytes, (ranks,))
    if row is None:
        fail(exercise, f"{call} is None: return the row, a dict")
    check_keys(exercise, call, row, expected)
    for key, value in expected.items():
        raw = scalar(row[key])  # a 0-d NumPy or JAX number counts as a number
        as_float = number(raw)
        if as_float is None or not math.isfinite(as_float):
            fail(exercise, f"{key}: give a whole number (an int), got {raw!r}")
        if key != "ranks" and (units := unit_causes(as_float, value)) and as_float != value:
            binary = [name for name, scale in (("MiB", 2**20), ("KiB", 2**10))
                      if math.isclose(as_float * scale, value)]
            unit = (f"that looks like {binary[0]}; the row asks for bytes" if binary
                    else "; or ".join(units))
            fail(exercise, f"{key}: {off_by(as_float, value)}; {unit} (p = {ranks}, "
                 f"N = {nbytes} bytes)")
        if not as_float.is_integer():
            fail(exercise, f"{key}: give a whole number of bytes, got {raw!r}")
        got = int(as_float)
        if got != value:
            sent = key != "shard_storage_bytes" and key != "ranks"
            slips = []
            if key == "shard_storage_bytes" and ranks > 1 and got == nbytes // (ranks - 1):
                slips.append("a device keeps 1 of p slices: divide by p, not p-1")
            if (key == "shard_storage_bytes" and ranks > 2
                    and got == (ranks - 1) * nbytes // ranks):
                slips.append("(p-1)/p·N is what a ring rank sends in the reduce-scatter; a "
                             "device stores N/p")
            other_n = got * nbytes // value if value else 0
            if (  # after the p-1 slip: at p = 4, N/(p-1) is also the table's N over p
                key != "ranks"
                and other_n == table_nbytes != nbytes
                and other_n * value == got * nbytes
            ):
                slips.append(
                    f"that is the value for N = {other_n} bytes, but the gradient asked for "
                    f"is nbytes = {nbytes} bytes: use the argument nbytes"
                )
            if sent and got == 2 * nbytes:
                slips.append("the factor (p-1)/p is missing")
            elif sent and got == nbytes:
                slips.append("that is N; in each of its two passes a ring rank sends p-1 chunks "
                             "of N/p")
            elif sent and 2 * got == value:
                slips.append("count both passes, reduce-scatter and all-gather")
            elif sent and ranks > 1 and got == nbytes // ranks:
                slips.append("that is N/p, the one slice a device keeps; count what it sends")
            elif key == "shard_storage_bytes" and ranks > 1 and got == nbytes:
                slips.append("that is N, the whole gradient; after reduce-scatter a device "
                             "keeps one slice of it")
            hint = off_by(got, value)
            if slips:
                hint += "; " + "; or ".join(slips)
            fail(exercise, f"{key}: {hint} (p = {ranks}, N = {nbytes} bytes)")
