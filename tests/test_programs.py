"""``build_programs`` (``training.programs``): every registered strategy's programs compiled with
JAX's check of what varies on (``check_vma``), each the same program as with the check off
(up to the names of its values): the check changes no number ``train`` returns."""

import re

import jax
import pytest

from course_utils.devices.setup import data_mesh
from course_utils.problems.classification import classification_task, init_params, padded_size
from course_utils.training.batches import placed_rows
from course_utils.training.diloco import replica_mesh
from course_utils.training.programs import axes, build_programs, initial_state
from course_utils.training.state import Context
from course_utils.training.strategies import SPECS


def _build(entry):
    """``entry``'s programs on its mesh: two micro-steps if it accumulates, H = 8."""
    mesh = data_mesh() if entry.mesh_axes is None else replica_mesh()
    (axis, rows_axis), n, (x, y) = axes(entry, mesh), padded_size(mesh.size), classification_task()
    accumulate = 2 if entry.accumulates else 1
    ctx = Context(axis, mesh.shape[axis], n, len(y), k=8, optimizer=entry.optimizer)
    state = initial_state(entry, mesh, ctx, init_params(n), accumulate=accumulate)
    half = len(y) // 2
    return build_programs(entry, mesh, ctx, state, placed_rows(mesh, rows_axis, x[:half], y[:half]),
                          accumulate=accumulate, local_steps=8)


def _text(compiled) -> list[str]:
    """The compiled HLO's computations, less their source locations, each name replaced by
    its rank of first use (the check names a psum of an invariant value ``psum_invariant``,
    and numbers constants in another order)."""
    names: dict[str, str] = {}
    lines = [re.sub(r", metadata=\{[^}]*\}", "", line) for line in compiled.as_text().splitlines()
             if line.startswith(("%", "ENTRY", "  "))]
    return [re.sub(r"%?\b[A-Za-z_][\w-]*(?:\.[\w-]+)+",
                   lambda m: names.setdefault(m[0].lstrip("%"), f"%{len(names)}"), line)
            for line in lines]


@pytest.mark.parametrize("name", list(SPECS))
def test_the_checked_programs_are_the_unchecked_ones(name, monkeypatch):
    entry, shard_map, checks = SPECS[name], jax.shard_map, []

    def spied(f, **kwargs):
        checks.append(kwargs["check_vma"])
        return shard_map(f, **kwargs)

    monkeypatch.setattr(jax, "shard_map", spied)
    checked = _build(entry)
    programs = [checked.step, checked.micro, checked.outer, checked.merge]
    assert checks == [True] * sum(p is not None for p in programs)
    monkeypatch.setattr(jax, "shard_map", lambda f, **kwargs: shard_map(
        f, **{**kwargs, "check_vma": False}))
    unchecked = _build(entry)
    for part in ("step", "micro", "outer", "merge"):
        if getattr(checked, part) is not None:
            assert _text(getattr(checked, part)) == _text(getattr(unchecked, part)), part
    assert len(_text(checked.step)) > 10
