"""The strategies of parts three, four and five, each one description (``StrategySpec``) in
one registry (``SPECS``): what trains (``train``), models (``models.step``), labels
(``figures.labels``: ``label`` and ``short_label``), plans and draws (``results.strategies``),
lists part four's rows (``PartFour``, read by ``training.part_four``) and the ZeRO stages
(``ZERO_STAGES``, ``Parts``: the checks), or times (``course cluster --measure training``) a
strategy reads it here. Code elsewhere names a strategy through this registry's data; the
places that still name one by a literal are counted by ``tests/strategy_names.py``.

A strategy is shaped like ``optax.GradientTransformation``: ``init(params, mesh, ctx)`` places
the initial ``TrainState`` on the mesh, and ``step(state, x, y, ctx)``, one device's view inside
``shard_map``, returns the next state and a ``StepInfo``. Every strategy takes the same
data-parallel step — each device computes the gradient of its own rows (``loss_sum`` / the
step's rows, so the sum over devices is the global mean's gradient), then its optimizer's update
(``StrategySpec.optimizer``, the course's heavy-ball momentum) — and differs in what it sends and
what its state holds: the tables of ``exact`` (data parallelism, ZeRO), ``compressed``, ``local``
and ``hsdp``. A strategy that syncs every H steps (``Sync.outer``) runs its outer step apart
(every H/F steps for F fragments, its result merged τ steps later: ``Sync.merge``).
Part five's (``diloco``: data parallelism, local SGD and DiLoCo with AdamW inside, and two
ablations of DiLoCo's outer optimizer;
``streaming_diloco``: DiLoCo in fewer bits, in fragments, overlapped) run on a mesh
``("host", "device")`` of replicas (``StrategySpec.mesh_axes``; ``diloco.replica_mesh``).

To add one: write its step (and any traffic, outer step or extra state) in its family's module
and one ``StrategySpec`` entry below.
"""

from __future__ import annotations

from dataclasses import replace

from course_utils.training import compressed, diloco, exact, hsdp, local, streaming_diloco
from course_utils.training.compressed import POWERSGD_RANK
from course_utils.training.layers import layer_order
from course_utils.training.local import local_sgd_bytes
from course_utils.training.optimizers import (
    OUTER_MOMENTUM,
    TRAIN_LR,
    UNIT_STEP_LR,
    Optimizer,
    adamw,
    outer_average,
    outer_nesterov,
    outer_sgd,
)
from course_utils.training.state import (
    MEMORY_PART,
    Context,
    StepInfo,
    Strategy,
    TrainState,
    accumulate_gradient,
    place,
    state_specs,
)
from course_utils.training.strategy_spec import (
    PartFour,
    Parts,
    SavedPlan,
    SavedRuns,
    StrategySpec,
    Sync,
)
from course_utils.training.streaming import MIXING

__all__ = ["MEMORY_PART", "POWERSGD_RANK", "TRAIN_LR", "Context", "StepInfo", "Strategy",
           "TrainState", "accumulate_gradient", "local_sgd_bytes", "place", "state_specs",
           "Parts", "Sync", "SavedRuns", "SavedPlan", "SAVED_PLANS", "PartFour", "StrategySpec",
           "SPECS", "STRATEGIES", "STRATEGY_STEPS", "DATA_PARALLEL", "LOCAL_SGD", "ZERO_STAGES",
           "HSDP", "DILOCO", "spec", "saved_in", "zero_peak_bytes"]


# ``diloco.json`` (``scripts/diloco_sweep.py``): the two compared, then the ablations of
# DiLoCo's outer optimizer; ``streaming.json`` (``scripts/streaming_curves.py``): H is the
# middle of the sweep's, a replica's rows a cluster host's batch (``course cluster --measure
# diloco``); both on the stream, every H with at least 8 syncs (streaming.json: 10 rounds)
SAVED_PLANS = {
    "diloco.json": SavedPlan((8, 32, 128), (0, 1, 2), 32, 2048, 8),
    "streaming.json": SavedPlan((32,), (0, 1, 2), 512, 320, 8),
}


