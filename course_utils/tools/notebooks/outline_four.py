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
             "predicted and read off the cluster",
        exercise=Exercise(
            task="the rows per device at which a data-parallel step's compute takes as long as "
                 "its all-reduce over the links",
            check="check_balanced_rows", minutes=15,
            judges="within 2 %, at the saved run's numbers and at cases never shown; the step "
                   "model refused; names unit slips, the ring's passes and α's message steps",
            mistakes=(
                Mistake("the rate in bits taken for bytes",
                        "the rate is in bits per second: divide it by 8 for bytes"),
                Mistake("the all-reduce's time returned instead of rows",
                        "that is the all-reduce's time; divide it by one row's compute time"),
            ),
        ),
    ),
    StepOutline(
        19, "19_overlap", PART_FOUR,
        title="Overlap: hiding the all-reduce behind the backward pass",
        line="the backward pass of a tower of layers, each bucket all-reduced on a second device "
             "while the first computes; the overlap predicted, then one program, one device and "
             "two devices timed on the cluster; the one program as XLA:CPU compiles it; the "
             "collective matmul three ways",
        exercise=Exercise(
            task="the overlap column predicted before the table: the overlapped backward pass's "
                 "time from its compute, its buckets' bytes, the link's rate and α",
            check="check_overlap_prediction", minutes=20,
            judges="within 2 %, at the saved run's numbers and at cases bound by the compute, the "
                   "link and α that the page never shows; a loop or the closed form; the "
                   "package's models refused",
            mistakes=(
                Mistake("compute + communication (no overlap)",
                        "that is one after the other (compute + communication)"),
                Mistake("max(compute, communication)",
                        "max(compute, communication) leaves out the start and the end"),
                Mistake("α paid once per all-reduce",
                        "α is paid per message step"),
                Mistake("the rate in bytes divided by 8 again", "do not divide it by 8"),
                Mistake("a bucket ready when its compute starts (i − 1)",
                        "not when it starts"),
                Mistake("buckets − 1 all-reduces", "yours sends buckets − 1"),
                Mistake("2h message steps (p for p − 1)", "not 2h: p − 1, not p"),
                Mistake("one pass of the ring", "that is one pass of the ring"),
                Mistake("the whole bucket at every message step (no ÷ hosts)",
                        "sends one chunk, bucket_bytes / h"),
                Mistake("bucket_bytes divided by the buckets",
                        "bucket_bytes is one bucket's bytes already"),
                Mistake("the hosts typed in", "use the argument hosts"),
                Mistake("the package's hierarchical_time for a bucket",
                        "hierarchical_time, one of the models this exercise refuses"),
            ),
        ),
    ),
    StepOutline(
        20, "20_strategies_timed", PART_FOUR,
        title="Every strategy timed: which one pays on which link",
        line="HSDP on a `(\"host\", \"device\")` mesh against data parallelism; every strategy "
             "timed on the cluster from 50 Mbit/s to 10 Gbit/s: time per step and to a target "
             "loss, against the models; where each compression scheme pays",
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
