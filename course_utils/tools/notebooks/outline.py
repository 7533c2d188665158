"""The course's outline: one record per step (``records.py``: its notebook, part, title, one line
on what the student sees, and its exercise: the task, the self-check, minutes and common wrong
answers).

Everything that lists the steps reads it: the site's landing and instructor pages
(``pages.py``), the README's series table and ``docs/exercises.md``'s table (written from it by
``scripts/write_outline_tables.py``, a test keeps them equal) and the tests' step lists. Adding a
step is its notebook, its check and one entry here (part three's: in ``outline_three.py``; part
four's: in ``outline_four.py``; part five's: in ``outline_five.py``; part six's: in
``outline_six.py``).
"""

from __future__ import annotations

from course_utils.tools.errors import usage
from course_utils.tools.notebooks.outline_five import PART_FIVE, PART_FIVE_STEPS
from course_utils.tools.notebooks.outline_four import PART_FOUR, PART_FOUR_STEPS
from course_utils.tools.notebooks.outline_six import PART_SIX, PART_SIX_STEPS
from course_utils.tools.notebooks.outline_three import PART_THREE, PART_THREE_STEPS
from course_utils.tools.notebooks.records import Exercise, Mistake, StepOutline

__all__ = ["CAPSTONE", "OUTLINE", "PART_FIVE", "PART_FOUR", "PART_ONE", "PART_SIX", "PART_THREE",
           "PART_TWO", "WHERE", "outline_step", "parts"]

PART_ONE = "Part one: one gradient, three ways to communicate it"
PART_TWO = "Part two: the ring by hand, latency and buckets, hierarchy"
CAPSTONE = "Capstone: a cluster on one machine"
WHERE = "OUTLINE in course_utils/tools/notebooks/outline.py"

