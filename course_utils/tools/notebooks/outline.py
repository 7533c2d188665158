"""The course's outline for its site: who it is for, how to start, its parts, and one line per
step (the README's series table says the same, a test keeps them equal); and the instructor
page, built from the notebooks themselves (each exercise, its check and points, a reading time)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import nbformat

from course_utils.tools.notebooks.chapters import Step
from course_utils.tools.notebooks.site import CHECK_TAG, SOLUTION_TAG

# (title, first step, last step)
PARTS = (
    ("Part one: one gradient, three ways to communicate it", 1, 10),
    ("Part two: the ring by hand, latency and buckets, hierarchy", 11, 13),
    ("Part three: ZeRO and FSDP, compression, local SGD", 14, 16),
    ("Capstone: a cluster on one machine", 17, 17),
    ("Part four: compute against communication, every strategy timed", 18, 20),
)

WHO = """\
**Who it is for.** Students who know NumPy and the basics of JAX (`jit`, arrays) and want to learn
how data-parallel training communicates; instructors who teach it. On one laptop with four
logical CPU devices, the same gradient is moved between the devices with each of JAX's
collectives, placements and bytes are checked, and then the algorithms that make training
communicate less are built and measured.
"""

START = """\
**How to start.** Work in the *student edition* of the notebooks, where each exercise is left
for you: your instructor hands it out, or you make it from the course's repository (Python 3.11
to 3.13; the `notebooks/` folder itself holds the solutions):

```bash
pip install -e ".[instructor]"
course student --out student/
jupyter lab student/
```

