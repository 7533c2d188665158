"""The stream task: the classification task's mixture, drawn afresh every step.

The fixed task (``classification.classification_task``) is one finite sample of rows: trained on
long enough, a model learns those rows and its held-out loss rises again. The stream draws new
rows from the same mixture (the same centres, the same noise) at every step, so no run sees a row
twice and no run can overfit. Device d's rows of micro-step t come from a generator seeded with
(task seed, run seed, t, d): a run repeats exactly, and two strategies on the same number of
devices see the same rows at the same step (the position of a device's block in the rows, not
the shape of the mesh, picks them), so their curves are paired.

The loss is read on one fixed held-out sample of the mixture (``heldout_rows``) and compared
with the floor no model can pass, the mixture's Bayes loss (``bayes_loss``): the cross-entropy of
the true class probabilities, softmax of −|x − c_k|² / 2σ², estimated once on many rows.
"""

from __future__ import annotations

import numpy as np

from course_utils.problems.classification import MLP, PART_THREE_MLP
from course_utils.validate import positive_int

# held-out rows: a standard error of about 0.008 on part three's loss near its floor (per-row
# losses spread about 0.76), and the gaps read between two models on the same rows far smaller
STREAM_HELDOUT_ROWS = 8192
# rows of the floor's estimate (its standard error is printed with it, about 0.002)
FLOOR_ROWS = 200_000
# the streams of one task seed: training rows, held-out rows, the floor's rows
_TRAIN, _HELDOUT, _FLOOR = 0, 1, 2


def task_centres(mlp: MLP = PART_THREE_MLP, task_seed: int = 0) -> np.ndarray:
    """The mixture's centres, f64[classes, features]: those of ``classification_task(task_seed)``.

    Examples:
        >>> from course_utils.problems.classification import classification_task
        >>> x, y = classification_task(0)
        >>> centres = task_centres()
        >>> bool(np.abs(x[y == 3].mean(axis=0) - centres[3]).max() < 0.2)  # noise 2, 1920 rows
        True
    """
    rng = np.random.default_rng(positive_int("task_seed", task_seed, low=0))
    return rng.normal(size=(mlp.classes, mlp.features))


def _draw(centres: np.ndarray, mlp: MLP, rng: np.random.Generator, rows: int,
          classes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    y = (rng.integers(mlp.classes, size=rows) if classes is None else
         classes[rng.integers(len(classes), size=rows)])
    x = centres[y] + mlp.noise * rng.normal(size=(rows, mlp.features))
    return x.astype(np.float32), y.astype(np.int32)


def stream_rows(centres: np.ndarray, mlp: MLP, *, seed: int, step: int, block: int, rows: int,
                task_seed: int = 0, skewed_of: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``rows`` fresh rows ``(x, y)`` of the mixture for block ``block`` (a device's place in
    the rows) of micro-step ``step`` of a run with ``seed``. ``skewed_of``: the number of
    blocks, each drawing only its own share of the classes (block d the classes c with
    c · blocks // classes = d, as a fixed task's shards ordered by label), so that the blocks
    together still draw the whole mixture.

    Examples:
        >>> c = task_centres()
        >>> a = stream_rows(c, PART_THREE_MLP, seed=0, step=5, block=1, rows=4)
        >>> b = stream_rows(c, PART_THREE_MLP, seed=0, step=5, block=1, rows=4)
        >>> bool((a[0] == b[0]).all()), a[0].shape, a[1].dtype
        (True, (4, 32), dtype('int32'))
        >>> other = stream_rows(c, PART_THREE_MLP, seed=0, step=6, block=1, rows=4)
        >>> bool((a[0] == other[0]).any())
        False
        >>> sorted(set(stream_rows(c, PART_THREE_MLP, seed=0, step=5, block=1, rows=64,
        ...                        skewed_of=4)[1].tolist()))  # 8 classes over 4 blocks
        [2, 3]
    """
    rng = np.random.default_rng([task_seed, _TRAIN, seed, step, block])
    if skewed_of is None:
        return _draw(centres, mlp, rng, rows)
    if not 0 < skewed_of <= mlp.classes:
        raise ValueError(f"{mlp.classes} classes cannot be shared out over {skewed_of} blocks: "
                         f"skew over 1 to {mlp.classes} devices")
    own = np.flatnonzero(np.arange(mlp.classes) * skewed_of // mlp.classes == block)
    return _draw(centres, mlp, rng, rows, own)


def heldout_rows(mlp: MLP = PART_THREE_MLP, task_seed: int = 0,
                 rows: int = STREAM_HELDOUT_ROWS) -> tuple[np.ndarray, np.ndarray]:
    """The fixed held-out sample ``(x, y)`` of the mixture: the same for every run and seed."""
    rng = np.random.default_rng([task_seed, _HELDOUT])
    return _draw(task_centres(mlp, task_seed), mlp, rng, positive_int("rows", rows))


def bayes_loss(mlp: MLP = PART_THREE_MLP, task_seed: int = 0, rows: int = FLOOR_ROWS
               ) -> tuple[float, float]:
    """The mixture's Bayes loss (the floor: the cross-entropy of the true class probabilities,
    equal priors, isotropic noise) and its standard error, on ``rows`` rows of its own.

    Examples:
        >>> floor, error = bayes_loss(rows=20_000)
        >>> 0.28 < floor < 0.36, error < 0.01  # part three's mixture: 8 classes, noise 2
        (True, True)
    """
    centres = task_centres(mlp, task_seed)
    rng = np.random.default_rng([task_seed, _FLOOR])
    losses = []
    for start in range(0, positive_int("rows", rows), 20_000):  # a chunk at a time
        x, y = _draw(centres, mlp, rng, min(20_000, rows - start))
        # −|x − c_k|²/2σ² up to a term that is the same for every class of a row
        scores = (x.astype(np.float64) @ centres.T - 0.5 * (centres**2).sum(axis=1)) / mlp.noise**2
        top = scores.max(axis=1, keepdims=True)
        log_total = top[:, 0] + np.log(np.exp(scores - top).sum(axis=1))
        losses.append(log_total - scores[np.arange(len(y)), y])
    per_row = np.concatenate(losses)
    return float(per_row.mean()), float(per_row.std() / np.sqrt(len(per_row)))
