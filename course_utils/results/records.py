"""Saved runs as typed records, and JSON only at the file boundary: the one reader and writer.

A record is a frozen dataclass whose fields are typed; ``from_json`` builds one (and the records
inside it) from what ``json.loads`` gives, following and checking the field types
(``tuple[Row, ...]``, ``tuple[int, float]``, ``dict[str, Row]``, ``Row | None``), and
``to_json`` gives back the same dictionaries, in the fields' order, so a file written from a
record is the file it was read from. A field whose default is ``None`` is left out of the file
while it is ``None`` (a key only some runs have). ``load`` reads a file, ``load_saved`` one of
the package's saved runs (``saved_path``), ``save`` writes one; a bad file is a one-line
``ValueError`` that names the file, the field and what to do.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from importlib.resources import files
from pathlib import Path
from typing import Any, TypeVar, Union

Record = TypeVar("Record")
FIX = "is it a saved run of this version of the course?"


class _Bad(Exception):
    """A field that does not fit its record: where (``runs[3].loss``) and what is wrong."""

    def __init__(self, at: str, problem: str):
        super().__init__(f"{at}: {problem}" if at else problem)


def from_json(cls: type[Record], data: Any, where: str = "", fix: str = FIX) -> Record:
    """The record ``cls`` from ``data`` (dicts and lists, as ``json.loads`` returns them).

    Args:
        cls: a frozen dataclass.
        data: its fields by name.
        where: named in the error (e.g. the file).
        fix: what the error tells the reader to do.

    Raises:
        ValueError: a field is missing, unknown or of the wrong type; one line that names
            ``where``, the field and ``fix``.

    Examples:
        >>> @dataclasses.dataclass(frozen=True)
        ... class Row:
        ...     bytes: int
        ...     times: tuple[float, ...]
        ...     link_bytes: dict[str, float] | None = None
        >>> row = from_json(Row, {"bytes": 8, "times": [1.5, 2.0]})
        >>> row, to_json(row)
        (Row(bytes=8, times=(1.5, 2.0), link_bytes=None), {'bytes': 8, 'times': [1.5, 2.0]})
        >>> from_json(Row, {"bytes": 8}, "run.json")
        Traceback (most recent call last):
        ...
        ValueError: run.json: times: missing; is it a saved run of this version of the course?
        >>> from_json(Row, {"bytes": 8, "times": [1.5, "2"]}, "run.json", "run it again")
        Traceback (most recent call last):
        ...
        ValueError: run.json: times[1]: a number expected, got str; run it again
    """
    try:
        return _convert(cls, data, "")
    except _Bad as bad:
        raise ValueError(f"{where or cls.__name__}: {bad}; {fix}") from None


_SCALARS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _convert(kind: Any, value: Any, at: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        return _convert(next(a for a in args if a is not type(None)), value, at)
    if dataclasses.is_dataclass(kind):
        return _record(kind, value, at)
    if origin is tuple:
        _expect(value, list, "a list", at)
        if args[-1] is Ellipsis:
            return tuple(_convert(args[0], v, f"{at}[{i}]") for i, v in enumerate(value))
        if len(value) != len(args):
            raise _Bad(at, f"{len(args)} items expected, got {len(value)}")
        return tuple(_convert(a, v, f"{at}[{i}]") for i, (a, v) in enumerate(zip(args, value)))
    if origin is dict or kind is dict:
        _expect(value, dict, "an object", at)
        return {k: _convert(args[1], v, _field(at, k)) for k, v in value.items()} if args else value
    if kind in _SCALARS:
        # a float field takes a whole number as JSON writes it (1800 for 1800.0); bools are
        # not numbers here
        allowed = (int, float) if kind is float else kind
        if isinstance(value, bool) is not (kind is bool) or not isinstance(value, allowed):
            raise _Bad(at, f"{_SCALARS[kind]} expected, got {_json_type(value)}")
    return value


def _expect(value: Any, kind: type, name: str, at: str) -> None:
    if not isinstance(value, kind):
        raise _Bad(at, f"{name} expected, got {_json_type(value)}")


def _field(at: str, name: str) -> str:
    return f"{at}.{name}" if at else name


def _json_type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _record(cls: type, value: Any, at: str) -> Any:
    _expect(value, dict, "an object", at)
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    unknown = [k for k in value if k not in names]
    if unknown:
        raise _Bad(_field(at, unknown[0]), f"not a field of {cls.__name__}")
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields:
        inner = _field(at, f.name)
        if f.name in value:
            out[f.name] = _convert(hints[f.name], value[f.name], inner)
        elif f.default is dataclasses.MISSING:
            raise _Bad(inner, "missing")
    return cls(**out)


def to_json(value: Any) -> Any:
    """``value`` as ``json.dumps`` takes it: records and named tuples as dicts (fields in order,
    a ``None`` whose default is ``None`` left out), tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)
                if not (f.default is None and getattr(value, f.name) is None)}
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: to_json(v) for k, v in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    return value


def saved_path(name: str) -> Path:
    """The saved run ``name`` shipped with the package: ``course_utils/saved/<name>``."""
    return Path(str(files("course_utils").joinpath("saved", name)))


def load(cls: type[Record], path: str | Path, fix: str = FIX) -> Record:
    """The record ``cls`` saved in ``path`` (a JSON file ``save`` wrote).

    Raises:
        ValueError: no such file, not JSON, or a field missing, unknown or of the wrong type;
            one line that names the file (``course_utils/saved/…`` for a saved run), the field
            and ``fix``.
    """
    shown = _shown(Path(path))
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise ValueError(f"{shown}: no such file; {fix}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{shown}: not JSON ({exc.msg}, line {exc.lineno}); {fix}") from None
    return from_json(cls, data, shown, fix)


def load_saved(cls: type[Record], name: str, command: str) -> Record:
    """The record ``cls`` saved in ``course_utils/saved/<name>``; a bad or missing file says to
    regenerate it with ``command``."""
    return load(cls, saved_path(name), f"regenerate with {command}")


def _shown(path: Path) -> str:
    """``path`` as an error names it: from ``course_utils/`` on inside the package."""
    package = Path(str(files("course_utils"))).resolve()
    try:
        return str(path.resolve().relative_to(package.parent))
    except ValueError:
        return str(path)


def dumps(record: Any) -> str:
    """The JSON text of ``record`` as a saved run holds it (one space of indent per level)."""
    return json.dumps(to_json(record), indent=1)


def save(record: Any, path: str | Path) -> None:
    """Write ``record`` to ``path`` as ``dumps`` gives it (``load`` reads it back)."""
    Path(path).write_text(dumps(record))