Open step 01 and use *Run ▸ Run All Cells*; each exercise has a check cell that says what is
wrong or prints `PASSED`. These pages show each notebook with the outputs it was committed with,
the exercises left open as in the student edition.
"""

WORDS_PER_MINUTE = 200  # a reading pace for prose with code
# step → minutes for its exercises, for a student who has read the step: a planning figure set by
# the authors from the size of each exercise, not measured with a class (the page says so)
EXERCISE_MINUTES = {2: 10, 3: 10, 4: 10, 5: 15, 6: 15, 7: 15, 8: 15, 11: 30, 12: 25, 13: 20,
                    14: 25, 15: 25, 16: 20, 17: 20, 18: 15, 19: 15,
                    20: 20}

# step → (a common wrong answer, what its check says): tests/test_mistakes.py runs each of them
MISTAKES = {
    5: (("the whole vector counted as stored after a reduce-scatter",
         "after reduce-scatter each device keeps one slice of the sum"),
        ("what a ring sends counted instead of what a device stores",
         "that is what a ring sends per rank, not what a device keeps")),
    8: (("one pass of the ring counted for the all-reduce",
         "count both passes, reduce-scatter and all-gather"),),
    11: (("the partial sum passed on, but nothing added",
          "it is passed on but nothing is added"),
         ("the ring sent the wrong way round", "the ring runs backwards")),
    12: (("a bucket's ready time counted in gradients, not bytes",
          "ready in proportion to the bytes produced so far"),
         ("a bucket that does not wait for the previous all-reduce",
          "a bucket also waits for the previous bucket's all-reduce")),
    13: (("pmean across the nodes instead of psum", "use jax.lax.psum over 'node', not pmean"),
         ("the all-reduce across the nodes left out",
          "the all-reduce across the nodes (jax.lax.psum over 'node') is missing")),
    14: (("values counted instead of bytes", "count bytes (4 per float32 value), not values"),
         ("ZeRO-1 counted with its momentum whole",
          "zero1 keeps the momentum (optimizer state) in slices of n/p")),
    15: (("the top k of g alone, not of g + residual", "you send the top k of g alone"),
         ("the new residual forgets the old one", "the new residual forgets the old one")),
    16: (("an averaging after every step",
          "the devices average once every h steps, not after every step"),
         ("one pass of the ring counted", "count both passes of the ring all-reduce")),
    17: (("the link rate in bits taken for bytes",
          "the rate is in bits per second: divide it by 8 for bytes"),
         ("the devices of a host not sharing its link",
          "devices of a host share its one link")),
    18: (("the rate in bits taken for bytes",
          "the rate is in bits per second: divide it by 8 for bytes"),
         ("the all-reduce's time returned instead of rows",
          "that is the all-reduce's time; divide it by one row's compute time")),
    19: (("every bucket sent after the loop", "that is the schedule one after the other"),
         ("the gradient sent from the computing device",
          "move each gradient there first, jax.device_put(grad, progs.stream)")),
    20: (("the rate left in bytes per second", "that is bytes per second"),
         ("one step of each compared, not the steps to the target",
          "count each one's steps to the target")),
}
LINES = {  # step → one line on what the student sees (the README's series table says the same)
    1: 'four logical CPU devices, the mesh, the three placements, who holds what',
    2: "each device's partial gradient from its rows; their sum is the reference",
    3: '`psum`, `psum_scatter`, `all_gather` next to a NumPy version of the same semantics',
    4: 'shard shapes (8,), (2,), (8,); the collectives in StableHLO and compiled HLO',
    5: 'timing completed calls; the idealized ring payload (48 and 24 bytes); the figure',
    6: 'the ZeRO-style momentum update on slices, then gathered',
    7: 'the exercise: joint row permutations leave the gradient unchanged',
    8: 'bytes per rank for p = 2, 4, 8 at 2^20 bytes',
    9: 'the same kernels on two processes with `jax.distributed` (gloo), against one process',
    10: ('a live mini-sweep and the saved `course bench` run, read against the α-β and ring '
         'models'),
    11: ("reduce-scatter and all-gather built from `ppermute` in p − 1 steps; the ring's bytes "
         'read from the compiled program; the latency term'),
    12: ('four all-reduce algorithms in one α-β model and where they cross; 64 small gradients '
         'as 64 calls, one program, one flat bucket (measured); the bucket-size trade-off'),
    13: ('a `("node", "local")` mesh; reduce-scatter in the node, all-reduce across nodes, '
         'all-gather in the node; who talks to whom in the compiled program; when the two levels'
         ' pay (model)'),
    14: ('one training run under data parallelism and ZeRO-1/2/3: the same loss, the memory per '
         'device read from the shards, the bytes from the compiled program; `jax.grad` through '
         "an all-gather gives a reduce-scatter; ZeRO-3's second gather, merged by XLA or kept"),
    15: ('bf16 compiled to f32 on CPU, and sent as u16; int8, top-k with and without error '
         'feedback, PowerSGD: bytes, gradient error, loss against steps and bytes'),
    16: ('H local steps, then `pmean`: bytes divided by H; drift on skewed shards; every '
         'strategy of the unit on one picture'),
    17: ('hosts as network namespaces joined by rate-limited links (`course cluster`, root): the'
         ' collectives, the two-level all-reduce across link rates, 16- against 32-bit rings and'
         ' bucketing, timed against the link model'),
    18: ('a data-parallel step and its accumulated form on the page; its compute from FLOPs, its'
         ' communication from the link model with α; the batch where the two balance, predicted'
         ' and read off the cluster'),
    19: ('the backward pass of a tower of layers, each bucket all-reduced on a second device '
         'while the first computes; one program, one device and two devices timed on the '
         'cluster against the bucketed model; the collective matmul three ways'),
    20: ('HSDP on a `("host", "device")` mesh against data parallelism; every strategy timed on'
         ' the cluster from 50 Mbit/s to 10 Gbit/s: time per step and to a target loss, against'
         ' the models; where each compression scheme pays'),
}


@dataclass(frozen=True)
class Exercise:
    """A step's exercise as the instructor page lists it."""

    step: int
    heading: str  # the exercise's own markdown heading
    check: str  # the check its check cell calls
    points: float  # nbgrader's points for that cell


def exercises(step: Step, nb) -> list[Exercise]:
    """The exercises of a step notebook ``nb``: the heading above each solution cell, and the
    check its check cell calls with its points."""
    found, heading, exercise = [], "", ""
    for cell in nb.cells:
        tags = cell.metadata.get("tags", [])
        if cell.cell_type == "markdown":  # an "Exercise" heading of any level, else a "## "
            lines = [line for line in cell.source.splitlines() if line.startswith("#")]
            named = [line for line in lines if "Exercise" in line] or [
                line for line in lines if line.startswith("## ")]
            heading = named[0].lstrip("#").strip() if named else heading
        elif SOLUTION_TAG in tags:
            exercise = heading  # the exercise's heading is the one above its solution cell
        elif CHECK_TAG in tags:
            check = re.search(r"(check_\w+)\(", cell.source)
            points = cell.metadata.get("nbgrader", {}).get("points", 0)
            found.append(Exercise(step.number, exercise or heading, check[1] if check else "",
                                  points))
    return found


