"""Saved runs as typed records, and JSON only at the file boundary.

A record is a frozen dataclass whose fields are typed; ``from_json`` builds one (and the records
inside it) from what ``json.loads`` gives, following the field types (``tuple[Row, ...]``,
``dict[str, Row]``, ``Row | None``), and ``to_json`` gives back the same dictionaries, in the
fields' order, so a file written from a record is the file it was read from. A field whose
default is ``None`` is left out of the file while it is ``None`` (a key only some runs have).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, TypeVar, Union

Record = TypeVar("Record")


def from_json(cls: type[Record], data: Any, where: str = "") -> Record:
    """The record ``cls`` from ``data`` (dicts and lists, as ``json.loads`` returns them).

    Args:
        cls: a frozen dataclass.
        data: its fields by name.
        where: named in the error (e.g. the file).

    Raises:
        ValueError: a field is missing or unknown; the message names it and ``where``.

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
        ValueError: run.json: Row has no times; is this file a saved run of this course?
    """
    return _convert(cls, data, where or cls.__name__)


def _convert(kind: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if value is None:
        return None
    if dataclasses.is_dataclass(kind):
        return _record(kind, value, where)
    if origin in (Union, types.UnionType):
        return _convert(next(a for a in args if a is not type(None)), value, where)
    if origin is tuple:
        return tuple(_convert(args[0], v, where) for v in value)
    if origin is dict:
        return {k: _convert(args[1], v, where) for k, v in value.items()}
    return value


def _record(cls: type, value: Any, where: str) -> Any:
    fields = dataclasses.fields(cls)
    if not isinstance(value, dict):
        raise ValueError(f"{where}: {cls.__name__} must be an object, got {type(value).__name__}")
    unknown = set(value) - {f.name for f in fields}
    if unknown:
        raise ValueError(f"{where}: {cls.__name__} has no field {', '.join(sorted(unknown))}; "
                         "was this file written by another version of the course?")
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields:
        if f.name in value:
            out[f.name] = _convert(hints[f.name], value[f.name], where)
        elif f.default is dataclasses.MISSING:
            raise ValueError(f"{where}: {cls.__name__} has no {f.name}; "
                             "is this file a saved run of this course?")
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