OUTLINE = (
    StepOutline(
        1, "01_mesh_setup", PART_ONE,
        title="Logical devices, one mesh, three placements",
        line="four logical CPU devices, the mesh, the three placements, who holds what",
    ),
    StepOutline(
        2, "02_partial_gradients", PART_ONE,
        title="Partial gradients: what each device can compute alone",
        line="each device's partial gradient from its rows; their sum is the reference",
        exercise=Exercise(
            task="the factor each device multiplies its local mean by before a `pmean` it cannot "
                 "change, so that the result is the mean over all rows, for any row counts",
            check="check_pmean_weights", minutes=10,
            judges="applies the factors in a `shard_map` kernel (local mean × factor, then "
                   "`pmean`) to the page's uneven rows and to counts and meshes of its own: "
                   "the value and its placement",
            mistakes=(
                Mistake("cᵢ/Σc, forgetting that `pmean` divides by p",
                        "p× too small: pmean divides by p"),
                Mistake("(p − 1)·cᵢ/Σc, p − 1 for p",
                        "pmean divides by p, the number of devices"),
                Mistake("p·cᵢ // Σc, integer division", "floor division (//) or int() rounds them"),
                Mistake("every factor 1, the page's local mean + `pmean`",
                        "every factor is 1: that is the page's local mean + pmean"),
                Mistake("Σc/(p·cᵢ), the factor inverted", "the factors are inverted"),
                Mistake("cᵢ itself, not normalised",
                        "the row counts themselves, not normalised"),
                Mistake("one factor for all devices", "returned one number, the wrong length"),
                Mistake("the check's own answer called", "checks.gradients._exact_factors"),
            ),
        ),
    ),
    StepOutline(
        3, "03_collectives", PART_ONE,
        title="Three collectives: all-reduce, reduce-scatter, all-gather",
        line="`psum`, `psum_scatter`, `all_gather` next to a NumPy version of the same semantics",
        exercise=Exercise(
            task="reduce-scatter a gradient whose length p does not divide: pad it, and every "
                 "device holds its slice of the padded gradient",
            check="check_reduce_scatter", minutes=15,
            judges="your jitted function on feature counts of its own: the real values, the "
                   "zero padding, the length p·⌈F/p⌉, the placement and one `reduce-scatter` "
                   "in its compiled program",
            mistakes=(
                Mistake("the zeros put in front", "padding at the front"),
                Mistake("padded by p − F mod p, which adds p values when p divides F",
                        "padded by p rather than to the next multiple of p"),
                Mistake("an all-reduce, then each device's slice",
                        "an all-reduce then a slice"),
                Mistake("an all-gather of the shares, added on every device",
                        "gathering the p shares and adding them on every device"),
                Mistake("no padding", "pad the share with zeros first"),
                Mistake("the package's `reduce_scatter_gradient` called",
                        "the package's own kernel"),
            ),
        ),
    ),
    StepOutline(
        4, "04_placement_checks", PART_ONE,
        title="One gradient, different local storage: checking placement",
        line="shard shapes (8,), (2,), (8,); the collectives in StableHLO and compiled HLO",
        exercise=Exercise(
            task='read the shard shapes of `P("data")` on a transposed array',
            check="check_predicted_shard_shapes", minutes=10,
            judges="names a wrong dimension or a wrong array",
        ),
    ),
    StepOutline(
        5, "05_timing", PART_ONE,
        title="Timing completed calls, and the idealized ring payload",
        line="timing completed calls; the idealized ring payload (48 and 24 bytes); the figure",
        exercise=Exercise(
            task="the largest gradient whose input and output fit in a device's memory when each "
                 "collective returns, a whole number of float32 values per device",
            check="check_largest_gradient", minutes=15,
            judges="places arrays of your sizes on meshes of its own and reads device 0's input "
                   "and output: at your size they fit, 4·p bytes more do not",
            mistakes=(
                Mistake("the input forgotten (twice too large for the all-reduce)",
                        "the call's input is still on device 0 when it returns"),
                Mistake("p and p + 1 swapped", "p and p + 1 are swapped"),
                Mistake("the reduce-scatter's output slice forgotten (N ≤ memory)",
                        "device 0 also holds its output, one slice of N/p bytes"),
                Mistake("the all-gather started from a whole gradient, as the all-reduce",
                        "the all-gather starts from the reduce-scattered slice"),
                Mistake("not rounded to whole float32 values per device",
                        "is not a whole number of float32 values on each of the"),
                Mistake("values instead of bytes", "count bytes (4 per float32 value), not values"),
                Mistake("the notebook's N_DEVICES instead of the argument p",
                        "use the argument p, not N_DEVICES"),
                Mistake("the package's communication_budget called",
                        "uses the package's communication_budget"),
            ),
        ),
    ),
    StepOutline(
        6, "06_sliced_update", PART_ONE,
        title="Update the slices, then gather (ZeRO-style)",
        line="the ZeRO-style momentum update on slices, then gathered",
        exercise=Exercise(
            task="the sliced momentum step with the gradient clipped by the whole gradient's norm, "
                 "which no device holds after the reduce-scatter",
            check="check_clipped_step", minutes=20,
            judges="your jitted function on its own inputs (clipping active and not): values, "
                   "placement, and the compiled program: any all-reduce a few bytes",
            mistakes=(
                Mistake("each device clipping by its own slice's norm",
                        "each device clipped by the norm of its own slice"),
                Mistake("the norm of the unreduced partial gradient",
                        "the norm of this device's partial gradient"),
                Mistake("a sum of slice norms instead of squares", "the slices' norms were added"),
                Mistake("the square root missing", "clipping by the squared norm"),
                Mistake("the momentum clipped instead of the gradient",
                        "the momentum was clipped, not the gradient"),
                Mistake("the whole gradient all-reduced for its norm",
                        "every device receives the whole gradient to compute its norm"),
                Mistake("the squares averaged (pmean) instead of summed",
                        "averaged (pmean divides by p)"),
                Mistake("the largest entry (∞-norm) as the norm", "that is the largest entry"),
                Mistake("each partial clipped before the reduce-scatter",
                        "each device clipped its partial gradient before the reduce-scatter"),
                Mistake("a slice-long vector all-reduced for the norm",
                        "a slice-long vector"),
            ),
        ),
    ),
    StepOutline(
        7, "07_row_permutation_exercise", PART_ONE,
        title="Exercise: shuffle the rows, keep the gradient",
        line="the exercise: joint row permutations leave the gradient unchanged",
        exercise=Exercise(
            task="a joint reordering that moves every row to another device, for any p; the "
                 "gradient both ways on the reordered data",
            check="check_joint_permutation", minutes=20,
            judges="your `reorder` for p = 2 to 5, your placed inputs, and each gradient bit for "
                   "bit against its kernel",
            mistakes=(
                Mistake("reversal, which leaves the middle device its own rows when p is odd",
                        "still holds some of its own rows (reversal does that when p is odd)"),
                Mistake("only the labels reordered, the rows of x left in place",
                        "reorder the rows with the same permutation as the labels"),
                Mistake("a shift by this notebook's block (4 rows) instead of n // p",
                        "compute the block from the arguments"),
                Mistake("the columns of x reordered instead of its rows",
                        "reorder its rows, xh[order] with the order your reorder returns"),
            ),
        ),
    ),
    StepOutline(
        8, "08_communication_budget", PART_ONE,
        title="The communication budget for 2, 4 and 8 ranks",
        line="bytes per rank for p = 2, 4, 8 at 2^20 bytes",
        exercise=Exercise(
            task="the gradient size below which recursive doubling's all-reduce beats the "
                 "ring's: its time written from its description, the crossing solved",
            check="check_rd_crossover", minutes=15,
            judges="within 0.1 %, at the page's α and B and at p, α and B the page never shows; "
                   "p = 2 (never slower) included; the package's time models refused",
            mistakes=(
                Mistake("recursive doubling's steps sending half the vector",
                        "not half of it: that is recursive halving"),
                Mistake("p − 1 steps for recursive doubling", "takes log₂ p steps, not p − 1"),
                Mistake("the natural log for log₂", "not the natural log"),
                Mistake("the ring's 2(p − 1) steps taken as 2p", "p − 1, not p"),
                Mistake("one pass of the ring", "the ring all-reduce is two passes"),
                Mistake("α in µs", "alpha_s is already in seconds"),
                Mistake("the answer in MiB", "give bytes, not MiB"),
                Mistake("2p ring steps, its bytes kept", "the ring takes 2(p − 1) steps, not 2p"),
                Mistake("p·α·B, the ring's own latency threshold",
                        "set the two algorithms' times equal"),
                Mistake("the page's α and B typed in",
                        "use the arguments alpha_s and bytes_per_s"),
                Mistake("a division by zero at p = 2", "return math.inf"),
            ),
        ),
    ),
    StepOutline(
        9, "09_beyond_one_process", PART_ONE,
        title="Beyond one process: the same kernels on JAX's multi-process runtime",
        line="the same kernels on two processes with `jax.distributed` (gloo), against one process",
    ),
    StepOutline(
        10, "10_performance_lab", PART_ONE,
        title="Performance lab: measured collectives against the model",
        line="the saved `course bench` run; T = α + S/B fitted and a bus bandwidth computed by "
             "hand, read against the α-β and ring models",
        exercise=Exercise(
            task="solve a fit of T = α + S/B for the size at which S/T reaches a fraction of B",
            check="check_bandwidth_fraction_size", minutes=10,
            judges="at fits and fractions the notebook never uses; `fit_alpha_beta`, "
                   "`busbw_gbps` and `bus_factor` refused",
            mistakes=(
                Mistake("alpha_s taken for µs and converted to seconds",
                        "alpha_s is already in seconds"),
                Mistake("the page's all-reduce bus factor multiplied in",
                        "the bus factor multiplies the bus bandwidth and its limit alike"),
                Mistake("fraction and 1 − fraction swapped",
                        "fraction and 1 − fraction are swapped"),
                Mistake("S returned in MiB", "return S in bytes, not MiB"),
                Mistake("the notebook's fit used instead of the arguments",
                        "does not change with the arguments alpha_s and bytes_per_s"),
            ),
        ),
    ),
    StepOutline(
        11, "11_ring_by_hand", PART_TWO,
        title="The ring, built by hand from ppermute",
        line="reduce-scatter and all-gather built from `ppermute` in p − 1 steps; the ring's "
             "bytes read from the compiled program; the latency term",
        exercise=Exercise(
            task="write one step of the ring that runs the other way (which pairs, which chunk)",
            check="check_ring_step", minutes=30,
            judges="runs that ring with your step on every device and on one device fewer, and "
                   "reads the compiled program: only `collective-permute`, p − 1 of them",
            mistakes=(
                Mistake("the partial sum passed on, but nothing added",
                        "it is passed on but nothing is added"),
                Mistake("the page's ring copied: sent to i + 1", "the page's ring; this ring "
                        "runs the other way"),
                Mistake("p read from a chunk's length (chunks.shape[1])",
                        "nor from chunks.shape[1]"),
            ),
        ),
    ),
    StepOutline(
        12, "12_latency_and_bucketing", PART_TWO,
        title="The latency term, and why gradients travel in buckets",
        line="four all-reduce algorithms in one α-β model and where they cross; 64 small "
             "gradients as 64 calls, one program, one flat bucket (measured); the bucket-size "
             "trade-off",
        exercise=Exercise(
            task="write the bucketed step-time model",
            check="check_bucket_model", minutes=25,
            judges="against `bucketed_step_time` on models the notebook never shows; the "
                   "package's copy refused",
            mistakes=(
                Mistake("a bucket's ready time counted in gradients, not bytes",
                        "ready in proportion to the bytes produced so far"),
                Mistake("a bucket that does not wait for the previous all-reduce",
                        "a bucket also waits for the previous bucket's all-reduce"),
                Mistake("the notebook's RANKS instead of the argument ranks",
                        "does not change with the argument ranks"),
                Mistake("a bucket's gradient count taken for its bytes (len(bucket))",
                        "not how many gradients it holds"),
            ),
        ),
    ),
    StepOutline(
        13, "13_hierarchical_all_reduce", PART_TWO,
        title="Hierarchical all-reduce on a two-axis mesh",
        line="a `(\"node\", \"local\")` mesh; reduce-scatter in the node, all-reduce across "
             "nodes, all-gather in the node, in one program; who talks to whom in the compiled "
             "program; when the two levels pay (model)",
        exercise=Exercise(
            task="a two-level reduce-scatter in one program, each device ending with its own "
                 "slice in the mesh's order (the page builds the all-reduce)",
            check="check_two_level_scatter", minutes=25,
            judges="every device against NumPy's slice of the sum, and the compiled program's "
                   "device groups and bytes (inside the node first, 1/local across); on a "
                   "2 × 2 mesh also on 2 nodes of 3 (a subprocess with 6 CPU devices), where "
                   "nodes and local differ; the package's kernels refused",
            mistakes=(
                Mistake("the two scatters chained without reordering the slices",
                        "every device holds a slice of the sum, but not its own"),
                Mistake("nodes and local swapped in the reorder",
                        "nodes and local swapped in the reorder"),
                Mistake("scattered across the nodes first",
                        "works on the whole vector"),
                Mistake("psum across the nodes instead of psum_scatter",
                        "across the nodes too, reduce-scatter"),
                Mistake("nodes and local swapped, the sizes read from the page's mesh.shape",
                        "nodes and local swapped in the reorder"),
                Mistake("nodes and local swapped, with the page's LOCAL and NODES",
                        "nodes and local swapped in the reorder"),
                Mistake("a jitted shard_map passed instead of the per-device function",
                        "pass the plain per-device function"),
                Mistake("the sum across the nodes forgotten",
                        "the sum across the nodes is missing"),
            ),
        ),
    ),
    *PART_THREE_STEPS,
    StepOutline(
        17, "17_simulated_cluster", CAPSTONE,
        title="A cluster on one machine: when the link costs time",
        line="hosts as network namespaces joined by rate-limited links (`course cluster`, root): "
             "the collectives, the two-level all-reduce across link rates, 16- against 32-bit "
             "rings and bucketing, timed against the link model",
        exercise=Exercise(
            task="a function that predicts the flat and the two-level reduce-scatter's time from "
                 "the link rate (a collective whose link bytes the page never gives)",
            check="check_reduce_scatter_times", minutes=20,
            judges="within 3 %, at the saved 2 × 4 run and at shapes never shown; the package's "
                   "link model refused; names unit slips, counted frame headers, the all-reduce's "
                   "two passes",
            mistakes=(
                Mistake("the link rate in bits taken for bytes",
                        "the rate is in bits per second: divide it by 8 for bytes"),
                Mistake("the all-reduce's two passes counted",
                        "that is an all-reduce's time: a reduce-scatter is one pass"),
                Mistake("the devices of a host not sharing its link",
                        "devices of a host share its one link"),
                Mistake("the frame headers counted",
                        "you counted the frame headers"),
            ),
        ),
    ),
    *PART_FOUR_STEPS,
    *PART_FIVE_STEPS,
    *PART_SIX_STEPS,
)


def outline_step(number: int) -> StepOutline:
    """The outline's entry for step ``number``.

    Examples:
        >>> outline_step(16).notebook
        '16_local_sgd'

    Raises:
        CourseError: the outline has no such step (the message says where to add it).
    """
    for step in OUTLINE:
        if step.number == number:
            return step
    raise usage(f"step {number} is not in the course's outline: add its entry to {WHERE}")


def parts(steps: list[StepOutline]) -> list[tuple[str, list[StepOutline]]]:
    """``steps`` grouped by part, the parts in the order their first step comes.

    Examples:
        >>> [(part[:8], [s.number for s in inside]) for part, inside in parts(OUTLINE[8:14])]
        [('Part one', [9, 10]), ('Part two', [11, 12, 13]), ('Part thr', [14])]
    """
    grouped: dict[str, list[StepOutline]] = {}
    for step in steps:
        grouped.setdefault(step.part, []).append(step)
    return list(grouped.items())
