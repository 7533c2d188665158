"""Part six's entries of the course's outline (``outline.py`` puts them after part five's):
latency measured on the cluster's delay line, and what a round trip costs the algorithms."""

from __future__ import annotations

from course_utils.tools.notebooks.records import Exercise, Mistake, StepOutline

PART_SIX = "Part six: latency, measured"

PART_SIX_STEPS = (
    StepOutline(
        23, "23_latency", PART_SIX,
        title="Latency on the cluster: what a round trip costs the algorithms",
        line="recursive doubling from `ppermute` on the page; on a delay line, α per message "
             "step, the ring against recursive doubling, one TCP connection's window and slow "
             "start, DiLoCo at 50 ms one way",
        exercise=Exercise(
            task="the time one fresh TCP connection needs to send a sync of S bytes over a link "
                 "of a given rate and round trip, slow start included",
            check="check_transfer_time", minutes=15,
            judges="within 1e-6, at the saved run's numbers and at cases the page never shows "
                   "(ending inside slow start, the BDP covered at once, a round ending exactly, "
                   "one drawn anew at every call); the package's window models refused; names "
                   "the handshake, the reply, bits for bytes, the initial window and linear "
                   "growth",
            mistakes=(
                Mistake("the handshake left out", "add the handshake"),
                Mistake("no slow start: the whole sync at the link's rate",
                        "a fresh connection does not start at the link's rate"),
                Mistake("the rate in bits taken for bytes", "rate_bits is in bits per second"),
                Mistake("the initial window as 10 bytes, not 10 segments",
                        "the initial window is 10 segments of 1448 bytes"),
                Mistake("the window grown by one segment a round",
                        "in slow start the window doubles every round trip"),
                Mistake("the package's slow_start_s called", "uses the package's slow_start_s"),
            ),
        ),
    ),
)
