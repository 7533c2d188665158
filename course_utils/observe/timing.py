"""Timing completed calls of jitted functions: the one sampler the notebooks and
``course bench`` share.

On logical CPU devices all "devices" share one memory and one process: these timings measure
dispatch, synchronization and memory copies, never a network.
"""

from __future__ import annotations

import gc
from time import perf_counter
from typing import Callable

import jax
import numpy as np

from course_utils.validate import positive_int

Thunk = Callable[[], object]


def summarize(samples_us) -> dict:
    """Median, quartiles, interquartile range and minimum of timing samples (µs).

    Examples:
        >>> summarize([1.0, 2.0, 3.0, 4.0, 100.0])
        {'median_us': 3.0, 'iqr_us': 2.0, 'min_us': 1.0, 'q1_us': 2.0, 'q3_us': 4.0}
    """
    a = np.asarray(samples_us, dtype=float)
    if a.size == 0:
        raise ValueError("no timing samples to summarize")
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    return {
        "median_us": float(med),
        "iqr_us": float(q3 - q1),
        "min_us": float(a.min()),
        "q1_us": float(q1),
        "q3_us": float(q3),
    }


def blocked_us(thunk: Thunk) -> float:
    """The time of one call of ``thunk``, blocked until its result is ready, in µs."""
    start = perf_counter()
    jax.block_until_ready(thunk())
    return (perf_counter() - start) * 1e6


def sample_blocked(thunks: dict[str, Thunk], n_samples: int) -> dict[str, list[float]]:
    """``n_samples`` timed calls of each thunk, round-robin, with the garbage collector off.

    Every call is blocked before the next starts: an unblocked call returns as soon as the work is
    *queued*, and on this course's machine a loop that left 64 shard-mapped ``psum`` calls
    unblocked hung XLA:CPU (notebook 05 says how to reproduce it). With several thunks the order
    rotates each round, so no variant always runs first.

    Examples:
        >>> found = sample_blocked({"a": lambda: 1, "b": lambda: 2}, 3)
        >>> sorted(found), [len(v) for v in found.values()]
        (['a', 'b'], [3, 3])
    """
    names = list(thunks)
    samples: dict[str, list[float]] = {name: [] for name in names}
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for i in range(n_samples):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                samples[name].append(blocked_us(thunks[name]))
    finally:
        if was_enabled:
            gc.enable()
    return samples


def time_completed_calls(fn, *args, n_samples: int = 50, n_warmup: int = 3) -> dict:
    """Time ``fn(*args)`` to completion, one call at a time.

    Protocol: the compile time is measured first and separately (``fn.lower(*args).compile()``
    when ``fn`` is jitted); then ``n_warmup`` calls are run and dropped; then ``n_samples`` calls
    are timed by ``sample_blocked`` (gc off, every call blocked).

    In a multi-process run (``course launch``) each process times its own calls, and blocking waits
    for the shards on that process's own (addressable) devices; every process must make the same
    calls in the same order, since each call's collectives need all of them.

    Args:
        fn: the function to time.
        *args: its arguments (already placed on the mesh).
        n_samples: timed calls.
        n_warmup: untimed calls first.

    Returns:
        ``samples_us`` (list), ``median_us``, ``iqr_us``, ``min_us`` and ``compile_us``
        (``None`` when ``fn`` cannot be lowered; small when ``fn`` already ran with these shapes,
        because JAX then takes the compiled program from its cache).
    """
    positive_int("n_samples", n_samples)
    positive_int("n_warmup", n_warmup, low=0)
    compile_us = None
    if hasattr(fn, "lower"):
        start = perf_counter()
        fn.lower(*args).compile()
        compile_us = (perf_counter() - start) * 1e6
    for _ in range(n_warmup):
        jax.block_until_ready(fn(*args))
    samples = sample_blocked({"fn": lambda: fn(*args)}, n_samples)["fn"]
    return {"samples_us": samples, **summarize(samples), "compile_us": compile_us}
