"""The rows each step of ``train`` sees: the task split into training and held-out rows, and the
minibatches (or micro-batches) drawn from each device's contiguous shard of the training rows,
placed on the mesh one (micro-)step at a time (``Batches``); or, on the stream task, fresh rows of
the mixture every (micro-)step (``StreamBatches``)."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from course_utils.problems.classification import MLP, PART_THREE_MLP, classification_task
from course_utils.problems.stream import stream_rows, task_centres

# rows kept out of training when a held-out loss is asked for (15360 − 3072 = 12288 rows
# remain: equal shards on 1, 2, 3, 4, 6 and 8 devices)
HELDOUT_ROWS = 3072


def split_task(seed: int, *, skewed: bool, heldout: bool, mlp: MLP = PART_THREE_MLP
               ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """Training rows ``x``, ``y`` and the held-out ``(x, y)`` (``None`` unless ``heldout``).

    Without ``heldout`` the training rows are the whole task, as ``classification_task``
    gives it. With it, the last ``HELDOUT_ROWS`` rows of the shuffled task are held out and the
    rest (ordered by label if ``skewed``) are trained on.

    Examples:
        >>> x, y, held = split_task(0, skewed=False, heldout=True)
        >>> len(y), len(held[1])
        (12288, 3072)
    """
    if not heldout:
        return (*classification_task(seed, skewed=skewed, mlp=mlp), None)
    x, y = classification_task(seed, mlp=mlp)
    cut = len(y) - HELDOUT_ROWS
    x_train, y_train = x[:cut], y[:cut]
    if skewed:
        order = np.argsort(y_train, kind="stable")
        x_train, y_train = x_train[order], y_train[order]
    return x_train, y_train, (x[cut:], y[cut:])


def micro_batch_rows(rows: int, p: int, *, batch_size: int | None, accumulate: int,
                     micro: int, rng: np.random.Generator) -> np.ndarray:
    """The global row indices of one micro-step, device by device (device d's rows first come
    from its shard ``[d·rows/p, (d+1)·rows/p)``).

    With ``batch_size`` b: b rows drawn without replacement from each device's shard by
    ``rng``. Without: the ``micro``-th of ``accumulate`` equal consecutive pieces of each shard
    (the whole shard when ``accumulate`` is 1).

    Examples:
        >>> rng = np.random.default_rng(0)
        >>> micro_batch_rows(8, 2, batch_size=None, accumulate=2, micro=1, rng=rng).tolist()
        [2, 3, 6, 7]
    """
    shard = rows // p
    starts = np.arange(p)[:, None] * shard
    if batch_size is None:
        size = shard // accumulate
        picked = np.broadcast_to(micro * size + np.arange(size), (p, size))
    else:
        picked = np.stack([rng.choice(shard, batch_size, replace=False) for _ in range(p)])
    return (starts + picked).reshape(-1)


def placed_rows(mesh: Mesh, rows_axis, x: np.ndarray, y: np.ndarray) -> tuple[jax.Array, ...]:
    """``x`` and ``y`` on ``mesh``, their rows split over ``rows_axis`` (an axis or several)."""
    return (jax.device_put(x, NamedSharding(mesh, P(rows_axis, None))),
            jax.device_put(y, NamedSharding(mesh, P(rows_axis))))


class Batches:
    """The placed rows of each micro-step, in order: the same whole shards every step by
    default, else drawn by ``micro_batch_rows``; ``first`` is the next one, not yet taken."""

    def __init__(self, mesh, rows_axis, x, y, *, batch_size, accumulate, seed):
        self.mesh, self.rows_axis, self.x, self.y = mesh, rows_axis, x, y
        self.batch_size, self.accumulate = batch_size, accumulate
        self.rng, self.count = np.random.default_rng(seed), 0
        self.fixed = batch_size is None and accumulate == 1
        self.first = placed_rows(mesh, rows_axis, x, y) if self.fixed else self._draw()

    def _draw(self):
        picked = micro_batch_rows(len(self.y), self.mesh.size, batch_size=self.batch_size,
                                  accumulate=self.accumulate, micro=self.count % self.accumulate,
                                  rng=self.rng)
        self.count += 1
        return placed_rows(self.mesh, self.rows_axis, self.x[picked], self.y[picked])

    def next(self):
        taken = self.first
        if not self.fixed:
            self.first = self._draw()
        return taken


class StreamBatches(Batches):
    """``Batches`` on the stream task: every (micro-)step, the device at place d of the rows
    draws ``batch_size`` fresh rows of the mixture (``stream_rows`` of this step and d), so
    strategies with as many devices see the same rows at the same step; ``first_step``: the
    (micro-)steps a warm start's run already drew; ``skewed``: each device draws only its share
    of the classes (``stream_rows``' ``skewed_of``)."""

    def __init__(self, mesh, rows_axis, mlp: MLP, *, batch_size: int, seed: int,
                 task_seed: int = 0, first_step: int = 0, skewed: bool = False):
        self.mesh, self.rows_axis, self.mlp = mesh, rows_axis, mlp
        self.skewed_of = mesh.size if skewed else None
        self.batch_size, self.seed, self.task_seed = batch_size, seed, task_seed
        self.centres, self.count, self.fixed = task_centres(mlp, task_seed), first_step, False
        self.first = self._draw()

    def _draw(self):
        blocks = [stream_rows(self.centres, self.mlp, seed=self.seed, step=self.count, block=d,
                              rows=self.batch_size, task_seed=self.task_seed,
                              skewed_of=self.skewed_of)
                  for d in range(self.mesh.size)]
        self.count += 1
        return placed_rows(self.mesh, self.rows_axis, *map(np.concatenate, zip(*blocks)))
