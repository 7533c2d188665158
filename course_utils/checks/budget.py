"""Self-check of step 08: one row of the communication budget, in whole bytes.

Every check either prints one ``PASSED: <exercise>`` line or raises ``ExerciseFailed`` whose message
says what is wrong without giving the answer. Expected values are computed from the inputs passed
in, never stored.
"""

from __future__ import annotations

import math

from course_utils.checks.helpers import (
    check_keys,
    fail,
    given,
    number,
    off_by,
    passed,
    scalar,
    unit_causes,
)
from course_utils.models.cost import BudgetRow, communication_budget


def check_budget_row(
    row: dict, nbytes: int, ranks: int, *, table_nbytes: int | None = None
) -> None:
    """Exercise 08: one row of the communication budget, predicted by hand. ``table_nbytes``: the
    N of the notebook's table, named when the row was computed for it instead of ``nbytes``.

    Whole numbers count in every natural form (int, a float such as ``1179648.0`` from ``/``,
    NumPy or 0-d JAX scalars); a row that ``communication_budget`` returned is refused, since
    the exercise asks for the prediction by hand."""
    exercise = f"budget for p = {ranks}"
    (expected,) = communication_budget(nbytes, (ranks,))
    given(exercise, "row", row, "store your prediction, a dict, in row")
    if isinstance(row, BudgetRow):
        fail(exercise, "row comes from communication_budget, which this exercise asks you not to "
             "call: write each entry from the formulas for p and N")
    check_keys(exercise, "row", row, expected)
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
            other_n = got * nbytes // value if value else 0
            if (  # after the p-1 slip: at p = 4, N/(p-1) is also the table's N over p
                key != "ranks"
                and other_n == table_nbytes != nbytes
                and other_n * value == got * nbytes
            ):
                slips.append(
                    f"that is the value for N = {other_n} bytes, but this exercise's gradient "
                    f"is nbytes = {nbytes} bytes"
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
    passed(exercise, f"all-reduce {expected['all_reduce_bytes']} bytes per rank")
