"""The one validator of counts (devices, rows, samples, ports): a positive integer,
or a clear error.
"""

from __future__ import annotations

import numbers


def positive_int(name: str, value: object, *, low: int = 1, hint: str = "") -> int:
    """``value`` as an ``int`` if it is an integer ≥ ``low`` (``bool`` is not); else ``ValueError``.

    Args:
        name: how the message names the value.
        value: what was given.
        low: the smallest allowed value.
        hint: what to do, appended to the message.

    Returns:
        ``int(value)``.

    Examples:
        >>> positive_int("n_rows", 16)
        16
        >>> positive_int("devices", 0, hint="try use_cpu_devices(4)")
        Traceback (most recent call last):
        ...
        ValueError: devices must be a positive integer, got 0; try use_cpu_devices(4)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        wanted = "a positive integer" if low == 1 else f"an integer >= {low}"
        raise ValueError(f"{name} must be {wanted}, got {value!r}" + (f"; {hint}" if hint else ""))
    return int(value)
