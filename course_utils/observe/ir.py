"""Read the collectives a compiled program contains, from its StableHLO and its compiled HLO.

Op names searched for:

- StableHLO (what JAX hands the compiler): ``stablehlo.all_reduce``, ``stablehlo.reduce_scatter``,
  ``stablehlo.all_gather``, ``stablehlo.all_to_all``, ``stablehlo.collective_permute``.
- Compiled HLO (what XLA will run, after optimization): ``all-reduce``, ``reduce-scatter``,
  ``all-gather``, ``all-to-all``, ``collective-permute`` (and their ``-start`` async forms).

``bytes`` is the size of the op's *result buffer on one device* (the shapes inside ``shard_map`` are
per-device), not the traffic a network would carry; ``ring_payload`` reads that off
``course_utils.models.cost_model``'s table.
"""

from __future__ import annotations

import math
import re
from typing import Callable, NamedTuple, Sequence

import numpy as np

from course_utils.models.cost_model import Topology, bytes_sent

STABLEHLO_OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all", "collective_permute")
HLO_OPS = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all", "collective-permute")

_ITEMSIZE = {
    "pred": 1,
    "i1": 1,
    "s8": 1,
    "u8": 1,
    "i8": 1,
    "f16": 2,
    "bf16": 2,
    "s16": 2,
    "u16": 2,
    "i16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "i32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "i64": 8,
}

_STABLEHLO_OP = re.compile(r'"?stablehlo\.(' + "|".join(STABLEHLO_OPS) + r')"?')
# An op's type signature, the first after the op (an all_reduce's reduction region comes between
# them, over several lines): `: (tensor<8xf32>) -> tensor<8xf32>`, operand types in parentheses,
# then the result type: `8xf32` is its dimensions and dtype, joined by `x`.
_SIGNATURE = re.compile(
    r":\s*(?P<signature>"
    r"\((?P<operands>[^()]*)\)"              # (tensor<8xf32>)
    r"\s*->\s*\(?tensor<(?P<result>[^>]*)>"  # -> tensor<8xf32>
    r"\)?)"
)
_HLO_OP = re.compile(
    r"=\s*(\w+)\[([\d,]*)\](?:\{[^}]*\})?\s+(" + "|".join(HLO_OPS) + r")(?:-start)?\((.*)$",
    re.MULTILINE,
)


# a combined (tuple) collective: `= (f32[1024]{0}, f32[8]{0}) all-reduce(…`
# (a TPU's layouts hold parentheses of their own: `{1,0:T(8,128)}`)
_HLO_TUPLE_OP = re.compile(
    r"=\s*\(((?:[^()]|\([^()]*\))*)\)\s+(" + "|".join(HLO_OPS) + r")(?:-start)?\((.*)$",
    re.MULTILINE,
)
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\]")


class Collective(NamedTuple):
    """One collective op of a program: its name as the dialect spells it, the result's
    per-device shape, dtype and bytes, the device ids of each group (``[]``: all devices, or
    StableHLO, which is not read for groups) and how many buffers a combined op carries.

    Examples:
        >>> op = Collective("all-reduce", (4,), "f32", 16, [[0, 1]])
        >>> op.bytes, op.buffers
        (16, 1)
    """

    op: str
    shape: tuple[int, ...]
    dtype: str
    bytes: int
    replica_groups: list[list[int]] = []
    buffers: int = 1


class ProgramCollectives(NamedTuple):
    """The collectives of one program before (``stablehlo``) and after (``hlo``) XLA's
    optimization, as ``collectives_in`` reads them.

    Examples:
        >>> ProgramCollectives([], []).hlo
        []
    """

    stablehlo: list[Collective]
    hlo: list[Collective]


def _entry(op: str, shape: tuple[int, ...], dtype: str, groups=None, buffers=1) -> Collective:
    size = math.prod(shape) * _ITEMSIZE.get(dtype, 0)
    return Collective(op, shape, dtype, size, [] if groups is None else groups, buffers)


