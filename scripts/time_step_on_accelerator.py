"""Time part four's training step on the device JAX sees first and print the saved record
(``course_utils/saved/accelerator_step.json``, read by steps 18 and 22): forward, backward and
AdamW on ``PART_FOUR_MLP`` (1.1 M parameters), one device, in one jitted program, at several batch
sizes. Each repeat times ``--steps`` steps blocked on every result (the median step), then as many
dispatched back to back and blocked once (the time per step).

Run on a machine with the accelerator, from the repository's root::

    PYTHONPATH=. python scripts/time_step_on_accelerator.py --commit "$(git rev-parse HEAD)" \
        > course_utils/saved/accelerator_step.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version

import jax

from course_utils.models.step import mlp_flops
from course_utils.problems.classification import (
    PART_FOUR_MLP,
    classification_task,
    init_params,
    loss_sum,
)
from course_utils.results.accelerator import AcceleratorRun, StepTiming
from course_utils.results.meta import this_run
from course_utils.results.records import dumps
from course_utils.training.optimizers import adamw

ROWS = (32, 128, 512, 1024, 8192)  # the cluster runs' batches, and one that fills the chip
MATRICES = [shape for _, shape in PART_FOUR_MLP.layers if len(shape) == 2]


def training_step():
    """Part four's step on one device: the mean loss's gradient, then AdamW (``adamw()``)."""
    opt = adamw()

    def step(w, state, x, y):
        g = jax.grad(lambda v: loss_sum(v, x, y, PART_FOUR_MLP) / x.shape[0])(w)
        return opt.update(g, state, w)

    return opt, jax.jit(step)


def time_rows(rows: int, steps: int, repeats: int) -> StepTiming:
    opt, step = training_step()
    x, y = classification_task(0, mlp=PART_FOUR_MLP)
    x, y = jax.device_put(x[:rows]), jax.device_put(y[:rows])
    w = jax.device_put(init_params(PART_FOUR_MLP.n_params, mlp=PART_FOUR_MLP))
    state = jax.device_put(opt.init(w))
    w, state = jax.block_until_ready(step(w, state, x, y))  # compile
    blocked, back_to_back = [], []
    for _ in range(repeats):
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            w, state = jax.block_until_ready(step(w, state, x, y))
            times.append(time.perf_counter() - start)
        blocked.append(1e3 * statistics.median(times))
        start = time.perf_counter()
        for _ in range(steps):
            w, state = step(w, state, x, y)
        jax.block_until_ready((w, state))
        back_to_back.append(1e3 * (time.perf_counter() - start) / steps)
    return StepTiming(rows, mlp_flops(rows, MATRICES), tuple(blocked), tuple(back_to_back))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="steps per repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--commit", default=None, help="the commit of the checkout copied here")
    args = parser.parse_args(argv)
    if args.steps < 1 or args.repeats < 1:
        parser.error("--steps and --repeats must be at least 1")
    started = time.perf_counter()
    device = jax.devices()[0]
    timings = tuple(time_rows(r, args.steps, args.repeats) for r in ROWS)
    meta = this_run("python scripts/time_step_on_accelerator.py", time.perf_counter() - started,
                    runs=args.repeats, argv=["scripts/time_step_on_accelerator.py", *argv])
    if args.commit:  # the copy on the accelerator's machine is no checkout
        meta = replace(meta, commit=args.commit, dirty=None)
    try:
        libtpu = version("libtpu")
    except PackageNotFoundError:
        libtpu = None
    print(dumps(AcceleratorRun(
        meta=meta, device_kind=device.device_kind, platform=device.platform,
        precision=str(jax.config.jax_default_matmul_precision or "default"),
        steps=args.steps, timings=timings, libtpu=libtpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
