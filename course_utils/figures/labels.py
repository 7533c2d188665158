"""The words and numbers a figure writes: human names for the code's names, and plain numbers
for ticks and values."""

from __future__ import annotations

import functools

from course_utils.training.strategies import SPECS, spec

# the names code uses (strategies: each description's label; algorithms, collectives) as a
# reader says them
NAMES = {
    **{name: s.label for name, s in SPECS.items() if s.label != name},
    "recursive_doubling": "recursive doubling", "halving_doubling": "halving-doubling",
    "two_level": "two-level", "parallel_rings": "parallel rings", "hierarchical": "two-level",
    "all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
}


# one colour per strategy family in every figure: 15's curves and 16's families alike; a
# strategy's label takes its family's colour (the slot is an index into the palette)
COLOUR_SLOTS = {
    **{family: k for k, family in enumerate(dict.fromkeys(s.family for s in SPECS.values()))},
    **{s.label: k for k, family in enumerate(dict.fromkeys(s.family for s in SPECS.values()))
       for s in SPECS.values() if s.family == family and s.label != family},
}


def colour_slots(names: list[str], colours: int) -> dict[str, int]:
    """A palette index for each of a figure's series ``names``: a strategy or family keeps its
    slot in ``COLOUR_SLOTS`` (the first of two names sharing one keeps it) if the palette of
    ``colours`` has it, every other name takes the next index left free, in order.

    Examples:
        >>> colour_slots(["data parallelism", "top-k", "bf16", "int8", "a measurement"], 7)
        {'data parallelism': 0, 'top-k': 2, 'bf16': 1, 'int8': 3, 'a measurement': 4}
        >>> colour_slots(["DiLoCo", "Streaming DiLoCo"], 7)  # slot 7: past the palette
        {'DiLoCo': 6, 'Streaming DiLoCo': 0}
    """
    slots: dict[str, int] = {}
    for name in names:
        slot = COLOUR_SLOTS.get(name)
        if slot is not None and slot < colours and slot not in slots.values():
            slots[name] = slot
    free = (k for k in range(len(names) + len(COLOUR_SLOTS)) if k not in slots.values())
    return {name: slots[name] if name in slots else next(free) for name in names}


def short_label(strategy: str) -> str:
    """The registered ``strategy``'s short label, its name where a legend adds the setting.

    Examples:
        >>> short_label("diloco_sgd") + " H=32", short_label("zero1")
        ('DiLoCo, no momentum H=32', 'ZeRO-1')
    """
    return spec(strategy).short_label


def human(label: str) -> str:
    """``label`` as a reader says it: the names in ``NAMES`` replaced wherever they stand as
    words (``"local_sgd H=8"`` → ``"local SGD H=8"``).

    Examples:
        >>> human("topk_ef"), human("link model: reduce_scatter = all_gather"), human("DP")
        ('top-k + error feedback', 'link model: reduce-scatter = all-gather', 'DP')
    """
    return _names_pattern().sub(lambda m: NAMES[m[0]], label)


@functools.cache
def _names_pattern():
    import re

    return re.compile(r"\b(" + "|".join(sorted(NAMES, key=len, reverse=True)) + r")\b")


def number_label(value: float) -> str:
    """A tick or value label in plain digits, 2–3 significant figures, no exponent for the sizes
    this course draws: 0.0151, 3.5, 512, 65.5k, 4.19M; a value below 10⁻³ in the short e-form;
    minus signs are true minus signs.

    Examples:
        >>> [number_label(v) for v in (0, 0.00073, -4.7e-09, 3.5, 512, 1000, 65536, 4194304)]
        ['0', '0.00073', '−4.7e−09', '3.5', '512', '1000', '65.5k', '4.19M']
    """
    return _digits(value).replace("-", "\N{MINUS SIGN}")  # a true minus, not a hyphen


def _digits(value: float) -> str:
    size = abs(value)
    if size == 0:
        return "0"
    if size < 1e-3:
        return f"{value:.2g}"
    if size < 1e3:
        return f"{value:.3g}"
    if size < 1e4:
        return f"{value:.4g}"
    if size < 1e6:
        return f"{value / 1e3:.3g}k"
    if size < 1e9:
        return f"{value / 1e6:.3g}M"
    return f"{value / 1e9:.3g}G"
