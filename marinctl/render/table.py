"""Plain-text tables: the CLI's (`cli/output.py` prints them) and the watch panels' that show the same.

A cell reads as `numbers.cell` writes a number, a time to the second, and anything else made
inert (stored names are strangers' text); a column is as wide as its widest cell, up to 60
characters (longer cells end in …).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Sequence

from marinctl import numbers
from marinctl.text import inert

MAX_WIDTH = 60


def cell(value: Any) -> str:
    """One table cell: numbers as `numbers.cell`, times to the second, anything else made inert."""
    if value is None or isinstance(value, float):
        return numbers.cell(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return inert(value, single_line=True)


def table_lines(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """The header, a rule of ─ under it, then a line per row."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = min(max(widths[i], len(c)), MAX_WIDTH)

    def line(vals: Sequence[str]) -> str:
        return "  ".join((v if len(v) <= MAX_WIDTH else v[:MAX_WIDTH - 1] + "…").ljust(widths[i])
                         for i, v in enumerate(vals)).rstrip()

    return [line(headers), line(["─" * w for w in widths])] + [line(row) for row in cells]
