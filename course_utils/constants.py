"""Constants shared by the core, the tools and the tests: each is defined here and nowhere else."""

from __future__ import annotations

# float32 results compared with a NumPy reference: |got − want| ≤ ATOL + RTOL·|want|
ATOL = 2e-6
RTOL = 2e-6
# the ZeRO-1 steps compare whole optimizer states of up to 2^22 values: summation order differs
STEP_ATOL = STEP_RTOL = 1e-5

# the heavy-ball momentum step used wherever the course takes an optimizer step
LR = 0.1
BETA = 0.9

# int8 compression keeps one scale per this many values (step 15); part three's flat parameter
# vector is padded to a multiple of p · SCALE_BUCKET so that every scheme splits it evenly
SCALE_BUCKET = 64

# exit statuses of the `course` command
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
# extra exit statuses of one `course launch` worker process, so the launcher can tell them apart
EXIT_NO_JOIN = 3
EXIT_WRONG_VALUES = 4
