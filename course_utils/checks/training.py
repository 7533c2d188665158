"""Self-checks for steps 14–15: memory per ZeRO stage, error feedback (step 16's H for a byte
budget is in ``local_sgd``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from course_utils.checks.forbidden import uses_forbidden
from course_utils.checks.helpers import (
    call_without,
    check_keys,
    fail,
    function_given,
    number,
    off_by,
    passed,
    unit_causes,
)
from course_utils.display import error_line
from course_utils.training.run import Memory
from course_utils.training.strategies import ZERO_STAGES, spec

STAGES = ZERO_STAGES
# what each stage keeps in slices of 1/p, in the order parameters, gradient, optimizer state:
# the parts its description's ``init`` places ``sliced``
_SLICED = {stage: tuple(part for part, placed in (("parameters", spec(stage).parts.params),
                                                  ("gradients", spec(stage).parts.gradient),
                                                  ("optimizer", spec(stage).parts.optimizer))
                        if placed == "sliced") for stage in STAGES}


def check_memory_prediction(fn, measured: Mapping[str, Memory], n: int, p: int) -> None:
    """Exercise 14: ``fn(n, p) -> {stage: bytes per device}`` for every stage of ``STAGES``,
    against ``measured[stage]``, the ``Memory`` record ``train`` read from the shards of a flat
    vector of ``n`` values on ``p`` devices, then at sizes and device counts never shown."""
    exercise = "memory per ZeRO stage"
    function_given(exercise, "predicted_memory", fn)
    predicted = _predicted(exercise, fn, n, p)
    for stage in STAGES:
        if number(predicted[stage]) is None:
            fail(exercise, f"{stage}: give a number of bytes, got {predicted[stage]!r}")
    # a unit slip shows in every stage at once; a slicing slip (which at p = 4 can give the same
    # number as a unit slip in one stage) only in some
    unit = [unit_causes(number(predicted[s]), measured[s].total) for s in STAGES]
    everywhere = [c for c in unit[0] if all(c in u for u in unit[1:])]
    for stage in STAGES:
        got, want = number(predicted[stage]), measured[stage].total
        if np.isclose(got, want):
            continue
        causes = everywhere or [_slicing_hint(stage, got, measured)
                                or " — or ".join(unit_causes(got, want))
                                or _memory_slip(stage, got, want, p)]
        fail(exercise, f"{stage}: {off_by(got, want)}; {' — or '.join(causes)}")
    for other_n, other_p in _UNSEEN:
        got = _predicted(exercise, fn, other_n, other_p)
        wrong = [s for s in STAGES if number(got[s]) is None
                 or not np.isclose(number(got[s]), _stage_bytes(s, other_n, other_p))]
        if wrong:
            fail(exercise, f"right at this notebook's n = {n}, p = {p}, but not at n = "
                           f"{other_n}, p = {other_p} ({', '.join(wrong)}): write each stage's "
                           "bytes in n and p, not numbers read off this run")
    passed(exercise, ", ".join(f"{s} {measured[s].total} B" for s in STAGES)
           + f"; and at {len(_UNSEEN)} other sizes and device counts")


# (n, p) the notebook never shows; n a multiple of p, as the padded vector is
_UNSEEN = ((4096, 8), (1200, 3), (512, 2), (640, 1))


def _stage_bytes(stage: str, n: int, p: int) -> float:
    """Bytes per device of ``stage``'s three float32 parts: whole (4n) or sliced (4n/p)."""
    return sum(4 * n / p if part in _SLICED[stage] else 4 * n
               for part in ("parameters", "gradients", "optimizer"))


def _predicted(exercise: str, fn, n: int, p: int) -> Mapping:
    try:
        predicted = fn(n, p)
    except Exception as error:  # noqa: BLE001 - the student's code failed: say how, in a line
        fail(exercise, f"predicted_memory({n}, {p}) raised {error_line(error)}")
    if not isinstance(predicted, Mapping):
        fail(exercise, f"predicted_memory(n, p) returned a {type(predicted).__name__}; return a "
                       "dict {stage: bytes}")
    check_keys(exercise, "predicted_memory(n, p)", predicted, STAGES)
    return predicted


def _memory_slip(stage: str, got: float, want: float, p: int) -> str:
    """The likely mistake behind a wrong byte count that is no unit or slicing slip."""
    from course_utils.problems.classification import N_PARAMS

    if np.isclose(got, want * p):
        return "that is all p devices together: give what ONE device holds"
    if np.isclose(got, _stage_bytes(stage, N_PARAMS, p)):
        return "n is the padded vector's length (N_PARAMS plus padding), not N_PARAMS"
    return ("add what one device holds, in bytes, of the parameters, the gradient and the "
            "momentum, each whole (4n) or in a slice (4n/p)")