_WHOLE = Parts("replicated", "replicated", "replicated")
_DP, _BITS = "data parallelism, ZeRO", "fewer bits"
_H = (16, 8, 4)  # local SGD's points on the closing figure
_REPLICAS = (hsdp.HOST, hsdp.DEVICE)  # part five's mesh (``diloco.replica_mesh``)
# Streaming DiLoCo's entry: F fragments (a sync every H/4 steps), each merged one step later;
# F = 4 divides every H of part five (8, 32, 128) and τ = 1 < H/F for all of them
STREAMING_FRAGMENTS, STREAMING_OVERLAP = 4, 1
ACCUMULATION = 4  # micro-steps per optimizer step of part four's row "accumulation"
LOCAL_STEPS = 8  # H of part four's "local_sgd": its parameters are averaged once every H steps
# the baseline of parts three and four, which every scheme is compared with, the strategy of
# step 16 that syncs only every H steps, part four's two-level mesh, and part five's DiLoCo
DATA_PARALLEL, LOCAL_SGD, HSDP, DILOCO = "data_parallel", "local_sgd", "hsdp", "diloco"


def _every_h(name: str, label: str, family: str, outer: Optimizer, *,
             short_label: str | None = None,
             curves: tuple[tuple[str, str], ...] = ()) -> StrategySpec:
    """A part-five strategy of H inner AdamW steps per replica, then ``outer``'s step; its
    roles in the saved curve files ``curves``."""
    step = diloco.outer_step(outer)
    return StrategySpec(name, label, family, Parts("own", "own", None, diloco.outer_parts(outer),
                                                   axis=hsdp.HOST),
                        diloco.replica_step, sync=Sync(step, hsdp.HOST),
                        optimizer=adamw(), accumulates=False, traffic=diloco.every_h_traffic(step),
                        mesh_axes=_REPLICAS, saved=SavedRuns(runs=(), curves=curves),
                        short_label=short_label)


def _streamed(name: str, label: str, family: str, *, fragments: int = 1, dtype: str,
              overlap: int = 0, mixing: float = 0.0) -> StrategySpec:
    """DiLoCo (``_every_h``'s, Nesterov outer step) synced in ``fragments`` in turn, in
    ``dtype``, each merged ``overlap`` steps after its outer step with ``mixing``."""
    outer = outer_nesterov()
    step = diloco.outer_step(outer, fragments=fragments, dtype=dtype, overlap=overlap,
                             mixing=mixing)
    sync = Sync(step, hsdp.HOST, fragments, dtype, overlap=overlap, mixing=mixing,
                merge=step.merging if overlap else None)
    entry = _every_h(name, label, family, outer, curves=(("streaming.json", "curve"),))
    return replace(
        entry, parts=entry.parts._replace(extra=streaming_diloco.streaming_parts(
            outer, fragments, overlap)),
        sync=sync, traffic=diloco.every_h_traffic(step))


