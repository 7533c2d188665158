"""One device count's share of ``course bench``, in a process of its own.

Run as ``python -m course_utils.tools.bench.worker --devices N --sizes 8,1024 --zero1-sizes 1024``.
The device count is fixed for the life of a JAX process, so ``course bench`` starts one of these
per device count and repeat. What it measures, and how, is ``course_utils.observe.sweep`` (its
``PROTOCOL``). It prints JSON lines on stdout: ``{"event": "progress", ...}`` after each step and
one ``{"event": "result", ...}`` at the end. A failure exits non-zero with the reason on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import jax

from course_utils.devices.setup import data_mesh, use_cpu_devices
from course_utils.observe.sweep import (
    SLOW_CALL_US,
    collective_runs,
    compiled_collectives,
    memcpy_bandwidth,
    time_interleaved,
    zero1_facts,
    zero1_runs,
)


def emit(event: str, **fields) -> None:
    """Print one JSON line on stdout, flushed, for the parent to read."""
    print(json.dumps({"event": event, **fields}), flush=True)


def _sizes(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",") if t.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers such as 8,1024; got {text!r}"
        ) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The worker's arguments; ``course bench`` passes all of them."""
    parser = argparse.ArgumentParser(
        prog="python -m course_utils.tools.bench.worker",
        description="Time collectives and ZeRO-1 steps on N logical CPU devices; print JSON lines.",
        epilog="`course bench` starts this once per device count and repeat; "
        "run it by hand only to debug.",
    )
    parser.add_argument(
        "--devices", type=int, required=True, help="logical CPU devices p (2, 4, 8, ...)"
    )
    parser.add_argument(
        "--sizes", type=_sizes, required=True, help="float32 element counts, each divisible by p"
    )
    parser.add_argument(
        "--zero1-sizes", type=_sizes, default=[], help="parameter counts for the ZeRO-1 steps"
    )
    parser.add_argument(
        "--samples-fast",
        type=int,
        default=50,
        help=f"samples when calls take < {SLOW_CALL_US:g} µs",
    )
    parser.add_argument("--samples-slow", type=int, default=15, help="samples for slower calls")
    parser.add_argument("--warmup", type=int, default=3, help="untimed rounds after the first call")
    args = parser.parse_args(argv)
    for name in ("devices", "samples_fast", "samples_slow", "warmup"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    bad = [n for n in args.sizes + args.zero1_sizes if n < args.devices or n % args.devices]
    if bad:
        parser.error(
            f"sizes {bad} do not divide over {args.devices} devices; "
            f"use multiples of {args.devices}"
        )
    return args


def main(argv: list[str] | None = None) -> int:
    """Measure, emitting one progress event a step, then the result; return the exit status."""
    args = parse_args(argv)
    start = time.perf_counter()
    use_cpu_devices(args.devices)
    mesh = data_mesh()
    total = 1 + len(args.sizes) + len(args.zero1_sizes)
    step = iter(range(1, total + 1))
    memcpy = memcpy_bandwidth()
    emit("progress", done=next(step), total=total, label="memcpy", medians={})

    def measured(label: str, runs: dict) -> dict:
        timed = time_interleaved(runs, args.samples_fast, args.samples_slow, args.warmup)
        medians = {name: t["median_us"] for name, t in timed.items()}
        emit("progress", done=next(step), total=total, label=label, medians=medians)
        return timed

    collectives = [
        {"elements": n, "variants": measured(f"{n} elements", collective_runs(mesh, n))}
        for n in args.sizes
    ]
    zero1 = []
    for params in args.zero1_sizes:
        runs = zero1_runs(mesh, params)
        timed = measured(f"ZeRO-1 {params} params", runs)
        zero1.append({"params": params, "steps": timed, **zero1_facts(runs)})
    emit(
        "result",
        devices=args.devices,
        jax_version=jax.__version__,
        memcpy=memcpy,
        collectives=collectives,
        zero1=zero1,
        compiled_collectives=compiled_collectives(mesh),
        seconds=time.perf_counter() - start,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
