"""Part four's entries of the course's outline (``outline.py`` puts them after the capstone's):
compute against communication, overlap, and every strategy timed on the cluster."""

from __future__ import annotations

from course_utils.tools.notebooks.records import Exercise, Mistake, StepOutline

PART_FOUR = "Part four: compute against communication, every strategy timed"

PART_FOUR_STEPS = (
    StepOutline(
        18, "18_compute_vs_communication", PART_FOUR,
        title="Compute against communication: when is a step communication-bound?",
        line="a data-parallel step and its accumulated form on the page; its compute from FLOPs, "
             "its communication from the link model with α; the batch where the two balance, "
             "predicted and read off the cluster; a TPU chip's step against the links",
        exercise=Exercise(
            task="how many micro-batches of a given size a device adds up before one "
                 "all-reduce for the data-parallel step to be no longer communication-bound",
            check="check_micro_batches", minutes=20,
            judges="exactly, at the saved run's numbers and at cases never shown (one already "
                   "compute-bound: K = 1); the step model refused; names unit slips, the ring's "
                   "passes, α's message steps, the FLOPs counted and the rounding, each matched "
                   "at every case",
            mistakes=(
                Mistake("the rate in bits taken for bytes",
                        "the rate is in bits per second: divide it by 8 for bytes"),
                Mistake("K rounded down",
                        "rounded down: with that many micro-batches the compute is still "
                        "shorter than the all-reduce"),
                Mistake("the balanced rows returned, not the micro-batches",
                        "that is the rows per device whose compute takes as long as the "
                        "all-reduce"),
            ),
        ),
    ),
    StepOutline(
        19, "19_overlap", PART_FOUR,
        title="Overlap: hiding the all-reduce behind the backward pass",
        line="the backward pass of a tower of layers, each bucket all-reduced on a second device "
             "while the first computes; the rate it hides predicted, then one program, one "
             "device and two timed on the cluster; the one program as XLA:CPU compiles it; the "
             "collective matmul three ways",
        exercise=Exercise(
            task="the slowest link rate at which the overlapped backward pass still hides every "
                 "bucket's all-reduce but the last (each within the compute between two "
                 "buckets); math.inf where α alone is too slow",
            check="check_overlap_rate", minutes=20,
            judges="within 2 %, at the saved run's numbers and at cases bound by the link and by "
                   "α (inf) that the page never shows; the package's time models (the bucketed "
                   "model among them) refused; the rate then read against the measured table",
            mistakes=(
                Mistake("the ring's factor 2(p − 1)/p forgotten (the bucket once)",
                        "not the whole bucket once"),
                Mistake("the ring's factor as 2(p − 1)",
                        "the ring's factor is 2(h − 1)/h, not 2(h − 1)"),
                Mistake("α dropped", "α is missing"),
                Mistake("α read as microseconds", "as if it were in microseconds"),
                Mistake("α left in seconds beside milliseconds", "alpha_s is in seconds"),
                Mistake("α for h − 1 message steps, not 2(h − 1)", "not h − 1"),
                Mistake("compute_ms taken for seconds", "compute_ms is in milliseconds"),
                Mistake("the rate returned in bits per second", "that is bits per second"),
                Mistake("the rate returned in Mbit/s", "that is megabits per second"),
                Mistake("buckets − 1 gaps for buckets",
                        "not compute_ms / (buckets − 1)"),
                Mistake("the whole pass as the gap", "not in the whole backward pass"),
            ),
        ),
    ),
    StepOutline(
        20, "20_strategies_timed", PART_FOUR,
        title="Every strategy timed: which one pays on which link",
        line="HSDP on a `(\"host\", \"device\")` mesh against data parallelism; every strategy "
             "timed on the cluster from 50 Mbit/s to 10 Gbit/s: time per step and to a band of "
             "target losses, against the models; where each compression scheme pays",
        exercise=Exercise(
            task="the link rate below which a compression scheme reaches a target loss sooner "
                 "than data parallelism",
            check="check_break_even", minutes=20,
            judges="within 2 %, at the saved run's numbers and at cases never shown, the two ends "
                   "included; `break_even_bits` refused",
            mistakes=(
                Mistake("the rate left in bytes per second", "that is bytes per second"),
                Mistake("one step of each compared, not the steps to the target",
                        "count each one's steps to the target"),
            ),
        ),
    ),
)
