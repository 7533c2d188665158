"""Part five's entries of the course's outline (``outline.py`` puts them after part four's):
training with less communication between replicas, DiLoCo's inner and outer optimizers, and
Streaming DiLoCo across slow links."""

from __future__ import annotations

from course_utils.tools.notebooks.records import Exercise, Mistake, StepOutline

PART_FIVE = "Part five: fewer syncs between replicas, DiLoCo"

PART_FIVE_STEPS = (
    StepOutline(
        21, "21_diloco", PART_FIVE,
        title="DiLoCo: an inner and an outer optimizer",
        line="replicas on a `(\"host\", \"device\")` mesh; H inner AdamW steps and the outer "
             "Nesterov step written in one `shard_map`, against optax and the package; the bytes "
             "across the replicas read from the compiled programs; held-out loss against rows "
             "and bytes for data parallelism, local SGD and DiLoCo; the memory one device holds",
        exercise=Exercise(
            task="the smallest H at which DiLoCo's sync across the replicas, sent at a link's "
                 "rate, adds at most a given fraction to an inner step's time",
            check="check_smallest_h", minutes=20,
            judges="exactly, at part four's numbers and at cases never shown (one on the "
                   "boundary, one with a single replica, one drawn anew); the package's byte "
                   "models refused; names unit slips, the ring's factor and the all-reduce "
                   "inside a replica counted as crossing",
            mistakes=(
                Mistake("the link rate in bits taken for bytes",
                        "the rate is in bits per second"),
                Mistake("the all-reduce inside a replica counted as crossing (a ring of R · D)",
                        "only the all-reduce across the replicas crosses the link"),
                Mistake("one device's slice taken for the replica's (÷ D)",
                        "the replica's link carries every device's slice"),
                Mistake("R in place of R − 1 in the ring's factor",
                        "counts the R − 1 other replicas, not R"),
                Mistake("H rounded down", "round up, not down"),
                Mistake("the package's diloco_cluster.sync_link_bytes called",
                        "uses the package's diloco_cluster.sync_link_bytes"),
            ),
        ),
    ),
    StepOutline(
        22, "22_training_across_slow_links", PART_FIVE,
        title="Training across slow links: Streaming DiLoCo, measured",
        line="Streaming DiLoCo's scheduled fragments; its 4-bit sync on the page; on the cluster "
             "at 10 Mbit/s to 1 Gbit/s, the step against the round model, where overlap hides a "
             "sync, time to a band of targets; a chip's H",
        exercise=Exercise(
            task="the slowest link rate at which one fragment's quantized sync still hides "
                 "behind the τ inner steps it overlaps",
            check="check_slowest_hidden_rate", minutes=15,
            judges="within 2 %, at the saved run's numbers and at cases the page never shows "
                   "(int8 and 4 bits, 2 to 9 hosts, one case drawn anew at every call); the "
                   "package's byte models refused; names unit slips, the ring's share, the "
                   "fragment, the scales and τ",
            mistakes=(
                Mistake("the rate left in bytes per second", "that is bytes per second"),
                Mistake("every parameter counted, not one fragment",
                        "one fragment is n_params / fragments values"),
                Mistake("the scales left out", "the scales travel too"),
                Mistake("the ring's share 2(R − 1)/R dropped (1 at the page's 2 hosts)",
                        "the ring's share is missing"),
                Mistake("one inner step to hide behind, not τ",
                        "the sync has tau inner steps to hide behind, not one"),
            ),
        ),
    ),
)
