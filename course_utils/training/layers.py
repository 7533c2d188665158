"""ZeRO-3's layout of the flat parameter vector: each device's slice holds its chunk of every
layer (``layer_chunks``, ``layer_order``), so that each layer is all-gathered on its own and the
peak during a step is one layer (``StrategySpec.flat`` puts a state's vector back in the task's
order).
"""

from __future__ import annotations

import math

import numpy as np

from course_utils.problems.classification import MLP, PART_THREE_MLP


def layer_chunks(n: int, p: int, mlp: MLP = PART_THREE_MLP) -> tuple[int, ...]:
    """Values of each layer (``mlp.layers`` order) in one device's slice of zero3's vector:
    ⌈size/p⌉ each, the last layer's chunk filled up with the padding to n/p in all.

    Examples:
        >>> layer_chunks(10752, 4), sum(layer_chunks(10752, 4)) == 10752 // 4
        ((2048, 64, 512, 64), True)
    """
    sizes = [math.prod(shape) for _, shape in mlp.layers]
    chunks = [-(-size // p) for size in sizes[:-1]]
    last = n // p - sum(chunks)
    if last * p < sizes[-1]:
        raise ValueError(f"n = {n} leaves too little padding to cut every layer in {p} chunks")
    return (*chunks, last)


def layer_order(n: int, p: int, mlp: MLP = PART_THREE_MLP) -> np.ndarray:
    """zero3's layout: ``w[layer_order(n, p)]`` puts device i's chunk of every layer in its
    slice i (``P(axis)``), so that each layer is all-gathered on its own; entry ``j`` of the
    layout is entry ``layer_order(n, p)[j]`` of the task's flat vector (the padding fills the
    rest of each chunk). ``np.argsort`` of it goes back.

    Examples:
        >>> order = layer_order(10752, 4)
        >>> sorted(order.tolist()) == list(range(10752)), order[2048:2050].tolist()
        (True, [8192, 8193])
    """
    chunks, start, starts = layer_chunks(n, p, mlp), 0, []
    for _, shape in mlp.layers:
        starts.append(start)
        start += math.prod(shape)
    padding = iter(range(mlp.n_params, n))
    order = []
    for i in range(p):
        for (_, shape), begin, chunk in zip(mlp.layers, starts, chunks):
            for j in range(i * chunk, (i + 1) * chunk):
                order.append(begin + j if j < math.prod(shape) else next(padding))
    return np.array(order)
