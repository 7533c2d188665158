"""Self-check for step 17: a flat and a two-level reduce-scatter's time, predicted from the link
(a case the page never shows: it derives the all-reduce's and the all-gather's link bytes)."""

from __future__ import annotations

import numpy as np

from course_utils.checks.helpers import call_without, fail, function_given, number, off_by, passed
from course_utils.models.links import FRAME_SHARE, link_bytes, link_time_s

TOLERANCE = 0.03  # relative: answers rounded to tens of ms pass; the unit slips below are ≥ 4 %

# payload shares of a frame a student may take for the headers: TCP in Ethernet (1448 or 1460 of
# 1500, 1514 or 1538 bytes with preamble and gap) and the rounded 96 %
HEADER_SHARES = (FRAME_SHARE, 0.96, 1448 / 1500, 1460 / 1514, 1448 / 1538, 1460 / 1538)


def _near(value, want) -> bool:
    """``value`` within ``TOLERANCE`` of ``want`` (elementwise, all of them)."""
    return bool(np.allclose(value, want, rtol=TOLERANCE))


def reduce_scatter_link_ms(hosts: int, devices: int, nbytes: float, rate_bits: float) -> tuple:
    """The link model's (flat, two-level) reduce-scatter times in ms: a flat ring's one pass,
    (p-1)/p·N over a host's link, and the two-level schedule's middle phase, each of the D devices
    reduce-scattering N/D across the hosts on the host's one link, (H-1)/H·N in all."""
    bytes_per_s = rate_bits / 8
    flat = link_bytes("all_gather", nbytes, hosts, devices)  # one pass, as the all-gather's
    two_level = link_bytes("hierarchical", nbytes, hosts, devices) / 2  # one pass across
    return flat / bytes_per_s * 1e3, two_level / bytes_per_s * 1e3