def _slicing_hint(stage: str, got: float, measured: Mapping[str, Memory]) -> str | None:
    """If ``got`` is what the three parts add up to with another number of them sliced, which
    parts ``stage`` slices; else ``None``."""
    whole = max(max(m.parts().values()) for m in measured.values())
    piece = min(min(m.parts().values()) for m in measured.values())
    sliced = _SLICED[stage]
    for count in range(4):
        if count != len(sliced) and np.isclose(got, count * piece + (3 - count) * whole):
            kept = " and ".join(sliced).replace("optimizer", "the momentum (optimizer state)")
            kept = kept or "nothing"
            return (f"that counts {count} of the three parts as 1/p slices; {stage} keeps "
                    f"{kept} in slices of n/p" + ("" if sliced else ", every part whole"))
    return None


def check_error_feedback(fn) -> None:
    """Exercise 15: ``fn(g, residual, k) -> (sent, new_residual)``: top-k of ``g + residual``
    sent, the rest kept; checked on random vectors, with the identity to the last bit. The page's
    ``top_k`` (a cell above the exercise), the package's ``topk_select`` and
    ``sparse_all_gather`` are refused."""
    exercise = "error feedback"
    function_given(exercise, "my_error_feedback", fn)
    if uses_forbidden(fn, ("top_k",)) is not None:  # the page's helper (cell 8), in another cell
        fail(exercise, "my_error_feedback uses top_k, the page's helper above, which this "
                       "exercise asks you not to reuse: select the k entries yourself with "
                       "jax.lax.top_k")
    rng = np.random.default_rng(15)
    for n, k in ((512, 16), (300, 7)):  # two sizes: a k written into the function fails one
        g, residual = rng.standard_normal((2, n)).astype(np.float32)
        _one_error_feedback(exercise, fn, g, residual, k)
    _traces(exercise, fn)
    passed(exercise, "top k sent; sent + new residual = g + old residual, bit for bit")


def _traces(exercise: str, fn) -> None:
    """``fn`` also runs traced, as inside the exchange's ``shard_map`` (NumPy in place does not)."""
    import jax

    g = np.ones(64, np.float32)
    try:
        jax.jit(fn, static_argnums=2)(g, g, 4)
    except Exception as error:  # noqa: BLE001 - the student's code failed: say how, in a line
        fail(exercise, "my_error_feedback must also run on traced JAX arrays, as inside "
                       "jax.shard_map (use jax.numpy and .at[...].set, not NumPy or assignment "
                       f"in place): {error_line(error)}")


def _one_error_feedback(exercise: str, fn, g: np.ndarray, residual: np.ndarray, k: int) -> None:
    import jax.numpy as jnp

    from course_utils.collectives.compression import sparse_all_gather, topk_select

    result = call_without(  # JAX arrays, as inside a training step (immutable: inputs stay)
        exercise, fn, (jnp.asarray(g), jnp.asarray(residual), k),
        forbidden=(topk_select, sparse_all_gather),
        refusal="my_error_feedback calls the package's {}, which this exercise asks you not "
                "to call: select the top k yourself with jax.lax.top_k",
        call="my_error_feedback")
    if not isinstance(result, (tuple, list)) or len(result) != 2:
        what = f"{len(result)} things" if isinstance(result, (tuple, list)) else "one value"
        fail(exercise, f"my_error_feedback returned {what}: return two vectors, "
                        "(sent, new_residual), e.g. `return sent, acc - sent`")
    try:
        sent, new_residual = (np.asarray(a, dtype=np.float32) for a in result)
    except (TypeError, ValueError) as error:
        fail(exercise, f"sent and new_residual must be vectors of numbers ({error_line(error)})")
    acc = g + residual
    if sent.shape != g.shape or new_residual.shape != g.shape:
        fail(exercise, f"return two vectors shaped like g {g.shape}: the dense sent vector "
                        "(zeros where nothing is sent) and the new residual")
    chosen = np.flatnonzero(sent)
    top = np.argsort(-np.abs(acc))[:k]
    if set(np.flatnonzero(new_residual)) == set(top) and np.array_equal(sent + new_residual, acc):
        fail(exercise, "the two vectors come back swapped: return (sent, new_residual), in that "
                        "order (sent holds the k entries, the residual the rest)")
    if len(chosen) > k:
        fail(exercise, f"{len(chosen)} entries are sent; send only k = {k}")
    if 0 < len(chosen) < k and set(chosen) <= set(top):
        fail(exercise, f"{len(chosen)} entries are sent, the largest of them: send k = {k}, the "
                       "argument k (the check calls with several k)")
    if set(chosen) == set(np.argsort(-np.abs(g))[:k]) and set(chosen) != set(top):
        fail(exercise, "you send the top k of g alone: compress g + residual, so that what "
                        "was held back before gets its turn")
    if set(chosen) != set(top) or not np.array_equal(sent[top], acc[top]):
        fail(exercise, "sent must hold the k entries of g + residual of largest magnitude, "
                        "unchanged, and zeros elsewhere (jax.lax.top_k of the absolute values)")
    if not np.array_equal(sent + new_residual, acc):
        if np.array_equal(new_residual, residual):
            why = "the residual is returned unchanged: it must become what was not sent"
        elif np.allclose(new_residual, g - sent):
            why = "the new residual forgets the old one: it is (g + residual) − sent"
        else:
            why = "the new residual must be (g + residual) − sent"
        fail(exercise, f"sent + new_residual ≠ g + residual: {why}")

