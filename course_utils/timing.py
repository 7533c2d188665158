"""Timing completed calls of jitted functions.

On logical CPU devices all "devices" share one memory and one process: these timings measure
dispatch, synchronization and memory copies, never a network.
"""
from __future__ import annotations

import gc
from time import perf_counter

import jax
import numpy as np


def summarize(samples_us) -> dict:
    """Median, interquartile range and minimum of timing samples (µs).

    Examples:
        >>> summarize([1.0, 2.0, 3.0, 4.0, 100.0])
        {'median_us': 3.0, 'iqr_us': 2.0, 'min_us': 1.0}
    """
    a = np.asarray(samples_us, dtype=float)
    if a.size == 0:
        raise ValueError("no timing samples to summarize")
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {"median_us": float(med), "iqr_us": float(q3 - q1), "min_us": float(a.min())}


def time_completed_calls(fn, *args, n_samples: int = 50, n_warmup: int = 3) -> dict:
    """Time ``fn(*args)`` to completion, one call at a time.

    Protocol: the compile time is measured first and separately (``fn.lower(*args).compile()``
    when ``fn`` is jitted); then ``n_warmup`` calls are run and dropped; then ``n_samples`` calls
    are timed with the garbage collector off, each blocked with ``jax.block_until_ready``. Blocking
    every call matters twice: an unblocked call returns as soon as the work is *queued*, and XLA:CPU
    deadlocks with about 64 collective calls in flight.

    In a multi-process run (``course launch``) each process times its own calls, and blocking waits
    for the shards on that process's own (addressable) devices; every process must make the same
    calls in the same order, since each call's collectives need all of them.

    Args:
        fn: the function to time. *args: its arguments (already placed on the mesh).
        n_samples: timed calls. n_warmup: untimed calls first.

    Returns:
        ``samples_us`` (list), ``median_us``, ``iqr_us``, ``min_us`` and ``compile_us``
        (``None`` when ``fn`` cannot be lowered; small when ``fn`` already ran with these shapes,
        because JAX then takes the compiled program from its cache).
    """
    for name, value, low in (("n_samples", n_samples, 1), ("n_warmup", n_warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    compile_us = None
    if hasattr(fn, "lower"):
        start = perf_counter()
        fn.lower(*args).compile()
        compile_us = (perf_counter() - start) * 1e6
    for _ in range(n_warmup):
        jax.block_until_ready(fn(*args))
    samples = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(n_samples):
            start = perf_counter()
            jax.block_until_ready(fn(*args))
            samples.append((perf_counter() - start) * 1e6)
    finally:
        if was_enabled:
            gc.enable()
    return {"samples_us": samples, **summarize(samples), "compile_us": compile_us}