def stablehlo_collectives(text: str) -> list[Collective]:
    """Collectives in StableHLO text, with each result's shape, dtype and bytes.

    Examples:
        >>> line = '%1 = "stablehlo.all_gather"(%arg1) <{...}> : (tensor<2xf32>) -> tensor<8xf32>'
        >>> stablehlo_collectives(line)  # doctest: +NORMALIZE_WHITESPACE
        [Collective(op='all_gather', shape=(8,), dtype='f32', bytes=32, replica_groups=[],
                    buffers=1)]
    """
    found = []
    for op, signature in _signatures(text):
        *dims, dtype = signature["result"].split("x")
        found.append(_entry(op, tuple(int(d) for d in dims), dtype))
    return found


def _signatures(text: str) -> list[tuple[str, re.Match]]:
    """Each StableHLO collective's name, with the match of its type signature (``_SIGNATURE``)."""
    found = []
    for op in _STABLEHLO_OP.finditer(text):
        if (signature := _SIGNATURE.search(text, op.end())) is not None:
            found.append((op.group(1), signature))
    return found


def stablehlo_signatures(text: str) -> list[tuple[str, str]]:
    """Each collective in StableHLO text with its type signature, as the text prints it: the
    operand types, then the result type (shapes inside ``shard_map`` are per device).

    Examples:
        >>> text = '''%9 = "stablehlo.all_reduce"(%8) <{replica_groups = dense<[[0, 1]]>}> ({
        ...   ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        ...     %10 = stablehlo.add %a, %b : tensor<f32>
        ...     stablehlo.return %10 : tensor<f32>
        ...   }) : (tensor<8xf32>) -> tensor<8xf32>'''
        >>> stablehlo_signatures(text)
        [('all_reduce', '(tensor<8xf32>) -> tensor<8xf32>')]
    """
    return [(op, match["signature"]) for op, match in _signatures(text)]


_EXPLICIT_GROUPS = re.compile(r"replica_groups=\{((?:\{[\d,]*\},?)*)\}")
_IOTA_GROUPS = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")
_MESH_GROUPS = re.compile(r"replica_groups=mesh\[([^\]]*)\]\s*\{([^}]*)\}")


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t.strip()]


def replica_groups(text: str) -> list[list[int]]:
    """The members of each group in an HLO op's ``replica_groups``, in any form XLA prints.

    The numbers are positions in the program's device assignment (the mesh's devices in mesh
    order), not ``jax.Device.id``: a mesh of the devices ``[[3, 1], [2, 0]]`` reducing over its
    second axis prints ``{{0,1},{2,3}}``.

    XLA prints the same groups three ways, depending on the version: an explicit list
    ``{{0,1},{2,3}}``; the compact iota form ``[2,2]<=[4]`` (0…3 reshaped to 2 groups of 2,
    optionally transposed first: ``[2,2]<=[2,2]T(1,0)``); and, from JAX 0.12, mesh axes
    ``mesh['node'=2,'local'=2] {'local'}`` (a group per position on the other axes, the positions
    varying along the named axes). An op without groups
    (all devices in one group, or none printed) gives ``[]``.

    Args:
        text: the HLO text of one op, or a line holding ``replica_groups=…``.

    Returns:
        One list of device positions per group.

    Examples:
        >>> replica_groups("replica_groups={{0,1},{2,3}}")
        [[0, 1], [2, 3]]
        >>> replica_groups("replica_groups=[2,2]<=[2,2]T(1,0)")
        [[0, 2], [1, 3]]
        >>> replica_groups("replica_groups=mesh['node'=2,'local'=2] {'node'}")
        [[0, 2], [1, 3]]
    """
    if match := _EXPLICIT_GROUPS.search(text):
        return [_ints(g) for g in re.findall(r"\{([\d,]*)\}", match.group(1))]
    if match := _IOTA_GROUPS.search(text):
        shape, dims = _ints(match.group(1)), _ints(match.group(2))
        ids = np.arange(math.prod(dims)).reshape(dims)
        if match.group(3):
            ids = ids.transpose(_ints(match.group(3)))
        return ids.reshape(shape).tolist()
    if match := _MESH_GROUPS.search(text):
        axes = re.findall(r"'([^']+)'\s*=\s*(\d+)", match.group(1))
        grouped = re.findall(r"'([^']+)'", match.group(2))
        names, sizes = [a for a, _ in axes], [int(n) for _, n in axes]
        ids = np.arange(math.prod(sizes)).reshape(sizes)
        order = [i for i, a in enumerate(names) if a not in grouped]
        order += [names.index(a) for a in grouped]
        group_size = math.prod(sizes[names.index(a)] for a in grouped)
        return ids.transpose(order).reshape(-1, group_size).tolist()
    return []


