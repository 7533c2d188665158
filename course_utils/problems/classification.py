"""The training task of parts three and four: a classification problem and a plain-JAX MLP
whose parameters are one flat vector, so that sharding them is one ``PartitionSpec``.

The data are built deterministically from a seed (no download): ``N_ROWS`` points in ``FEATURES``
dimensions around ``CLASSES`` random centres, labelled by their centre. The model is
``FEATURES → HIDDEN (tanh) → CLASSES`` with softmax cross-entropy, ``N_PARAMS`` parameters; the
flat vector is padded with zeros to a multiple of ``p · SCALE_BUCKET`` (the padding's gradient is
zero, so it stays zero), which every scheme of part three can split evenly across p devices.
Part four's model (``PART_FOUR_MLP``) is the same task, wider: its gradient is about 4 MiB, so a
shaped link, not the compute or the shaper's burst, sets the time of an all-reduce.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from course_utils.constants import SCALE_BUCKET
from course_utils.validate import positive_int

# 15360 = 2^10·3·5 rows: equal shards on 1, 2, 3, 4, 5, 6 and 8 devices; enough that the MLP
# does not overfit them in part three's runs (its held-out loss still falls at their end)
N_ROWS, FEATURES, CLASSES, HIDDEN = 15360, 32, 8, 256


class MLP(NamedTuple):
    """The shape of a task and its model: ``rows`` points in ``features`` dimensions around
    ``classes`` centres, with Gaussian ``noise`` of that standard deviation per dimension, and
    ``hidden`` tanh units.

    Examples:
        >>> PART_FOUR_MLP.n_params, round(4 * PART_FOUR_MLP.n_params / 2**20, 2)  # float32 MiB
        (1118224, 4.27)
    """

    rows: int
    features: int
    hidden: int
    classes: int
    noise: float = 2.0

    @property
    def layers(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(name, shape) of each parameter, in the order they sit in the flat vector."""
        return (("w1", (self.features, self.hidden)), ("b1", (self.hidden,)),
                ("w2", (self.hidden, self.classes)), ("b2", (self.classes,)))

    @property
    def n_params(self) -> int:
        """Parameters of the model, padding not counted."""
        return sum(math.prod(shape) for _, shape in self.layers)


PART_THREE_MLP = MLP(N_ROWS, FEATURES, HIDDEN, CLASSES)
# part four: a gradient of about 4 MiB, well past the shaper's burst, so the link sets its time
# (four times part three's rows, so that its 1.1 M parameters do not overfit within the runs'
# steps; noise 4, so that the held-out loss still falls at 200 steps)
PART_FOUR_MLP = MLP(rows=4 * N_ROWS, features=256, hidden=4096, classes=16, noise=4.0)
LAYERS, N_PARAMS = PART_THREE_MLP.layers, PART_THREE_MLP.n_params


def classification_task(seed: int = 0, *, skewed: bool = False,
                        mlp: MLP = PART_THREE_MLP) -> tuple[np.ndarray, np.ndarray]:
    """Inputs ``x`` (rows × features of ``mlp``, float32) and labels ``y`` (int32).

    Args:
        seed: the random seed of the centres and the noise.
        skewed: if true, the same rows ordered by label, so that contiguous shards
            (``P(axis)``) each see only a few classes; if false, shuffled, so that every shard
            has the same distribution.
        mlp: the task's shape (part three's by default).

    Examples:
        >>> x, y = classification_task()
        >>> x.shape, y.shape, x.dtype, sorted(set(y.tolist())) == list(range(CLASSES))
        ((15360, 32), (15360,), dtype('float32'), True)
    """
    rng = np.random.default_rng(positive_int("seed", seed, low=0))
    centres = rng.normal(size=(mlp.classes, mlp.features))
    y = rng.permutation(np.arange(mlp.rows) % mlp.classes)
    x = centres[y] + mlp.noise * rng.normal(size=(mlp.rows, mlp.features))
    order = np.argsort(y, kind="stable") if skewed else np.arange(mlp.rows)
    return x[order].astype(np.float32), y[order].astype(np.int32)


def padded_size(p: int, mlp: MLP = PART_THREE_MLP) -> int:
    """Length of the flat parameter vector on ``p`` devices: ``mlp``'s parameters rounded up
    to a multiple of ``p · SCALE_BUCKET``.

    Examples:
        >>> N_PARAMS, padded_size(4), padded_size(3)
        (10504, 10752, 10560)
    """
    unit = positive_int("p", p) * SCALE_BUCKET
    return -(-mlp.n_params // unit) * unit


def init_params(size: int, seed: int = 0, mlp: MLP = PART_THREE_MLP) -> np.ndarray:
    """The initial flat parameter vector of length ``size`` (≥ ``mlp``'s parameters; the rest
    zeros): weights scaled by 1/√fan-in, biases zero."""
    rng = np.random.default_rng(seed + 1)
    parts = []
    for _, shape in mlp.layers:
        scale = 1 / math.sqrt(shape[0]) if len(shape) == 2 else 0.0
        parts.append((scale * rng.normal(size=math.prod(shape))).astype(np.float32))
    return np.concatenate([*parts, np.zeros(size - mlp.n_params, np.float32)])


def unflatten(w, mlp: MLP = PART_THREE_MLP) -> dict:
    """The named layers of a flat parameter vector (the padding is dropped)."""
    layers, start = {}, 0
    for name, shape in mlp.layers:
        size = math.prod(shape)
        layers[name] = w[start:start + size].reshape(shape)
        start += size
    return layers


def logits(w, x, mlp: MLP = PART_THREE_MLP):
    """The MLP's class scores f32[rows, classes] for the rows of ``x``, flat parameters ``w``."""
    layer = unflatten(w, mlp)
    hidden = jnp.tanh(x @ layer["w1"] + layer["b1"])  # f32[rows, HIDDEN]
    return hidden @ layer["w2"] + layer["b2"]


def cross_entropy_sum(scores, y):
    """Sum over the rows of the softmax cross-entropy of class ``scores`` against labels ``y``."""
    picked = jnp.take_along_axis(scores, y[:, None], axis=1)[:, 0]  # f32[rows]
    return jnp.sum(jax.nn.logsumexp(scores, axis=1) - picked)


def loss_sum(w, x, y, mlp: MLP = PART_THREE_MLP):
    """Sum over the rows of ``x`` of the softmax cross-entropy of the MLP with flat parameters
    ``w``. Divide by the number of rows that count (all of them, or one shard's) for a mean."""
    return cross_entropy_sum(logits(w, x, mlp), y)
