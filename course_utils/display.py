"""Fixed-precision text for notebook output, so a re-run prints exactly the same characters."""
from __future__ import annotations

import numpy as np

DIGITS = 6


def format_values(values, digits: int = DIGITS) -> str:
    """Values rounded to ``digits`` decimals, negative zeros removed, as one bracketed line.

    Float32 sums done in another order can differ in the last bits; rounding to 6 decimals
    (well above float32's ~1e-7 relative error for these magnitudes) keeps printed text stable.

    Examples:
        >>> format_values([0.0029296838, -2.79e-09, 1.5])
        '[ 0.002930  0.000000  1.500000]'
    """
    a = np.round(np.asarray(values, dtype=np.float64), digits) + 0.0
    return np.array2string(a, precision=digits, floatmode="fixed", max_line_width=120, sign=" ")
