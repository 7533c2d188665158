"""Streaming DiLoCo's schedule (Douillard et al. 2025, arXiv:2501.18512), as pure functions:
which fragment of the parameters is sent after which inner step, when it merges, and how.

- **Fragments.** F strided fragments of the flat parameter vector: fragment f holds the values
  at f, f + F, f + 2F, … (``fragment_indices``; in JAX a column of ``w.reshape(-1, F)``). The
  paper's fragments are whole layers; here one layer cannot be split off — part four's first
  layer holds 94 % of the parameters (``largest_layer_share``) — so a fragment takes 1/F of
  every layer: every fragment is the same size, and each sync moves the whole model a little.
- **When.** Counting inner steps from 1, fragment f is sent after every step s with
  s ≡ f · H/F (mod H), s > 0 — every H steps at offset f · H/F, one fragment every H/F steps,
  in the order 1, 2, …, F − 1, 0 (``sent_after``). With F = 1 that is DiLoCo: all, every H.
- **Overlap.** The fragment sent after step s merges after step s + τ (``merged_after``), a
  fixed τ, so the result never depends on how long the exchange took; 0 ≤ τ < H/F, so that one
  fragment at most is on its way at any time (and each merges before it is sent again).
- **Mixing.** On arrival the fragment's local values, which took τ more inner steps, and the
  outer step's result are mixed: α · local + (1 − α) · arrived (``mix``), α = ``MIXING`` = 0.5
  as the paper; α = 0 replaces the fragment, which is DiLoCo's merge (and what τ = 0 uses:
  with nothing computed during the exchange there is nothing local to keep).

``check_streaming`` refuses, in one line, what the schedule cannot run.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from course_utils.problems.classification import MLP
from course_utils.validate import positive_int

MIXING = 0.5  # α: the weight of the local values when an overlapped fragment merges


class Event(NamedTuple):
    """One fragment sent or merged after inner step ``step`` (``kind``: "send" or "merge")."""

    step: int
    fragment: int
    kind: str


def _divisors(value: int) -> list[int]:
    return [d for d in range(1, value + 1) if value % d == 0]


def check_streaming(*, local_steps: int, fragments: int, overlap: int, n: int,
                    devices: int = 1) -> None:
    """A one-line ``ValueError`` unless H ≥ 1, F divides H and the ``n`` padded parameters
    (in ``devices`` equal slices per fragment), and 0 ≤ τ < H/F.

    Examples:
        >>> check_streaming(local_steps=8, fragments=4, overlap=1, n=1024)
        >>> check_streaming(local_steps=8, fragments=3, overlap=0, n=1024)
        Traceback (most recent call last):
        ...
        ValueError: fragments=3 does not divide local_steps=8 (fragment f syncs every H steps at offset f·H/F); choose one of 1, 2, 4, 8
        >>> check_streaming(local_steps=8, fragments=4, overlap=2, n=1024)
        Traceback (most recent call last):
        ...
        ValueError: overlap=2 is not less than H/F = 2 steps: a fragment must merge before the next one is sent; choose 0 to 1
    """  # noqa: E501
    h = positive_int("local_steps", local_steps)
    f = positive_int("fragments", fragments)
    tau = positive_int("overlap", overlap, low=0)
    if h % f:
        raise ValueError(f"fragments={f} does not divide local_steps={h} (fragment f syncs every "
                         f"H steps at offset f·H/F); choose one of "
                         f"{', '.join(map(str, _divisors(h)))}")
    if n % (f * devices):
        fits = [d for d in _divisors(h) if n % (d * devices) == 0]
        raise ValueError(f"fragments={f} does not divide the {n} padded parameters into equal "
                         f"fragments ({devices} slices each); choose one of "
                         f"{', '.join(map(str, fits))}")
    if tau >= h // f:
        raise ValueError(f"overlap={tau} is not less than H/F = {h // f} steps: a fragment must "
                         f"merge before the next one is sent; choose 0 to {h // f - 1}")


def sent_after(step: int, *, local_steps: int, fragments: int) -> int | None:
    """The fragment sent after inner step ``step`` (counted from 1), or ``None``.

    Examples:
        >>> [sent_after(s, local_steps=8, fragments=4) for s in range(1, 11)]
        [None, 1, None, 2, None, 3, None, 0, None, 1]
    """
    every = local_steps // fragments
    if step < 1 or step % every:
        return None
    return step // every % fragments


def merged_after(step: int, *, local_steps: int, fragments: int, overlap: int) -> int | None:
    """The fragment that merges after inner step ``step``: the one sent ``overlap`` steps
    before, or ``None``.

    Examples:
        >>> [merged_after(s, local_steps=8, fragments=4, overlap=1) for s in range(1, 11)]
        [None, None, 1, None, 2, None, 3, None, 0, None]
    """
    return sent_after(step - overlap, local_steps=local_steps, fragments=fragments)


def schedule(steps: int, *, local_steps: int, fragments: int, overlap: int) -> list[Event]:
    """Every send and merge of ``steps`` inner steps, in order (with τ = 0 a fragment merges
    after the step it is sent after; with 0 < τ < H/F no send and merge share a step).

    Examples:
        >>> schedule(4, local_steps=4, fragments=2, overlap=1)
        [Event(step=2, fragment=1, kind='send'), Event(step=3, fragment=1, kind='merge'), \
Event(step=4, fragment=0, kind='send')]
    """
    events = []
    for s in range(1, steps + 1):
        sent = sent_after(s, local_steps=local_steps, fragments=fragments)
        merged = merged_after(s, local_steps=local_steps, fragments=fragments, overlap=overlap)
        if sent is not None:
            events.append(Event(s, sent, "send"))
        if merged is not None:
            events.append(Event(s, merged, "merge"))
    return events


def fragment_indices(n: int, fragment: int, fragments: int) -> np.ndarray:
    """The positions in the flat vector of length n that ``fragment`` holds: strided.

    Examples:
        >>> fragment_indices(12, 1, 4).tolist()
        [1, 5, 9]
    """
    return np.arange(fragment, n, fragments)


def take_fragment(w: jax.Array, fragment, fragments: int) -> jax.Array:
    """``w[fragment::fragments]`` (``fragment`` may be traced: one compiled program for all)."""
    return jax.lax.dynamic_index_in_dim(w.reshape(-1, fragments), fragment, axis=1,
                                        keepdims=False)


def put_fragment(w: jax.Array, fragment, fragments: int, values: jax.Array) -> jax.Array:
    """``w`` with ``w[fragment::fragments]`` replaced by ``values``."""
    grid = jax.lax.dynamic_update_index_in_dim(w.reshape(-1, fragments), values, fragment,
                                               axis=1)
    return grid.reshape(-1)


def mix(local, arrived, alpha: float = MIXING):
    """A fragment on arrival: α · its local values + (1 − α) · the outer step's result.

    Examples:
        >>> float(mix(1.0, 3.0)), float(mix(1.0, 3.0, alpha=0.0))
        (2.0, 3.0)
    """
    return alpha * local + (1 - alpha) * arrived


def largest_layer_share(mlp: MLP) -> float:
    """The fraction of ``mlp``'s parameters in its largest layer (why fragments are strided).

    Examples:
        >>> from course_utils.problems.classification import PART_FOUR_MLP
        >>> round(largest_layer_share(PART_FOUR_MLP), 3)
        0.938
    """
    sizes = [int(np.prod(shape)) for _, shape in mlp.layers]
    return max(sizes) / sum(sizes)
