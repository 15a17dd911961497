"""Printing results: tables for people, JSON for scripts, progress and notes on stderr.

Only the CLI prints. Every human-facing string that came from outside passes through
`marinctl.text.inert` here, so commands cannot forget it; numbers in table cells read
as `marinctl.numbers.cell` writes them. JSON keeps raw numbers (NaN/Inf as null).
"""

from __future__ import annotations

import json
import math
import sys
from datetime import date, datetime
from typing import Any, Iterable, Sequence

from marinctl import numbers
from marinctl.text import inert, json_safe


def _default(obj: Any) -> Any:
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def _clean(obj: Any) -> Any:
    """JSON has no NaN/Inf: emit them as null so every consumer can parse the output."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def dumps(obj: Any) -> str:
    return json_safe(json.dumps(_clean(obj), default=_default, ensure_ascii=False))


def print_json(obj: Any) -> None:
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


def fmt(value: Any) -> str:
    """One table cell: numbers as `numbers.cell`, times to the second, anything else made inert."""
    if value is None or isinstance(value, float):
        return numbers.cell(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return inert(value, single_line=True)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, out=None) -> None:
    out = out or sys.stdout
    cells = [[fmt(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, c in enumerate(row):
            widths[i] = min(max(widths[i], len(c)), 60)
    def line(vals: Sequence[str]) -> str:
        return "  ".join((v if len(v) <= 60 else v[:59] + "…").ljust(widths[i]) for i, v in enumerate(vals)).rstrip()
    out.write(line(headers) + "\n")
    out.write(line(["─" * w for w in widths]) + "\n")
    for row in cells:
        out.write(line(row) + "\n")


def info(message: str) -> None:
    """Progress and notes go to stderr so stdout stays clean for pipes and --json."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
