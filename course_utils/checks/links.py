"""Self-check for step 17: a flat and a two-level all-reduce's time, predicted from the link."""

from __future__ import annotations

import numpy as np

from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.links import FRAME_SHARE, link_time_s

TOLERANCE = 0.03  # relative: answers rounded to tens of ms pass; the unit slips below are ≥ 4 %


def _near(value, want) -> bool:
    """``value`` within ``TOLERANCE`` of ``want`` (elementwise, all of them)."""
    return bool(np.allclose(value, want, rtol=TOLERANCE))


def check_link_prediction(fn, *, hosts: int, devices: int, nbytes: float, rate_bits: float,
                          measured_ms: tuple | None = None) -> None:
    """Exercise 17: ``fn(hosts, devices, n_bytes, rate_bits) -> (flat_ms, two_level_ms)``, both
    within ``TOLERANCE`` of the link model (``links.link_time_s``) at the exercise's numbers,
    then at shapes, sizes and rates the notebook never uses. ``fn`` must not be or call the
    package's link model. ``measured_ms``: the saved run's (flat, two-level) times, so that a
    measurement typed in is told it is one."""
    from course_utils.models.cost_model import link_bytes_sent, modelled_time
    from course_utils.models.latency import collective_time
    from course_utils.models.links import link_bytes

    exercise = "times from the link rate"
    function_given(exercise, "my_link_times_ms", fn)
    forbidden = (link_time_s, link_bytes, link_bytes_sent, collective_time, modelled_time)

    def times(h: int, d: int, n: float, bits: float) -> list[float]:
        call = f"my_link_times_ms({h}, {d}, {n:.0f}, {bits:.0e})"
        got = call_without(exercise, fn, (h, d, n, bits), forbidden=forbidden,
                           refusal="my_link_times_ms uses the package's {}, which computes "
                                   "the answer: write the bytes over a host's link and divide "
                                   "by the rate yourself", call=call)
        try:
            values = [number(v) for v in got]  # a tuple, a list or an array of two
        except TypeError:
            values = []
        if len(values) != 2:
            fail(exercise, f"{call} must return two numbers, (flat_ms, two_level_ms)")
        if any(v is None or not np.isfinite(v) for v in values):
            fail(exercise, f"{call} must return two finite numbers of milliseconds, got {got!r}")
        return values

    values = times(hosts, devices, nbytes, rate_bits)
    _judge(exercise, values, hosts, devices, nbytes, rate_bits / 8, measured_ms)
    for h, d, n, bits in _UNSEEN:
        want = [link_time_s(k, n, h, d, bits / 8) * 1e3 for k in ("all_reduce", "hierarchical")]
        if not _near(times(h, d, n, bits), want):
            fail(exercise, f"right at this run's numbers, but not at {h} hosts × {d} devices, "
                           f"{n / 2**20:.0f} MiB, {bits:.0e} bit/s: write both times from "
                           "hosts, devices, n_bytes and rate_bits, not numbers worked out once")
    passed(exercise, f"flat {values[0]:.0f} ms, two-level {values[1]:.0f} ms; and at "
                     f"{len(_UNSEEN)} other shapes, sizes and rates")


# (hosts, devices per host, bytes per device, bit/s) the notebook never uses
_UNSEEN = ((2, 2, 4 * 2**20, 2e8), (4, 8, 2**30, 1e11), (3, 2, 6 * 2**20, 5e7))


def _judge(exercise: str, values: list[float], hosts: int, devices: int, nbytes: float,
           bytes_per_s: float, measured_ms: tuple | None) -> None:
    """Fail with the likely slip unless ``values`` (flat, two-level ms) fit the link model."""
    p = hosts * devices
    names, kinds = ("flat", "two-level"), ("all_reduce", "hierarchical")
    wants = [link_time_s(kind, nbytes, hosts, devices, bytes_per_s) * 1e3 for kind in kinds]
    if _near(values[::-1], wants) and not _near(values, wants):
        fail(exercise, "the two times are swapped: return (flat_ms, two_level_ms), the flat "
                        "all-reduce first")
    measured = [float(m) for m in measured_ms] if measured_ms is not None else []
    for name, kind, value, want in zip(names, kinds, values, wants):
        if _near(value, want):
            continue
        # a measurement typed in matches to its rounding; a slip only to TOLERANCE
        if measured and np.isclose(value, measured[kinds.index(kind)], rtol=0.005):
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
        elif kind == "hierarchical" and _near(value * (hosts - 1) / hosts, want):
            why = ("a host never sends its own part: the all-reduce across the hosts moves "
                   "(H-1)/H of it per pass")
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
