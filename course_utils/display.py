"""Fixed-precision text for notebook output, so a re-run prints exactly the same characters."""

from __future__ import annotations

import numpy as np

DIGITS = 5


def format_values(values, digits: int = DIGITS) -> str:
    """Values rounded to ``digits`` decimals, negative zeros removed, as one bracketed line.

    Float32 sums done in another order can differ in the last bits; rounding to 5 decimals
    (well above float32's ~1e-7 relative error for these magnitudes) keeps printed text stable.

    Examples:
        >>> format_values([0.0029296838, -2.79e-09, 1.5])
        '[ 0.00293  0.00000  1.50000]'
    """
    a = np.round(np.asarray(values, dtype=np.float64), digits) + 0.0
    return np.array2string(a, precision=digits, floatmode="fixed", max_line_width=120, sign=" ")


def format_bytes(n: float | None) -> str:
    """A byte count for tables: ``—`` for none, else B, KiB, MiB or GiB.

    Examples:
        >>> format_bytes(None), format_bytes(512), format_bytes(2**20), format_bytes(3 * 2**10)
        ('—', '512 B', '1 MiB', '3 KiB')
        >>> format_bytes(2**30)
        '1 GiB'
    """
    if n is None:
        return "—"
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n:g} B"


def format_gbps(value: float | None) -> str:
    """A fitted bandwidth in GB/s for tables, to two significant figures (the fits here are
    rough); ``∞`` when the fit found no per-byte cost.

    Examples:
        >>> format_gbps(3.14159), format_gbps(15.58), format_gbps(123.4), format_gbps(None)
        ('3.1', '16', '120', '∞')
    """
    return "∞" if value is None else f"{float(f'{value:.2g}'):g}"


def error_line(error: BaseException) -> str:
    r"""``TypeName: first line`` of an exception: what a one-line report shows (JAX and XLA put
    their explanation on later lines; the first says what failed).

    Examples:
        >>> error_line(ValueError("shapes differ:\n  (4,) and (8,)"))
        'ValueError: shapes differ'
    """
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0].rstrip(':') if text else ''}"
