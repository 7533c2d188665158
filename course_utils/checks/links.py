"""Self-check for step 17: a flat and a two-level all-reduce's time, predicted from the link."""

from __future__ import annotations

import numpy as np

from course_utils.checks.helpers import fail, given, number, off_by, passed
from course_utils.models.links import FRAME_SHARE, link_time_s

TOLERANCE = 0.03  # relative: answers rounded to tens of ms pass; the unit slips below are ≥ 4 %


def _near(value, want) -> bool:
    """``value`` within ``TOLERANCE`` of ``want`` (elementwise, all of them)."""
    return bool(np.allclose(value, want, rtol=TOLERANCE))


def check_link_prediction(flat_ms, two_level_ms, *, nbytes: float, hosts: int, devices: int,
                          bytes_per_s: float, measured_ms: tuple | None = None) -> None:
    """Exercise 17: both times in ms within ``TOLERANCE`` of the link model
    (``links.link_time_s``). ``measured_ms``: the saved run's (flat, two-level) times, so that
    a measurement typed in is told it is one."""
    exercise = "times from the link rate"
    p = hosts * devices
    names, kinds = ("my_flat_ms", "my_two_level_ms"), ("all_reduce", "hierarchical")
    wants = [link_time_s(kind, nbytes, hosts, devices, bytes_per_s) * 1e3 for kind in kinds]
    values = []
    for name, got in zip(names, (flat_ms, two_level_ms)):
        given(exercise, name, got, "store your prediction in milliseconds")
        value = number(got)
        if value is None or not np.isfinite(value):
            fail(exercise, f"{name} must be a finite number of milliseconds, got {got!r}")
        values.append(value)
    if _near(values[::-1], wants) and not _near(values, wants):
        fail(exercise, "the two answers are swapped: my_flat_ms is the flat all-reduce, "
                        "my_two_level_ms the two-level one")
    measured = [float(m) for m in measured_ms] if measured_ms is not None else []
    for name, kind, value, want in zip(names, kinds, values, wants):
        if _near(value, want):
            continue
        if measured and any(np.isclose(value, m, rtol=0.05) for m in measured):
            why = ("that is a measured time, not a prediction: the exercise wants the link "
                   "model's time (the bytes that cross one host's link / the rate), computed "
                   "before you read the measurement")
        elif _near(value * 8, want):
            why = "the rate is in bits per second: divide it by 8 for bytes"
        elif _near(value * 1e3, want):
            why = "give milliseconds, not seconds"
        elif _near(value / 1e3, want):
            why = "give milliseconds, not microseconds"
        # the headers' share, exact or as 96 %; tight enough not to take the MiB slip (1.049)
        elif any(np.isclose(value * f, want, rtol=0.001) for f in (FRAME_SHARE, 0.96)):
            why = ("if you took out the headers' share (FRAME_SHARE, TCP's 96 %), leave it out: "
                   "the model divides the link bytes by the configured rate")
        elif any(np.isclose(value * f, want, rtol=0.003) or np.isclose(value / f, want, rtol=0.003)
                 for f in (2**20 / 1e6, 2**30 / 1e9)):  # binary and decimal units mixed
            why = ("check both units: the vector's MiB are 2^20 bytes, the rate's Mbit and Gbit "
                   "are 10^6 and 10^9 bit")
        elif kind == "hierarchical" and _near(value * 2, want):
            why = "the middle phase is an all-reduce across the hosts: two passes, 2(H-1)/H"
        elif kind == "all_reduce" and _near(value, want / 2):
            why = "an all-reduce is two passes of the ring, 2(p-1)/p of the vector"
        elif kind == "all_reduce" and _near(value * (p - 1) / p, want):
            why = "a rank never sends its own chunk: the ring moves (p-1)/p of the vector per pass"
        elif kind == "all_reduce" and _near(value, want / (2 * (p - 1) / p)):
            why = "each host's link carries 2(p-1)/p of the vector, not the vector once"
        elif kind == "hierarchical" and _near(value * devices, want):
            why = (f"the {devices} devices of a host share its one link: their slices add up "
                   "on it")
        elif abs(value / want - 1) < 2 * TOLERANCE:
            why = "close: compute with the exact numbers and round only at the end"
        else:
            why = ("count the bytes that cross one host's link, then divide by the rate"
                   if kind == "all_reduce" else
                   "only the middle phase crosses: an all-reduce of N/devices across the hosts, "
                   "for each device of the host, on the host's one link")
        fail(exercise, f"{name}: {off_by(value, want)}; {why}")
    passed(exercise, f"flat {float(flat_ms):.0f} ms, two-level {float(two_level_ms):.0f} ms")