def check_reduce_scatter_times(fn, *, hosts: int, devices: int, nbytes: float, rate_bits: float,
                               measured_ms: float | None = None) -> None:
    """Exercise 17: ``fn(hosts, devices, n_bytes, rate_bits) -> (flat_ms, two_level_ms)``, a flat
    ring reduce-scatter's and a two-level one's (reduce-scatter inside the host, then across the
    hosts) time, both within ``TOLERANCE`` of the link model at the exercise's numbers, then at
    shapes, sizes and rates the notebook never uses. ``fn`` must not be or call the package's link
    model. ``measured_ms``: the saved run's flat reduce-scatter, so that a measurement typed in is
    told it is one."""
    from course_utils.models.cost_model import link_bytes_sent, modelled_time
    from course_utils.models.latency import collective_time

    exercise = "reduce-scatter times from the link rate"
    function_given(exercise, "my_reduce_scatter_ms", fn)
    forbidden = (link_time_s, link_bytes, link_bytes_sent, collective_time, modelled_time,
                 reduce_scatter_link_ms)

    def times(h: int, d: int, n: float, bits: float) -> list[float]:
        call = f"my_reduce_scatter_ms({h}, {d}, {n:.0f}, {bits:.0e})"
        got = call_without(exercise, fn, (h, d, n, bits), forbidden=forbidden,
                           refusal="my_reduce_scatter_ms uses the package's {}, which computes "
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
    _judge(exercise, values, hosts, devices, nbytes, rate_bits, measured_ms)
    for h, d, n, bits in _UNSEEN:
        if not _near(times(h, d, n, bits), reduce_scatter_link_ms(h, d, n, bits)):
            fail(exercise, f"right at this run's numbers, but not at {h} hosts × {d} devices, "
                           f"{n / 2**20:.0f} MiB, {bits:.0e} bit/s: write both times from "
                           "hosts, devices, n_bytes and rate_bits, not numbers worked out once")
    passed(exercise, f"flat {values[0]:.0f} ms, two-level {values[1]:.0f} ms; and at "
                     f"{len(_UNSEEN)} other shapes, sizes and rates")


# (hosts, devices per host, bytes per device, bit/s) the notebook never uses
_UNSEEN = ((2, 2, 4 * 2**20, 2e8), (4, 8, 2**30, 1e11), (3, 2, 6 * 2**20, 5e7))


def _unit_slip(value: float, want: float) -> str | None:
    """The unit or header slip that turns ``want`` into ``value``, if one does."""
    if _near(value * 8, want):
        return "the rate is in bits per second: divide it by 8 for bytes"
    if _near(value * 1e3, want):
        return "give milliseconds, not seconds"
    if _near(value / 1e3, want):
        return "give milliseconds, not microseconds"
    # tight enough not to take the MiB slip (1.049) or the GiB one (1.074)
    if any(np.isclose(value * f, want, rtol=0.002) or np.isclose(value / f, want, rtol=0.002)
           for f in HEADER_SHARES):
        return ("you counted the frame headers (a payload share such as 1448 of 1514 bytes): "
                "leave them out, the model divides the link's payload bytes by the configured "
                "rate (the measurement's few per cent above it are those headers)")
    if any(np.isclose(value * f, want, rtol=0.003) or np.isclose(value / f, want, rtol=0.003)
           for f in (2**20 / 1e6, 2**30 / 1e9)):  # binary and decimal units mixed
        return ("check both units: the vector's MiB are 2^20 bytes, the rate's Mbit and Gbit "
                "are 10^6 and 10^9 bit")
    return None


def _shape_slip(two_level: bool, value: float, want: float, hosts: int, devices: int) -> str:
    """What a wrong count of the bytes over a host's link most likely left out or added."""
    p = hosts * devices
    if not two_level:
        if _near(value, 2 * want):
            return ("that is an all-reduce's time: a reduce-scatter is one pass of the ring, "
                    "not two")
        if _near(value * (p - 1) / p, want):
            return "a rank never sends its own chunk: the ring moves (p-1)/p of the vector"
        return "count the chunks of N/p that cross one host's link in one pass of the ring"
    if _near(value, 2 * want):
        return ("that is the two-level all-reduce's time: the middle phase of a two-level "
                "reduce-scatter is a reduce-scatter across the hosts, one pass")
    if _near(value * (hosts - 1) / hosts, want):
        return "a host never sends its own part: the pass across the hosts moves (H-1)/H of it"
    if _near(value * devices, want):
        return f"the {devices} devices of a host share its one link: their slices add up on it"
    if hosts > 1 and _near(value * p * (hosts - 1) / (hosts * (p - 1)), want):
        return ("that is the flat ring's time: in the two-level schedule only the phase across "
                "the hosts crosses a host's link")
    return ("only the phase across the hosts crosses: each device of the host reduce-scatters "
            "its node-reduced N/devices across the hosts, all on the host's one link")


def _judge(exercise: str, values: list[float], hosts: int, devices: int, nbytes: float,
           rate_bits: float, measured_ms: float | None) -> None:
    """Fail with the likely slip unless ``values`` (flat, two-level ms) fit the link model."""
    wants = reduce_scatter_link_ms(hosts, devices, nbytes, rate_bits)
    if _near(values[::-1], wants) and not _near(values, wants):
        fail(exercise, "the two times are swapped: return (flat_ms, two_level_ms), the flat "
                        "reduce-scatter first")
    for two_level, (name, value, want) in enumerate(zip(("flat", "two-level"), values, wants)):
        if _near(value, want):
            continue
        # a measurement typed in matches to its rounding; a slip only to TOLERANCE
        if not two_level and measured_ms is not None and np.isclose(value, measured_ms,
                                                                    rtol=0.005):
            why = ("that is a measured time, not a prediction: the exercise wants the link "
                   "model's time (the bytes that cross one host's link / the rate), computed "
                   "before you read the measurement")
        elif (unit := _unit_slip(value, want)) is not None:
            why = unit
        elif (shape := _shape_slip(bool(two_level), value, want, hosts, devices)) and (
                not shape.startswith(("count the", "only the"))
                or abs(value / want - 1) >= 2 * TOLERANCE):
            why = shape
        else:
            why = "close: compute with the exact numbers and round only at the end"
        fail(exercise, f"{name}: {off_by(value, want)}; {why}")
