"""Train Streaming DiLoCo's held-out curves (``course_utils.results.streaming``) and save them.

    python scripts/streaming_curves.py                      # course_utils/saved/streaming.json
    python scripts/streaming_curves.py --out build/streaming.json --seeds 3 --steps 96

Every strategy of ``CURVE_STRATEGIES`` from seeds 0 … N − 1 on 4 logical CPU devices (2
replicas of 2), part four's model, H = ``CURVE_LOCAL_STEPS``; then each strategy's lead in
steps over data parallelism across step 22's band of targets (first reaching and staying, each
seed paired with itself: ``curves.describe_lead``), how far its curves end above their lowest
point, and its bytes across the replicas, against DiLoCo's in float32.
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
    from course_utils.results.curves import band_lead, describe_lead
    from course_utils.results.records import save
    from course_utils.results.streaming import (
        BASELINE,
        CURVE_STEPS,
        CURVE_STRATEGIES,
        bytes_of,
        dated_curves,
        rises,
        streaming_band,
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
    band = streaming_band()
    print(f"band: {', '.join(f'{t:.4f}' for t in band.targets)} (floor {band.floor:.4f})")
    # DiLoCo in float32, whole: the curve strategy whose sync is neither fewer bits nor fragments
    whole = bytes_of(results, next(s for s in CURVE_STRATEGIES[1:] if spec(s).sync.dtype ==
                                   "float32" and spec(s).sync.fragments == 1))
    for strategy in CURVE_STRATEGIES:
        rise = ", ".join(f"{r:.4f}" for r in rises(results, strategy))
        print(f"{strategy}: end − lowest {rise}")
        if strategy != BASELINE:
            lead = band_lead(dated_curves(results, strategy), dated_curves(results, BASELINE),
                             band.targets, read="evaluated", stay=True)
            print(f"  in steps: {describe_lead(lead, band, strategy, BASELINE)}")
        sent = bytes_of(results, strategy)
        per_sync = ("" if sent.per_sync is None else
                    f", one sync {sent.per_sync / whole.per_sync:.4f} of DiLoCo's")
        print(f"  per inner step {sent.per_step / whole.per_step:.4f} of DiLoCo's bytes "
              f"across{per_sync}")
    print(f"wrote {args.out} in {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