_ENTRIES = (
    StrategySpec(DATA_PARALLEL, "data parallelism", _DP, _WHOLE, exact.data_parallel,
                 traffic=exact.all_reduce_traffic,
                 part_four=(PartFour(), PartFour("accumulation", accumulate=ACCUMULATION)),
                 saved=SavedRuns(points=(("data_parallel", "DP = ZeRO-1/2/3"),),
                                 memory_bar=("data_parallel", "DP"),
                                 curves=(("strategies.json", "baseline"),
                                         ("training.json", "baseline")))),
    StrategySpec("zero1", "ZeRO-1", _DP, Parts("replicated", "sliced", "own"), exact.zero1,
                 saved=SavedRuns(memory_bar=("zero1", "ZeRO-1"))),
    StrategySpec("zero2", "ZeRO-2", _DP, Parts("replicated", "sliced", "sliced"), exact.zero2,
                 saved=SavedRuns(memory_bar=("zero2", "ZeRO-2"))),
    StrategySpec("zero3", "ZeRO-3", _DP, Parts("sliced", "sliced", "sliced", layout=layer_order),
                 exact.zero3, accumulates=False, traffic=exact.fsdp_traffic,
                 saved=SavedRuns(memory_bar=("zero3", "ZeRO-3"))),
    StrategySpec("zero3_regather", "ZeRO-3, re-gathered", _DP,
                 Parts("sliced", "sliced", "sliced"), exact.zero3_regather, accumulates=False,
                 # FSDP's layers gathered again for the backward pass, as FSDP does when it frees
                 # them after the forward pass; the step model's zero3 counts those bytes
                 part_four=(PartFour("zero3", modelled="zero3"),),
                 saved=SavedRuns(points=(("zero3_regather", "ZeRO-3 regather"),))),
    StrategySpec(HSDP, "hsdp", _DP, Parts("sliced", "sliced", None, axis=hsdp.DEVICE), hsdp.hsdp,
                 sync=Sync(axis=hsdp.HOST), accumulates=False, traffic=hsdp.two_level_traffic,
                 mesh_axes=(hsdp.HOST, hsdp.DEVICE), part_four=(PartFour(curve=DATA_PARALLEL),),
                 saved=SavedRuns(runs=())),
    StrategySpec("bf16", "bf16", _BITS, _WHOLE, compressed.compressed(
        compressed.compression.bf16_all_reduce), compresses=True,
                 traffic=compressed.bf16_traffic, part_four=(PartFour(),),
                 saved=SavedRuns(points=(("bf16", "bf16"),), memory_bar=("bf16", "bf16"))),
    StrategySpec("int8", "int8", _BITS, _WHOLE, compressed.compressed(
        compressed.compression.int8_all_reduce), compresses=True,
                 traffic=compressed.int8_traffic, part_four=(PartFour(),),
                 saved=SavedRuns(points=(("int8", "int8"),), memory_bar=("int8", "int8"))),
    StrategySpec("topk", "top-k", "top-k", _WHOLE, compressed.topk, compresses=True,
                 saved=SavedRuns(points=(("topk", "top-k 1 %"),), memory_bar=("topk", "top-k"))),
    StrategySpec("topk_ef", "top-k + error feedback", "top-k + error feedback",
                 _WHOLE._replace(extra=compressed.residual), compressed.topk_ef, compresses=True,
                 traffic=compressed.topk_traffic, part_four=(PartFour(),),
                 saved=SavedRuns(runs=({}, {"topk_fraction": 0.006}),
                                 points=(("topk_ef", "1 %"), ("topk_ef 0.6%", "0.6 %")),
                                 memory_bar=("topk_ef", "top-k + EF"))),
    StrategySpec("powersgd", "PowerSGD", "PowerSGD", _WHOLE._replace(
        extra=compressed.powersgd_state), compressed.powersgd, compresses=True,
                 traffic=compressed.powersgd_traffic, part_four=(PartFour(),),
                 saved=SavedRuns(points=(("powersgd", "rank 1"),),
                                 memory_bar=("powersgd", "PowerSGD"))),
    StrategySpec(LOCAL_SGD, "local SGD", "local SGD", Parts("own", "own", "own"),
                 local.local_sgd, sync=Sync(outer=local.average), accumulates=False,
                 traffic=local.every_h_traffic, part_four=(PartFour(local_steps=LOCAL_STEPS),),
                 saved=SavedRuns(
                     runs=tuple({"local_steps": h, "skewed": skewed, "steps_factor": 2}
                                for skewed in (False, True) for h in (1, 4, 8, 16)),
                     points=tuple((f"local_sgd H={h}", f"H={h}") for h in _H),
                     memory_bar=("local_sgd H=8", "local SGD"),
                     curves=(("strategies.json", "every_h"),))),
    StrategySpec("dp_adamw", "data parallelism (AdamW)", _DP,
                 Parts("replicated", "replicated", None, axis=hsdp.HOST), diloco.dp_adamw,
                 sync=Sync(axis=hsdp.HOST), optimizer=adamw(), accumulates=False,
                 traffic=hsdp.two_level_traffic, mesh_axes=_REPLICAS,
                 saved=SavedRuns(runs=(), curves=(("diloco.json", "baseline"),
                                                  ("streaming.json", "baseline"))),
                 short_label="data parallelism"),
    _every_h("local_sgd_adamw", "local SGD (AdamW)", "local SGD", outer_average(),
             short_label="local SGD", curves=(("diloco.json", "compared"),)),
    _every_h(DILOCO, "DiLoCo", "DiLoCo", outer_nesterov(),
             curves=(("diloco.json", "compared"), ("streaming.json", "curve"))),
    # the ablations of DiLoCo's outer optimizer: without its momentum (outer SGD, lr 0.7), and
    # its momentum at plain averaging's steady step (Nesterov lr 0.1 = 1 − μ: lr / (1 − μ) = 1)
    _every_h("diloco_sgd", "DiLoCo without momentum (outer SGD, lr 0.7)", "DiLoCo", outer_sgd(),
             short_label="DiLoCo, no momentum", curves=(("diloco.json", "ablation"),)),
    _every_h("diloco_unit_step", "DiLoCo at unit steady step (outer Nesterov, lr 0.1)", "DiLoCo",
             outer_nesterov(UNIT_STEP_LR, OUTER_MOMENTUM), short_label="DiLoCo, steady step 1",
             curves=(("diloco.json", "ablation"),)),
    _streamed("diloco_int8", "DiLoCo, int8", "DiLoCo", dtype="int8"),
    _streamed("diloco_4bit", "DiLoCo, 4-bit", "DiLoCo", dtype="int4"),
    _streamed("streaming_diloco", "Streaming DiLoCo", "Streaming DiLoCo",
              fragments=STREAMING_FRAGMENTS, dtype="int4", overlap=STREAMING_OVERLAP,
              mixing=MIXING),
)

