"""Self-check of step 02: the factors that make ``pmean`` exact on unequal shards (step 03's
reduce-scatter check is ``checks.scatter``)."""

from __future__ import annotations

import math

import jax
import numpy as np
from jax import P
from jax.sharding import Mesh

from course_utils.checks.helpers import (
    call_without,
    fail,
    function_given,
    passed,
    same_device_count,
)
from course_utils.constants import ATOL
from course_utils.devices.setup import placements
from course_utils.display import error_line
from course_utils.problems.regression import reference_gradient

# ---------------------------------------------------------------------------------------------
# step 02: pmean_weights(counts)


def _exact_factors(counts) -> np.ndarray:
    """The factor each device multiplies its local mean by so that ``pmean`` of the products
    is the mean over all rows: p·cᵢ/Σc (the check's reference; a student must not call it)."""
    counts = np.asarray(counts, dtype=np.float64)
    return len(counts) * counts / counts.sum()


def _weighted_pmean(x_block, y_block, m_block, f_block, w):
    # x_block: f32[size, features] padded with zero rows, m_block: 1 on a real row, f_block: f32[1]
    local_mean = 2 * x_block.T @ ((x_block @ w - y_block) * m_block) / m_block.sum()
    return jax.lax.pmean(local_mean * f_block[0], "data")  # f32[features], on every device


def _uneven_case(counts, x, y, w, devices):
    """``x, y`` dealt to ``len(counts)`` devices, ``counts[i]`` rows to device i (blocks padded
    with zero rows), and a function of the factors that runs ``_weighted_pmean`` on them."""
    q, size, f = len(counts), int(max(counts)), x.shape[1]
    mesh = Mesh(np.asarray(devices[:q]), ("data",))
    x_pad = np.zeros((q, size, f), np.float32)
    y_pad, m_pad = np.zeros((q, size), np.float32), np.zeros((q, size), np.float32)
    for i, (start, count) in enumerate(zip(np.cumsum(counts) - counts, counts)):
        x_pad[i, :count], y_pad[i, :count] = x[start:start + count], y[start:start + count]
        m_pad[i, :count] = 1
    rows, replicated, sliced = placements(mesh)
    placed = (jax.device_put(x_pad.reshape(-1, f), rows), jax.device_put(y_pad.reshape(-1), sliced),
              jax.device_put(m_pad.reshape(-1), sliced))
    specs = (P("data", None), P("data"), P("data"), P("data"), P())
    kernel = jax.jit(jax.shard_map(_weighted_pmean, mesh=mesh, in_specs=specs, out_specs=P()))

    def run(factors):
        return kernel(*placed, jax.device_put(np.asarray(factors, np.float32), sliced),
                      jax.device_put(w, replicated))

    return run


def _own_cases(p: int) -> list[tuple[np.ndarray, tuple]]:
    """Counts (each ≥ 1, not all equal where there are two devices or more) and data the page
    never showed, on meshes of all p devices, 3 and 2 (those there are)."""
    cases = []
    for q in sorted({q for q in (p, 3, 2) if q <= p}, reverse=True):
        rng = np.random.default_rng(20 + q)
        counts = rng.integers(1, 7, q)
        counts[0], counts[-1] = 1, counts[-1] + 5 if q > 1 else counts[-1]  # a 1 and a large one
        n = int(counts.sum())
        data = tuple(rng.standard_normal(s).astype(np.float32) for s in ((n, 5), (n,), (5,)))
        cases.append((counts, data))
    return cases


