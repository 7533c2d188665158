"""Write part five's saved sweep, ``course_utils/saved/diloco.json`` (``results.diloco``): the
inner learning rate's protocol (every rate of the grid from every seed), then data parallelism,
local SGD, DiLoCo and the ablations of DiLoCo's outer optimizer (AdamW inside) at each H, on
i.i.d. and skewed streams, from each seed of the plan (``results.diloco.PLAN``, from the
registry's ``SAVED_PLANS["diloco.json"]``), each through ``results.curves.run_curves``; then
DiLoCo from a data-parallel warm start at each H, and at the attribution's H on 1 and 4
replicas. Every run on the stream task under ``scheduled_adamw`` (``PROTOCOL``).

    flock /tmp/d03-heavy.lock python scripts/diloco_sweep.py [--out PATH]

It stops, writing nothing, if the protocol's learning rate is not ``ADAMW_LR``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

from course_utils.results.records import saved_path


def _memory(run) -> dict[str, int]:
    """Bytes one device holds of each part of the state, from its shards (4-byte values)."""
    size = {name: 4 * math.prod(shapes[0]) for name, shapes in run.shards.items()}
    outer = sorted(k for k in size if k.startswith("outer"))
    parts = {"parameters": size["params"],
             "adamw": sum(v for k, v in size.items() if k.startswith("momentum")),
             "synced_parameters": size[outer[0]] if outer else 0,
             "outer_momentum": sum(size[k] for k in outer[1:])}
    if sum(parts.values()) != run.memory.total:
        raise RuntimeError(f"{run.strategy}: the parts {parts} do not add up to {run.memory}")
    return parts


def _train_loss(run, every: int) -> tuple[tuple[int, float], ...]:
    """The training loss at each held-out evaluation (``HeldoutCurve.train_loss``): the synced
    parameters' on all the training rows for a strategy with an outer step, else the mean
    minibatch loss over the ``every`` steps that end at the evaluation."""
    if run.averaged_loss is not None:
        found = dict(run.averaged_loss)
        return tuple((step, found[step]) for step, _ in run.heldout_loss)
    return tuple((step, sum(run.loss[step - every:step]) / every) for step, _ in run.heldout_loss)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(saved_path("diloco.json")))
    args = parser.parse_args(argv)

    from course_utils import use_cpu_devices
    from course_utils.results.diloco import PLAN

    use_cpu_devices(PLAN.devices)
    from course_utils import replica_mesh
    from course_utils.results.curves import CurvePlan, HeldoutCurve, run_curves
    from course_utils.results.diloco import DP, EVERY_H, PROTOCOL, DilocoResults, SweepCost, pick_lr
    from course_utils.results.meta import this_run
    from course_utils.results.records import save
    from course_utils.training.optimizers import (
        ADAMW_LR,
        OUTER_LR,
        OUTER_MOMENTUM,
        scheduled_adamw,
    )
    from course_utils.training.strategies import DILOCO
    from course_utils.training.train import train

    start, mesh = time.time(), replica_mesh(PLAN.replicas)
    common = {"steps": PLAN.steps, "batch_size": PLAN.batch_size, "data_seed": PLAN.data_seed,
              "stream": True, "optimizer": scheduled_adamw(PLAN.steps)}
    lr_runs = []
    for lr in PLAN.lr_grid:
        lr_plan = CurvePlan(DP, PLAN.seeds, {**common, "heldout_every": PLAN.heldout_every,
                                             "optimizer": scheduled_adamw(PLAN.steps, lr)})
        lr_runs += [HeldoutCurve(DP, PLAN.batch_size, run.heldout_loss, seed, lr=lr,
                                 train_loss=_train_loss(run, PLAN.heldout_every))
                    for _, seed, run in run_curves(mesh, [lr_plan])]
    pick = pick_lr(tuple(lr_runs))
    for score in pick.scores:
        low, high = score.range
        print(f"lr {score.lr:g}: lowest held-out loss {score.mean:.4f} [{low:.4f}, {high:.4f}]",
              flush=True)
    print(f"winner {pick.winner:g}, tied {[f'{lr:g}' for lr in pick.tied]}, picked "
          f"{pick.picked:g}", flush=True)
    if pick.picked != ADAMW_LR:
        print(f"diloco_sweep: the protocol picks lr {pick.picked:g}, not ADAMW_LR = "
              f"{ADAMW_LR:g}; set ADAMW_LR in course_utils/training/optimizers.py and run again",
              file=sys.stderr)
        return 1

    curves, costs = [], []
    plan = [(DP, 1)] + [(s, h) for h in PLAN.local_steps for s in EVERY_H]
    for skewed in (False, True):
        for seed in PLAN.seeds:
            runs = run_curves(mesh, [CurvePlan(strategy, (seed,), {
                "skewed": skewed, **common, **({"heldout_every": PLAN.heldout_every} if h == 1
                                               else {"heldout_every": h, "local_steps": h})})
                for strategy, h in plan])
            for (strategy, h), (curve_plan, _, run) in zip(plan, runs):
                every = curve_plan.options["heldout_every"]
                curves.append(HeldoutCurve(strategy, PLAN.batch_size, run.heldout_loss, seed,
                                           h, skewed, train_loss=_train_loss(run, every)))
                if not skewed and seed == PLAN.seeds[0]:  # the programs and state: any run's
                    costs.append(SweepCost(strategy, h, run.bytes_across_replicas,
                                           run.bytes_per_step, _memory(run)))
                print(f"{strategy} H={h} skewed={skewed} seed={seed}: "
                      f"{run.heldout_loss[-1][1]:.4f}", flush=True)
    warm, rest = PLAN.warm_start, PLAN.steps - PLAN.warm_start
    for seed in PLAN.seeds:  # the paper's main setting: DiLoCo after data parallelism's start
        first = train(mesh, DP, **{**common, "steps": warm}, seed=seed)
        for h in PLAN.local_steps:
            run = train(mesh, DILOCO, **{**common, "steps": rest, "optimizer": scheduled_adamw(
                PLAN.steps, offset=warm)}, seed=seed, local_steps=h, heldout_every=h,
                start=first.params, first_step=warm)
            curves.append(HeldoutCurve(DILOCO, PLAN.batch_size, run.heldout_loss, seed, h,
                                       False, train_loss=_train_loss(run, h), warm_start=warm))
            print(f"{DILOCO} H={h} after {warm} DP steps, seed={seed}: "
                  f"{run.heldout_loss[-1][1]:.4f}", flush=True)
    h = PLAN.attribution_h
    for replicas in PLAN.attribution_replicas:  # 1: the outer step alone, nothing sent
        for _, seed, run in run_curves(replica_mesh(replicas), [CurvePlan(DILOCO, PLAN.seeds, {
                **common, "heldout_every": h, "local_steps": h})]):
            curves.append(HeldoutCurve(DILOCO, PLAN.batch_size, run.heldout_loss, seed, h,
                                       False, train_loss=_train_loss(run, h), replicas=replicas))
            print(f"{DILOCO} H={h} on {replicas} replicas, seed={seed}: "
                  f"{run.heldout_loss[-1][1]:.4f}", flush=True)
    meta = this_run("python scripts/diloco_sweep.py", time.time() - start)
    save(DilocoResults(meta, PROTOCOL, PLAN, ADAMW_LR, OUTER_LR, OUTER_MOMENTUM, tuple(lr_runs),
                       tuple(curves), tuple(costs)), args.out)
    print(f"wrote {args.out} in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
