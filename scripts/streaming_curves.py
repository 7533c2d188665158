"""Train Streaming DiLoCo's held-out curves (``course_utils.results.streaming``) and save them.

    python scripts/streaming_curves.py                      # course_utils/saved/streaming.json
    python scripts/streaming_curves.py --out build/streaming.json --seeds 3 --steps 96

Every strategy of ``CURVE_STRATEGIES`` from seeds 0 … N − 1 on 4 logical CPU devices (2
replicas of 2), part four's model, H = ``CURVE_LOCAL_STEPS``; then the target (step 20's rule), each
strategy's steps to it (seed mean and range) and its bytes across the replicas, against
DiLoCo's in float32.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="course_utils/saved/streaming.json")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args(argv)
    if args.seeds < 3:
        parser.error(f"--seeds must be at least 3 (a comparison of runs), got {args.seeds}")

    from course_utils import use_cpu_devices

    use_cpu_devices(4)
    from course_utils.results.records import save
    from course_utils.results.streaming import (
        CURVE_STEPS,
        CURVE_STRATEGIES,
        bytes_of,
        steps_to_target,
        streaming_target,
        train_streaming_curves,
    )
    from course_utils.training.diloco import replica_mesh
    from course_utils.training.strategies import spec

    steps = args.steps or CURVE_STEPS
    start = time.perf_counter()
    results = train_streaming_curves(
        replica_mesh(2), seeds=range(args.seeds), steps=steps,
        on_run=lambda s, seed: print(f"{s} seed {seed} ({time.perf_counter() - start:.0f} s)",
                                     flush=True))
    save(results, args.out)
    target = streaming_target(results)
    print(f"target (held-out loss): {target:.4f}")
    # DiLoCo in float32, whole: the curve strategy whose sync is neither fewer bits nor fragments
    whole = bytes_of(results, next(s for s in CURVE_STRATEGIES[1:] if spec(s).sync.dtype ==
                                   "float32" and spec(s).sync.fragments == 1))
    for strategy in CURVE_STRATEGIES:
        reached = list(steps_to_target(results, strategy, target).values())
        evaluated = list(steps_to_target(results, strategy, target, interpolate=False).values())
        steps_text = ("not reached by every seed" if None in reached else
                      f"{sum(reached) / len(reached):.1f} [{min(reached):.1f}, "
                      f"{max(reached):.1f}] steps interpolated, first evaluation at or below "
                      f"{sum(evaluated) / len(evaluated):.1f} [{min(evaluated)}, "
                      f"{max(evaluated)}]")
        sent = bytes_of(results, strategy)
        per_sync = ("" if sent.per_sync is None else
                    f", one sync {sent.per_sync / whole.per_sync:.4f} of DiLoCo's")
        print(f"{strategy}: {steps_text}; per inner step {sent.per_step / whole.per_step:.4f} "
              f"of DiLoCo's bytes across{per_sync}")
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