def hlo_collectives(text: str) -> list[Collective]:
    """Collectives in compiled HLO text, with result shape, dtype, bytes and replica groups.

    XLA combines several collectives of one program into one op with a tuple result (its
    all-reduce combiner, for example); such an entry has ``shape`` and ``dtype`` of its first
    buffer, ``bytes`` of all of them and ``buffers``, how many it combines.

    Examples:
        >>> line = ('ROOT %rs = f32[2]{0} reduce-scatter(%p), channel_id=1, '
        ...         'replica_groups={{0,1,2,3}}, dimensions={0}')
        >>> hlo_collectives(line)  # doctest: +NORMALIZE_WHITESPACE
        [Collective(op='reduce-scatter', shape=(2,), dtype='f32', bytes=8,
                    replica_groups=[[0, 1, 2, 3]], buffers=1)]
        >>> line = '%ar = (f32[4]{0}, f32[2]{0}) all-reduce(%a, %b), replica_groups={{0,1}}'
        >>> hlo_collectives(line)  # doctest: +NORMALIZE_WHITESPACE
        [Collective(op='all-reduce', shape=(4,), dtype='f32', bytes=24,
                    replica_groups=[[0, 1]], buffers=2)]
    """
    found = []
    for match in sorted([*_HLO_OP.finditer(text), *_HLO_TUPLE_OP.finditer(text)],
                        key=lambda m: m.start()):
        if match.re is _HLO_OP:
            dtype, dims, op, rest = match.groups()
            shape = tuple(int(d) for d in dims.split(",") if d)
            found.append(_entry(op, shape, dtype, replica_groups(rest)))
        else:
            arrays, op, rest = match.groups()
            parts = [_entry(op, tuple(_ints(d)), t) for t, d in _ARRAY.findall(arrays)]
            found.append(parts[0]._replace(bytes=sum(e.bytes for e in parts),
                                           replica_groups=replica_groups(rest),
                                           buffers=len(parts)))
    return found


def collectives_in(fn, *args) -> ProgramCollectives:
    """The collective ops in ``fn``'s program for ``args``: before and after XLA's optimization.

    Args:
        fn: a jitted function (anything with ``.lower(*args)``), e.g. ``all_reduce_gradient(mesh)``.
        *args: example arguments.

    Returns:
        ``ProgramCollectives(stablehlo=[...], hlo=[...])``, each a list of ``Collective``
        (per-device result size; HLO entries also carry ``replica_groups``).
    """
    if not hasattr(fn, "lower"):
        raise TypeError(
            f"collectives_in needs a jitted function with .lower(), got {type(fn).__name__}"
        )
    lowered = fn.lower(*args)
    return ProgramCollectives(
        stablehlo=stablehlo_collectives(str(lowered.compiler_ir(dialect="stablehlo"))),
        hlo=hlo_collectives(lowered.compile().as_text()),
    )


# per HLO op: the collective of cost_model's table, and N (its vector) from the result's b bytes
# in a group of g; all-to-all is one pass of N/g to each other device, a permute sends b once
_AS_RING: dict[str, tuple[str, Callable[[float, int], float]]] = {
    "all-reduce": ("all_reduce", lambda b, g: b),
    "reduce-scatter": ("reduce_scatter", lambda b, g: b * g),  # its result is one slice
    "all-gather": ("all_gather", lambda b, g: b),
    "all-to-all": ("all_gather", lambda b, g: b),
}


