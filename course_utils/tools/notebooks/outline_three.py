"""Part three's entries of the course's outline (``outline.py`` puts them after part two's):
ZeRO stages and FSDP, compression with error feedback, local SGD."""

from __future__ import annotations

from course_utils.tools.notebooks.records import Exercise, Mistake, StepOutline

PART_THREE = "Part three: ZeRO and FSDP, compression, local SGD"

PART_THREE_STEPS = (
    StepOutline(
        14, "14_zero_stages", PART_THREE,
        title="ZeRO stages and FSDP: sharding what data parallelism repeats",
        line="one training run under data parallelism and ZeRO-1/2/3: the same loss, the memory "
             "per device read from the shards, the bytes from the compiled program; `jax.grad` "
             "through an all-gather gives a reduce-scatter; ZeRO-3's second gather, merged by XLA "
             "or kept",
        exercise=Exercise(
            task="predict the peak one device holds during a step under data parallelism and "
                 "ZeRO-1/2/3, for layers of unequal sizes, from the page's shape model",
            check="check_peak_prediction", minutes=25,
            judges="against the package's shape model at the page's layers and at three layer "
                   "lists and device counts the page never shows; the package's model refused",
            mistakes=(
                Mistake("the mean layer for the largest",
                        "the layer held at the peak is the largest, not one of the mean size"),
                Mistake("the last layer for the largest", "the largest decides the peak, not "
                        "the last"),
                Mistake("every layer gathered at once",
                        "ZeRO-3 gathers one layer at a time, not all at once"),
                Mistake("ZeRO-3's state left out of its peak",
                        "at the peak the device still holds its state"),
                Mistake("ZeRO-2's whole local gradient taken as a slice",
                        "ZeRO-2 computes the whole local gradient (f32[n]) before its "
                        "reduce-scatter"),
                Mistake("ZeRO-1's slice of the sum left out",
                        "ZeRO-1 updates its slice with its slice of the summed gradient"),
                Mistake("values counted instead of bytes",
                        "count bytes (4 per float32 value), not values"),
                Mistake("the all-gathered w counted beside the old w",
                        "all-gathered w replaces the old w"),
                Mistake("slices of n/(p − 1)", "a slice is n/p values"),
            ),
        ),
    ),
    StepOutline(
        15, "15_compressed_communication", PART_THREE,
        title="Compressed communication: fewer bytes per gradient, and what they cost",
        line="bf16 compiled to f32 on CPU, and sent as u16; int8, top-k with and without error "
             "feedback, PowerSGD: bytes, gradient error, loss against steps and bytes",
        exercise=Exercise(
            task="error feedback around int8 (a scale per bucket of 64): what is sent, what is "
                 "kept for the next step, and how large the residual can get",
            check="check_int8_feedback", minutes=25,
            judges="within float rounding, on random vectors of two sizes, as JAX arrays and "
                   "traced; the package's quantizers refused",
            mistakes=(
                Mistake("g quantized alone, not g + residual", "you quantize g alone"),
                Mistake("the new residual forgets the old one",
                        "the new residual forgets the old one"),
                Mistake("one scale for the whole vector", "not one for the whole vector"),
                Mistake("the codes cut toward zero (astype)", "astype(jnp.int8) cuts toward zero"),
                Mistake("the codes sent without their scale",
                        "the codes times their bucket's scale"),
                Mistake("255 levels for int8's 127", "not 255 levels"),
                Mistake("a bucket of zeros divided by its zero scale",
                        "a bucket of zeros has scale 0"),
                Mistake("the bound as a whole step of the codes",
                        "off by at most half a step"),
                Mistake("the bound in units of the bucket's largest value",
                        "in units of the scale s"),
            ),
        ),
    ),
    StepOutline(
        16, "16_local_sgd", PART_THREE,
        title="Local SGD: communicating less often",
        line="H local steps, then `pmean`: bytes divided by H; drift on skewed shards; every "
             "strategy of the unit on one picture",
        exercise=Exercise(
            task="the smallest H whose run of local SGD stays within a byte budget: the bytes "
                 "of a run derived, then turned round",
            check="check_local_sgd_h", minutes=25,
            judges="your H against the package's byte model on sizes, p, run lengths and "
                   "budgets the notebook never used; calling `local_sgd_bytes` or `train` is "
                   "refused",
            mistakes=(
                Mistake("steps / H averagings, not steps // H",
                        "a run averages steps // H times (a round cut short is not averaged)"),
                Mistake("one pass of the ring counted", "count both passes of the ring all-reduce"),
                Mistake("the notebook's n and p instead of the arguments",
                        "does not change with the argument nbytes: use the arguments"),
                Mistake("a run that spends exactly the budget refused",
                        "at most the budget: a run that spends exactly the budget fits"),
                Mistake("steps / H rounds, H tried one by one",
                        "a whole number (a round cut short is not averaged)"),
                Mistake("one step's bytes held against the run's budget",
                        "the budget is for the whole run"),
                Mistake("the largest H that does not fit", "one below the answer"),
                Mistake("one above the smallest H that fits", "one above the answer"),
                Mistake("the number of averagings returned, not H",
                        "that is the number of averagings"),
                Mistake("the bytes of every device counted",
                        "that counts the bytes of every device"),
                Mistake("one averaging too many (steps // H + 1)",
                        "no extra averaging at the start or the end"),
                Mistake("the check's own answer called", "checks.local_sgd._right"),
            ),
        ),
    ),
)