SPECS: dict[str, StrategySpec] = {s.name: s for s in _ENTRIES}
# the strategies of a one-axis mesh and their functions
STRATEGIES = tuple(s.name for s in _ENTRIES if s.mesh_axes is None)
STRATEGY_STEPS: dict[str, Strategy] = {name: SPECS[name].strategy for name in STRATEGIES}
# step 14's stages of ZeRO, data parallelism first (what each slices: its ``Parts``)
ZERO_STAGES = (DATA_PARALLEL, "zero1", "zero2", "zero3")


def spec(name: str) -> StrategySpec:
    """The registered strategy ``name``.

    Examples:
        >>> spec("local_sgd").sync.outer is not None, spec("zero2").parts.optimizer
        (True, 'sliced')
        >>> spec("ddp")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: unknown strategy 'ddp'; choose one of data_parallel, zero1, zero2, ...
    """
    if name not in SPECS:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(SPECS)}")
    return SPECS[name]


def zero_peak_bytes(layer_sizes, p: int) -> dict[str, float]:
    """Step 14's shape model of the peak one device holds during a step, in bytes, for each of
    ``ZERO_STAGES``: a flat float32 vector of layers of ``layer_sizes`` values as laid out
    (padding included), n values in all, on ``p`` devices. The state between steps (each part
    of the stage's ``Parts`` whole, 4n bytes, or ``sliced``, 4n/p), plus what a step holds
    beyond it: with the parameters sliced, one gathered layer at a time (the largest decides;
    its unreduced gradient in the backward pass takes the same room); else with the gradient
    kept in a slice, the whole local gradient before its reduce-scatter; else with the
    optimizer's state sliced, the slice of the summed gradient it updates with. Sums and
    updates happen in place, whole or sliced (the all-gathered w replaces the old w, counted
    once); activations and what ``jax.grad`` keeps from the forward pass are left out.

    Examples:
        >>> zero_peak_bytes((8192, 256, 2048, 256), 4)
        {'data_parallel': 129024.0, 'zero1': 107520.0, 'zero2': 107520.0, 'zero3': 65024.0}
    """
    n = sum(layer_sizes)
    whole, piece = 4.0 * n, 4.0 * n / p
    peaks = {}
    for stage in ZERO_STAGES:
        parts = spec(stage).parts
        placed = (parts.params, parts.gradient, parts.optimizer)
        state = sum(piece if where == "sliced" else whole for where in placed)
        if parts.params == "sliced":
            during = 4.0 * max(layer_sizes)
        elif parts.gradient == "sliced":
            during = whole
        elif parts.optimizer == "sliced":
            during = piece
        else:
            during = 0.0
        peaks[stage] = state + during
    return peaks


def saved_in(file: str, *roles: str) -> tuple[str, ...]:
    """The strategies of the saved file ``file`` in ``roles`` (all its roles if none, in the
    order the registry first gives them: the baseline first), role by role, each in the
    registry's order (``SavedRuns.curves``).

    Examples:
        >>> saved_in("diloco.json", "ablation")
        ('diloco_sgd', 'diloco_unit_step')
        >>> saved_in("sweep.json")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: no saved curves 'sweep.json' in the registry; choose one of diloco.json, ...
    """
    held = [(f, role, s.name) for s in _ENTRIES for f, role in s.saved.curves]
    files = dict.fromkeys(f for f, _, _ in held)
    if file not in files:
        raise ValueError(f"no saved curves {file!r} in the registry; choose one of "
                         f"{', '.join(sorted(files))}")
    roles = roles or tuple(dict.fromkeys(role for f, role, _ in held if f == file))
    return tuple(name for role in roles for f, r, name in held if (f, r) == (file, role))
