"""The exercises' self-checks, one module per part of the series; import them from here.

Each check computes the expected answer from the exercise's own inputs, says what is wrong
without giving the answer away (``ExerciseFailed``, shown without a traceback), or prints one
``PASSED: …`` line; when it could not judge the whole answer (a part it cannot run here) it prints
one ``NOT VERIFIED: …`` line saying why and what to do, never ``PASSED``. ``helpers`` holds what
every check shares.

A check is feedback a student runs, not a lock: it refuses a function that is, wraps or names in
its code a function the exercise forbids (bound as a default, held in a closure, or fetched from a
course module with ``importlib`` too: ``forbidden``), but the student's code runs in the same
kernel and could change anything there. Grading rests on the check's verdict in the grader's own
kernel (nbgrader's autograde; ``course check-submission``, which runs the instructor's checks on
the submission's solution cells and grades ``NOT VERIFIED`` as "not verified", not passed) and on
reading the solution cells.

Modules: ``algorithms``: steps 12 and 13: buckets, the two-level all-reduce; ``budget``: step 8's
ring against recursive doubling; ``byte_models``: every byte and time model an exercise on a
collective's bytes refuses (18, 21, 22); ``compute``: step 18's micro-batches per all-reduce, step
20's break-even rate; ``diloco``: step 21's smallest H; ``forbidden``: what a student's function
is, calls or runs; ``gradients``: step 2's pmean weights; ``helpers``: what every check shares;
``hierarchy``: step 13's two-level reduce-scatter; ``lab``: step 10's bandwidth fraction;
``links``: step 17's predicted reduce-scatter times; ``local_sgd``: step 16's H for a byte budget;
``mesh_order``: step 13's check in a subprocess with 6 devices; ``overlap``: step 19's overlapped
backward pass; ``overlap_rate``: step 19's slowest hidden rate; ``permutation``: step 7's joint
permutation; ``ring``: step 11's ring step; ``scatter``: step 3's padded reduce-scatter;
``storage``: steps 4 and 5: shard shapes, what fits; ``streaming``: step 22's slowest hidden rate;
``training``: steps 14–16: memory, error feedback around int8, local SGD's bytes; ``transfer``:
step 23's time for one connection to send a sync (slow start); ``updates``: step 6's sliced step
with clipping by the global norm.
"""

from course_utils.checks.algorithms import check_bucket_model, check_two_level
from course_utils.checks.budget import check_rd_crossover
from course_utils.checks.compute import check_break_even, check_micro_batches
from course_utils.checks.diloco import check_smallest_h
from course_utils.checks.gradients import check_pmean_weights
from course_utils.checks.helpers import ExerciseFailed
from course_utils.checks.hierarchy import check_two_level_scatter
from course_utils.checks.lab import check_bandwidth_fraction_size
from course_utils.checks.links import check_reduce_scatter_times
from course_utils.checks.local_sgd import check_local_sgd_h
from course_utils.checks.overlap import check_overlapped_backward
from course_utils.checks.overlap_rate import check_overlap_rate
from course_utils.checks.permutation import check_joint_permutation
from course_utils.checks.ring import check_ring_step
from course_utils.checks.scatter import check_reduce_scatter
from course_utils.checks.storage import check_largest_gradient, check_predicted_shard_shapes
from course_utils.checks.streaming import check_slowest_hidden_rate
from course_utils.checks.training import check_int8_feedback, check_peak_prediction
from course_utils.checks.transfer import check_transfer_time
from course_utils.checks.updates import check_clipped_step

__all__ = [
    "ExerciseFailed",
    "check_bandwidth_fraction_size",
    "check_break_even",
    "check_bucket_model",
    "check_clipped_step",
    "check_rd_crossover",
    "check_int8_feedback",
    "check_joint_permutation",
    "check_largest_gradient",
    "check_local_sgd_h",
    "check_micro_batches",
    "check_overlap_rate",
    "check_overlapped_backward",
    "check_peak_prediction",
    "check_pmean_weights",
    "check_predicted_shard_shapes",
    "check_reduce_scatter",
    "check_reduce_scatter_times",
    "check_ring_step",
    "check_slowest_hidden_rate",
    "check_smallest_h",
    "check_transfer_time",
    "check_two_level",
    "check_two_level_scatter",
]
