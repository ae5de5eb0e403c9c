"""Numbers as a performance engineer reads them: SI prefixes, units, three significant digits, percents.

Every page and note formats through here, so one column never mixes notations and a missing value is
never printed as "nan".
"""

from __future__ import annotations

import math
from typing import Any

PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
MISSING = "—"


def finite(v: object) -> bool:
    """Whether ``v`` is a real number that can be shown (not None, NaN or infinite, not a bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def sig(v: float, digits: int = 3) -> str:
    """``v`` with ``digits`` significant digits, never in exponent notation (1234.5 -> "1,235")."""
    if v == 0:
        return "0"
    if abs(v) >= 10 ** (digits - 1):
        return f"{v:,.0f}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(v))))
    return f"{v:.{decimals}f}"


def si(v: Any, unit: str) -> str:
    """``v`` in ``unit`` with an SI prefix: 9.28e7, "FLOP" -> "92.8 MFLOP"; 0.218e12, "FLOP/s" -> "218 GFLOP/s"."""
    if not finite(v):
        return MISSING
    for scale, prefix in PREFIXES:
        if abs(v) >= scale:
            return f"{sig(v / scale)} {prefix}{unit}"
    return f"{sig(v)} {unit}"


def percent(v: Any) -> str:
    """A share (0.221) as a percent with three significant digits ("22.1%"); tiny shares keep their digits."""
    return f"{sig(100 * v)}%" if finite(v) else MISSING


def ms(v: Any) -> str:
    """A time already in milliseconds, three significant digits."""
    return sig(v) if finite(v) else MISSING


def count(v: Any) -> str:
    """A count: integers with separators, fractions (launches per step) with three digits."""
    if not finite(v):
        return MISSING
    return f"{int(round(v)):,}" if float(v).is_integer() else sig(v)
