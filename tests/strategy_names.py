"""The places outside the strategy registry that name a strategy by a string literal: the
issue's counter ("only registry data names a strategy").

A literal counts when it equals a registered name (``training.strategies.SPECS``) or is one in
the forms a saved run's label takes, ``"name H=…"`` and ``"name x%"``; docstrings don't count,
nor the literals in ``ALLOWED`` that mean something else. Run it to see the places:
``python tests/strategy_names.py``."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCOPE = ("course_utils", "scripts", "benchmarks")  # the code that must not name a strategy
REGISTRY = "course_utils/training/strategies.py"
# (file, literal) → how many of its places mean something else than the strategy
ALLOWED = {
    ("course_utils/training/quantize.py", "int8"): 4,  # a dtype
    ("course_utils/observe/ir.py", "bf16"): 1,
    ("course_utils/tools/cluster/measurements.py", "diloco"): 1,  # the measurement's name
    ("course_utils/tools/cluster/diloco.py", "diloco"): 2,
    ("course_utils/tools/bench/combine.py", "zero1"): 2,  # the bench report's key
}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of ``tree``'s module, classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def literals(source: str, names: Iterable[str]) -> list[tuple[int, str]]:
    """``(line, literal)`` for each string literal of ``source`` (outside docstrings) that is
    one of ``names`` or ``"name H=…"`` / ``"name x%"``.

    Examples:
        >>> literals("x = ['zero1', 'ZeRO-1', 'topk_ef 0.6%', 'local_sgd H=8']",
        ...          ["zero1", "topk_ef", "local_sgd"])
        [(1, 'zero1'), (1, 'topk_ef 0.6%'), (1, 'local_sgd H=8')]
    """
    names = sorted(names, key=len, reverse=True)
    form = re.compile(r"(" + "|".join(map(re.escape, names)) + r")( H=.*| [\d.]+ ?%)?")
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = sorted((node.lineno, node.col_offset, node.value) for node in ast.walk(tree)
                   if isinstance(node, ast.Constant) and isinstance(node.value, str)
                   and id(node) not in skip and form.fullmatch(node.value))
    return [(line, text) for line, _, text in found]


def named_places(names: Iterable[str], root: Path = ROOT) -> dict[str, list[tuple[int, str]]]:
    """Each file of ``SCOPE`` under ``root`` but the registry → its places naming one of
    ``names`` (files with none left out), less the last places of each literal ``ALLOWED``
    counts there.

    Raises:
        ValueError: a file has fewer places of a literal than ``ALLOWED`` lets through.
    """
    names = list(names)
    places = {}
    for top in SCOPE:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == REGISTRY:
                continue
            found = literals(path.read_text(), names)
            for text in {text for _, text in found}:
                allowed = ALLOWED.get((rel, text), 0)
                same = [place for place in found if place[1] == text]
                if len(same) < allowed:
                    raise ValueError(f"{rel} has {len(same)} {text!r}, fewer than the {allowed} "
                                     "ALLOWED says: lower its count there")
                found = [place for place in found if place not in same[len(same) - allowed:]]
            if found:
                places[rel] = found
    return places


def report(places: dict[str, list[tuple[int, str]]]) -> str:
    """One line a file, most places first: ``count  path  literals``."""
    rows = sorted(places.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    lines = [f"{len(found):3d}  {path}  " + ", ".join(f"{line}:{text}" for line, text in found)
             for path, found in rows]
    total = sum(len(found) for found in places.values())
    return "\n".join(lines + [f"{len(places)} files, {total} places"])


if __name__ == "__main__":
    from course_utils.training.strategies import SPECS

    print(report(named_places(SPECS)))


# the fields of a saved record (``course_utils/saved/*.json``) whose value names a strategy
SAVED_FIELDS = ("strategy", "label", "method", "name")


def renamed_copy(names: Iterable[str], to: Path, root: Path = ROOT) -> dict[str, str]:
    """A copy of the package under ``to`` in which every strategy of ``names`` has a fresh name
    (``"s00"``, ``"s01"``, …): the registry's literals that name one (not a ``dtype=``) and the
    saved records' ``SAVED_FIELDS`` renamed by one mapping, which it returns. What still works
    in the copy names a strategy only through the registry's data."""
    import json
    import shutil

    mapping = {name: f"s{k:02d}" for k, name in enumerate(names)}
    shutil.copytree(root / "course_utils", to / "course_utils",
                    ignore=shutil.ignore_patterns("__pycache__"))
    alternatives = "|".join(map(re.escape, sorted(mapping, key=len, reverse=True)))
    quoted = re.compile(r'(?<!dtype=)(f?")(' + alternatives + r')(?=( H=| [\d.]+ ?%|"))')
    registry = to / REGISTRY
    registry.write_text(quoted.sub(lambda m: m[1] + mapping[m[2]], registry.read_text()))
    form = re.compile(r"(" + alternatives + r")( H=.*| [\d.]+ ?%)?")

    def rename(value, key=None):
        if isinstance(value, dict):
            return {k: rename(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [rename(v, key) for v in value]
        match = isinstance(value, str) and key in SAVED_FIELDS and form.fullmatch(value)
        return mapping[match[1]] + (match[2] or "") if match else value

    for path in (to / "course_utils" / "saved").glob("*.json"):
        path.write_text(json.dumps(rename(json.loads(path.read_text())), indent=1))
    return mapping