def ring_payload(entries: Sequence[Collective], ranks: int) -> float:
    """Bytes each device sends for the compiled collectives ``entries`` (from ``hlo_collectives``),
    with every collective run as a ring over its group (``cost_model``'s table).

    Per op with a per-device result of b bytes in a group of g devices: all-reduce 2(g−1)/g·b,
    reduce-scatter (g−1)·b (its result is one slice), all-gather and all-to-all (g−1)/g·b,
    collective-permute b. The group size is read from ``replica_groups``, ``ranks`` if none.

    Examples:
        >>> ring_payload([Collective("all-reduce", (100,), "f32", 400)], 4)
        600.0
        >>> ring_payload([Collective("reduce-scatter", (25,), "f32", 100, [[0, 1]]),
        ...               Collective("all-gather", (50,), "f32", 200, [[0, 1]])], 2)
        200.0
    """
    total = 0.0
    for entry in entries:
        if entry.op == "collective-permute":
            total += entry.bytes
            continue
        g = len(entry.replica_groups[0]) if entry.replica_groups else ranks
        collective, vector = _AS_RING[entry.op]
        total += bytes_sent(collective, "ring", vector(entry.bytes, g), Topology(1, g))
    return total


class Scheduled(NamedTuple):
    """A collective in a compiled program's schedule: the op (as ``hlo_collectives`` reads it),
    whether it is an asynchronous pair (``-start`` … ``-done``), and how many compute
    instructions (fusions, dots, convolutions; not custom calls, which on a TPU here only move
    data) the schedule puts before its start, between its start and its end, and after its end."""

    collective: Collective
    asynchronous: bool
    compute_before: int
    compute_between: int
    compute_after: int


_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%(\S+) = .*? ([a-z][a-z0-9-]*)\((.*)$")
_COMPUTE = ("fusion", "dot", "convolution")


def entry_computation(text: str) -> str:
    """The ENTRY computation of a compiled HLO module's text (the text itself if it has none).

    Examples:
        >>> entry_computation("HloModule m\\n\\n%f {\\n  x\\n}\\n\\nENTRY %main {\\n  y\\n}\\n")
        'ENTRY %main {\\n  y\\n}'
    """
    start = text.find("\nENTRY ")
    if start < 0:
        return text
    end = text.find("\n}", start + 1)
    return text[start + 1:] if end < 0 else text[start + 1:end + 2]


def collective_schedule(entry: str) -> list[Scheduled]:
    """The collectives of a compiled program's HLO text (a module, whose entry computation is
    read, or one scheduled computation), each placed against the compute around it: a
    compiled module prints its entry's instructions in the order they run.

    Examples:
        >>> entry = '''  %f = f32[8]{0} fusion(%p), kind=kLoop, calls=%c
        ...   %ar = f32[8]{0} all-reduce-start(%f), replica_groups={{0,1}}, to_apply=%add
        ...   %g = f32[8]{0} fusion(%p), kind=kLoop, calls=%d
        ...   %d = f32[8]{0} all-reduce-done(%ar)
        ...   ROOT %h = f32[8]{0} fusion(%d, %g), kind=kLoop, calls=%e'''
        >>> [(s.collective.op, s.asynchronous, s.compute_before, s.compute_between,
        ...   s.compute_after) for s in collective_schedule(entry)]
        [('all-reduce', True, 1, 1, 1)]
    """
    entry = entry_computation(entry)
    matched = [m for line in entry.splitlines() if (m := _INSTRUCTION.match(line))]
    steps = [m.groups() for m in matched]
    compute = [op in _COMPUTE for _, op, _ in steps]
    found = []
    for i, (name, op, _) in enumerate(steps):
        base = op.removesuffix("-start")
        if base not in HLO_OPS:
            continue
        line = matched[i].string  # the instruction's own line
        end = i
        if op.endswith("-start"):
            end = next((j for j, (_, o, rest) in enumerate(steps)
                        if o == base + "-done" and rest.startswith(f"%{name})")), i)
        found.append(Scheduled(hlo_collectives(line)[0], op.endswith("-start"),
                               sum(compute[:i]), sum(compute[i + 1:end]),
                               sum(compute[end + 1:])))
    return found