def reading_minutes(nb) -> int:
    """Minutes to read a notebook's prose and code at ``WORDS_PER_MINUTE`` (at least 1)."""
    words = sum(len(cell.source.split()) for cell in nb.cells)
    return max(1, round(words / WORDS_PER_MINUTE))


def landing_page(title: str, steps: list[Step]) -> str:
    """The MyST source of the landing page: who it is for, how to start, the parts with one line
    per step."""
    parts = []
    for name, first, last in PARTS:
        inside = [s for s in steps if first <= s.number <= last]
        if not inside:
            continue
        rows = [f"| {s.number} | [{s.title.replace('|', chr(92) + '|')}]({s.path.name}) | "
                f"{LINES.get(s.number, '').replace('|', chr(92) + '|')} |" for s in inside]
        parts.append("\n".join([f"## {name}", "", "| Step | Title | What you see |",
                                "| ---: | :--- | :--- |", *rows]))
    guide = "For instructors: [objectives, times, grading and common mistakes](instructors.md)."
    return "\n\n".join([f"# {title}", WHO, START, *parts, guide]) + "\n"


def instructor_page(steps: list[Step]) -> str:
    """The MyST source of the instructor page: prerequisites, each step's reading time and
    exercise with its check and points, how grading works. No solution is shown."""
    rows = []
    for step in steps:
        nb = nbformat.read(step.path, as_version=4)
        found = exercises(step, nb)
        work = "; ".join(f"{e.heading} (`{e.check}`, {e.points:g} point"
                         f"{'' if e.points == 1 else 's'})" for e in found) or "none"
        if found and step.number not in EXERCISE_MINUTES:
            raise ValueError(f"step {step.number} has an exercise but no time in "
                             "EXERCISE_MINUTES (course_utils/tools/notebooks/outline.py): add one")
        minutes = f"{EXERCISE_MINUTES[step.number]} min" if found else "—"
        rows.append(f"| {step.number} | {step.title} | {reading_minutes(nb)} min | {minutes} | "
                    f"{work} |")
    table = "\n".join(["| Step | Title | Reading | Exercise time | Exercise (check, points) |",
                       "| ---: | :--- | ---: | ---: | :--- |", *rows])
    shown = {s.number for s in steps}
    mistakes = "\n".join(f"- Step {n}, {wrong}: *{said}*" for n, found in MISTAKES.items()
                         if n in shown for wrong, said in found)
    return f"""# For instructors

**Prerequisites.** NumPy and the basics of JAX (`jit`, arrays, `jax.numpy`); for part two on,
`jax.shard_map`. No accelerator: every step runs on four logical CPU devices of one laptop.

**Objectives.** A student who finishes the unit can place arrays on a mesh and say who holds
what; write a collective inside `jax.shard_map` and check its values and placement; read the
collectives and their bytes off the compiled program; derive the ring's payload and latency; and
build, measure and compare the algorithms that communicate less: buckets, the two-level
all-reduce, ZeRO and FSDP, compression with error feedback and local SGD.

**Time.** The reading time below counts the words of each notebook's prose and code at
{WORDS_PER_MINUTE} words a minute. The exercise time is a suggestion for a student who has read the
step, set from the size of each exercise, not measured with a class; running the cells adds a
minute or two a step.

{table}

**Grading.** `course student --out student/` makes the student edition (each solution replaced by
a stub, outputs cleared); `course check-submission <notebook>` runs a returned notebook and reports
each check; with nbgrader, the check cells are its autograded tests, worth the points above. A check
names the likely mistake (a unit slip, a wrong axis, a missing wait, a call of the package function
the exercise refuses) without giving the answer away. Some common wrong answers and what their
check says (`tests/test_*checks.py` tests many more):

{mistakes or "- (none of this site's steps has an exercise)"}

This page and the student site show no reference solution; the instructor site
(`course book --instructor`) adds them. Some lessons show code close to an exercise's answer on
purpose (the package's copy a step compares with); the checks still test each answer at inputs
no page shows.
"""