# the slips, each a function of the counts, the page's p and the page's total row count, with
# what the check says to it
_FACTOR_SLIPS = {
    "the result is p× too small: pmean divides by p after adding the p weighted means, so the "
    "factors must make up for that division too": lambda c, p, n: c / c.sum(),
    "the result is (p − 1)/p of the mean: the factors make up for a division by p − 1, but "
    "pmean divides by p, the number of devices (len(counts))":
        lambda c, p, n: (len(c) - 1) * c / c.sum(),
    "the result is p× too large: the factors make up for pmean's division by p twice; it "
    "divides once": lambda c, p, n: len(c) ** 2 * c / c.sum(),
    "every factor is 1: that is the page's local mean + pmean, off with unequal shards; a "
    "device's factor must depend on its row count": lambda c, p, n: np.ones(len(c)),
    "the factors are inverted: a device with more rows must count more in the mean, not less":
        lambda c, p, n: c.sum() / (len(c) * c),
    "the factors are the row counts themselves, not normalised: they scale the result by Σc / p":
        lambda c, p, n: c.astype(np.float64),
    "the factors use the page's N_DEVICES for p: take p from the counts given (len(counts))":
        lambda c, p, n: p * c / c.sum(),
    "the factors are in reverse order: factor i is for device i, which holds counts[i] rows":
        lambda c, p, n: len(c) * c[::-1] / c.sum(),
    "the factors divide by a fixed total, the page's row count (n_rows?), not by the rows in "
    "the counts given: take the total from counts": lambda c, p, n: len(c) * c / n,
    "the factors divide by the mean row count rounded down (Σc // p, or int() of the mean): "
    "the mean Σc / p need not be a whole number; divide with /":
        lambda c, p, n: c / (c.sum() // len(c)),
}


def _factors(exercise: str, fn, counts: np.ndarray, page_counts: np.ndarray) -> np.ndarray:
    """The student's ``fn(counts)`` as a vector of ``len(counts)`` floats, or a failure that says
    what was wrong with what came back (the page's factors, whatever the counts, named)."""
    q, call = len(counts), f"pmean_weights({counts.tolist()})"
    # forbidden: the check modules' own functions, _exact_factors among them (check_answer_name)
    got = call_without(exercise, fn, (counts.copy(),), forbidden=(),
                       refusal="pmean_weights calls {}, the check's own answer: work out the "
                               "factors from what pmean computes", call=call)
    if got is None:
        fail(exercise, f"{call} returned None: return the {q} factors, one per device")
    try:
        values = np.asarray(got, dtype=np.float64)
    except (TypeError, ValueError) as error:
        fail(exercise, f"{call} must return {q} numbers (a list or an array), got "
                       f"{type(got).__name__} ({error_line(error)})")
    if values.shape == page_counts.shape and q != len(page_counts) and np.allclose(
            values, _exact_factors(page_counts), rtol=1e-5):
        fail(exercise, f"{call} gives the factors of the page's counts: use the argument counts")
    if values.ndim == 0 or values.size != q:
        what = "one number" if values.ndim == 0 else f"{values.size} numbers"
        fail(exercise, f"{call} returned {what}, the wrong length: one factor per device, "
                       f"{q} for {q} counts, in the order of the counts")
    values = values.ravel()
    if not np.isfinite(values).all():
        fail(exercise, f"{call} holds NaN or inf: every count is at least 1, so every factor "
                       "is a finite number")
    return values


def _listed(values: np.ndarray) -> str:
    shown = ", ".join(f"{v:g}" for v in values[:6])
    return f"[{shown}{', …' if values.size > 6 else ''}]"


def check_pmean_weights(fn, mesh, counts, x_host, y_host, w_host) -> None:
    """Exercise 02: ``fn(counts) -> p factors`` such that every device's local mean gradient
    times its factor, averaged by ``pmean``, is the mean gradient over all rows (p·cᵢ/Σc). The
    factors are applied in a ``shard_map`` kernel (local mean × factor, then ``pmean``) to the
    page's uneven rows on ``mesh`` and to counts and data of the check's own on meshes of 2, 3
    and all the devices (those there are); the value is compared with the reference gradient
    and the placement (replicated on every device). Named slips: cᵢ/Σc, (p − 1)·cᵢ/Σc, p²·cᵢ/Σc,
    all ones, Σc/(p·cᵢ), cᵢ unnormalised, the page's p, the page's total row count, reversed,
    factors rounded to whole numbers, a mean row count rounded down, the wrong length; the
    check's own reference is refused."""
    exercise = "pmean weights"
    function_given(exercise, "pmean_weights", fn)
    page_counts = np.asarray(counts).astype(np.int64)
    p = len(page_counts)
    same_device_count(exercise, math.prod(mesh.devices.shape), "mesh")
    devices = list(mesh.devices.flat)
    cases = [(page_counts, tuple(np.asarray(a, np.float32) for a in (x_host, y_host, w_host)))]
    cases += _own_cases(p)
    answers = [_factors(exercise, fn, c, page_counts) for c, _ in cases]
    for k, ((c, (x, y, w)), got) in enumerate(zip(cases, answers)):
        n = int(c.sum())
        g = _uneven_case(c, x[:n], y[:n], w, devices)(got)
        shapes = {tuple(s.data.shape) for s in g.addressable_shards}
        if len(g.addressable_shards) != len(c) or shapes != {w.shape}:
            raise RuntimeError(f"the check's kernel left {shapes} on "
                               f"{len(g.addressable_shards)} devices, not the gradient on each")
        reference = reference_gradient(x[:n], y[:n], w)
        if np.allclose(np.asarray(g), reference, atol=ATOL, rtol=1e-4):
            continue
        where = "the page's counts" if k == 0 else "counts of the check's own"
        call = f"pmean_weights({c.tolist()}) ({where}, p = {len(c)})"
        for why, slip in _FACTOR_SLIPS.items():
            if all(np.allclose(a, slip(cc, p, page_counts.sum()), rtol=1e-5)
                   for (cc, _), a in zip(cases, answers)):
                fail(exercise, f"{call}: {why}")
        if all(np.array_equal(a, np.round(a)) for a in answers):
            fail(exercise, f"{call}: every factor is a whole number ({_listed(got)}): floor "
                           "division (//) or int() rounds them, and the factors need not be "
                           "whole; divide with /")
        if k and got.shape == page_counts.shape and np.allclose(
                got, _exact_factors(page_counts), rtol=1e-5):
            fail(exercise, f"{call} gives the factors of the page's counts: use the argument "
                           "counts")
        error = np.linalg.norm(np.asarray(g) - reference) / np.linalg.norm(reference)
        fail(exercise, f"{call}: local mean × factor, then pmean, is off from the mean gradient "
                       f"over all rows by {error:.1%} (relative, 2-norm); write out what pmean "
                       "computes from the p weighted means and compare it with the sum over "
                       "every row divided by Σc")
    sizes = [str(len(c)) for c, _ in cases[1:]]
    on = f"{', '.join(sizes[:-1])} and {sizes[-1]}" if len(sizes) > 1 else sizes[0]
    passed(exercise, f"local mean × factor, then pmean, is the mean over all rows for the page's "
                     f"counts {page_counts.tolist()} and for counts of the check's own on {on} "
                     f"device{'s' if sizes != ['1'] else ''}")
