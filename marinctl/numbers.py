"""Every number a person reads, formatted in one place.

Views (the CLI's text, the watch screen, charts' tick labels) never write a format spec of
their own: they pick the style here that says what the number *is* — a step count, a
measured value, a share, a duration — so the same quantity reads the same everywhere.
Missing and non-finite values read as `DASH` in running text and `-` in tables.
JSON output is not formatting: scripts get the raw numbers (cli/output.py's `dumps`).
"""

from __future__ import annotations

import math
from typing import Any

DASH = "—"
_SI = (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3))


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def count(n: int | float | None, missing: str = DASH) -> str:
    """A whole number with thousands separators: steps, rows, tokens (`11,420`)."""
    return f"{int(n):,}" if _finite(n) else missing


def si(x: float | None) -> str:
    """A large rate or total with an SI-ish suffix: `2.33M`, `1.20B` (small values: 3 digits)."""
    if not _finite(x):
        return DASH
    for unit, scale in _SI:
        if abs(x) >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.3g}"


def size(n: int | float | None, missing: str = DASH) -> str:
    """A byte count in binary units: memory and disk sizes (`23.5 GiB`, `512 B`)."""
    if not _finite(n):
        return missing
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def sci(x: float | None) -> str:
    """Compact scientific notation for FLOPs and compute budgets: `2.7e24`."""
    if not _finite(x):
        return DASH
    mant, exp = f"{x:.2e}".split("e")
    return f"{mant.rstrip('0').rstrip('.')}e{int(exp)}"


def sig(x: float | None, digits: int = 4, missing: str = DASH) -> str:
    """A value to `digits` significant digits (`2.345`, `1.6e+21`)."""
    return f"{x:.{digits}g}" if _finite(x) else missing


def fixed(x: float | None, decimals: int = 4, missing: str = DASH) -> str:
    """A value to a fixed number of decimals (losses side by side line up: `2.3456`)."""
    return f"{x:.{decimals}f}" if _finite(x) else missing


def percent(fraction: float | None, decimals: int = 1, *, signed: bool = False, missing: str = DASH) -> str:
    """A fraction as a percentage: `0.123` → `12.3%` (signed: `+12.3%`)."""
    if not _finite(fraction):
        return missing
    return f"{fraction:+.{decimals}%}" if signed else f"{fraction:.{decimals}%}"


def measured(x: Any) -> str:
    """A metric's value or baseline in prose: 4 significant digits, separators below a million."""
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.4g}" if abs(x) < 1e6 else f"{x:.4g}"
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else str(x)


def cell(x: float | int | None) -> str:
    """A number in a table cell: up to 6 significant digits, scientific when very large or small."""
    if x is None:
        return "-"
    if isinstance(x, float):
        if not math.isfinite(x):
            return str(x)
        if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
            return f"{x:.4g}"
        return f"{x:.6g}"
    return str(x)


def duration(seconds: float | None) -> str:
    """An ETA or an age: `2d 5h`, `3h 07m`, `4m 09s`."""
    if not _finite(seconds):
        return DASH
    s = int(seconds)
    d, s = divmod(s, 86400)
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    if d:
        return f"{d}d {h}h"
    if h:
        return f"{h}h {m:02d}m"
    return f"{m}m {s:02d}s"


def tick(v: float, mode: str) -> str:
    """A chart's x tick label on an axis of `mode` (step, tokens, fraction, wall)."""
    if mode == "fraction":
        return f"{v:.3g}"
    if mode == "wall":
        return f"{v:g}h"
    for unit, scale in _SI:
        if abs(v) >= scale:
            return f"{v / scale:.3g}{unit}"
    return f"{v:.4g}"
