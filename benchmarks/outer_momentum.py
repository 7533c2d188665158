"""Why DiLoCo's held-out loss rises on part four's model (step 22): the saved curves' run
(``results.streaming``: the stream, 2 replicas of 2 devices, H = 32, the protocol's peak rate,
the schedule over the saved run's steps) trained for its first rounds with DiLoCo's outer step
and with its ablations: outer SGD at the same learning rate without momentum, Nesterov at a
steady step of 1 (``diloco_unit_step``), local SGD's average, and DiLoCo on one replica (the outer
step alone). Prints the held-out loss at each sync, seed 0; asserts nothing.

    python benchmarks/outer_momentum.py [--rounds 6]      # about 4 minutes on 2 cores
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args(argv)
    if args.rounds < 2:
        parser.error(f"--rounds must be at least 2 (a rise needs two syncs), got {args.rounds}")

    from course_utils import use_cpu_devices

    use_cpu_devices(4)
    from course_utils.problems.classification import PART_FOUR_MLP
    from course_utils.results.diloco import ABLATIONS, COMPARED
    from course_utils.results.streaming import (
        CURVE_LOCAL_STEPS,
        CURVE_STEPS,
        DATA_SEED,
        REPLICA_ROWS,
        saved_streaming_curves,
    )
    from course_utils.training.diloco import replica_mesh
    from course_utils.training.optimizers import scheduled_adamw
    from course_utils.training.strategies import DILOCO
    from course_utils.training.train import train

    lr, h = saved_streaming_curves().adamw_lr, CURVE_LOCAL_STEPS
    print(f"part four's model on the stream, H = {h}, peak lr {lr:g} over a {CURVE_STEPS}-step "
          f"schedule; held-out loss at each of the first {args.rounds} syncs, seed 0")
    local = next(s for s in COMPARED if s != DILOCO)  # local SGD (AdamW inside)
    for name, replicas in ((DILOCO, 2), *((s, 2) for s in ABLATIONS), (local, 2), (DILOCO, 1)):
        start = time.perf_counter()
        mesh = replica_mesh(replicas)
        run = train(mesh, name, steps=args.rounds * h, local_steps=h, heldout_every=h,
                    batch_size=REPLICA_ROWS * replicas // mesh.size, mlp=PART_FOUR_MLP,
                    stream=True, data_seed=DATA_SEED, optimizer=scheduled_adamw(CURVE_STEPS, lr))
        losses = " ".join(f"{loss:.3f}" for _, loss in run.heldout_loss)
        print(f"{name:17s} {replicas} replica(s): {losses}  ({time.perf_counter() - start:.0f} s)",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
