"""Printing results: tables for people, JSON for scripts, progress and notes on stderr.

Only the CLI prints. Every human-facing string that came from outside passes through
`marinctl.text.inert` in a table cell (render/table.py, shared with watch's panels), so
commands cannot forget it; numbers in table cells read as `marinctl.numbers.cell` writes
them. JSON and CSV keep raw numbers; a non-finite value is spelled as W&B's own JSON exports
spell it ("NaN", "Infinity", "-Infinity"), so that `null` / an empty CSV field keeps meaning
"no value" (README, "Values and keys"); the JSON encoder is `marinctl/json_doc.py`, shared
with the Python API.
"""

from __future__ import annotations

import math
import sys
from typing import Any, Iterable, Sequence

from marinctl.json_doc import dumps, nonfinite
from marinctl.render.table import cell, table_lines

__all__ = ["csv_cell", "dumps", "fmt", "info", "nonfinite", "print_json", "print_table"]


def csv_cell(value: Any) -> Any:
    """One CSV field: None is empty, a non-finite float is spelled out, floats keep every digit."""
    if isinstance(value, float):
        return repr(float(value)) if math.isfinite(value) else nonfinite(value)
    return "" if value is None else value


def print_json(obj: Any) -> None:
    sys.stdout.write(dumps(obj) + "\n")
    sys.stdout.flush()


def fmt(value: Any) -> str:
    """One table cell: numbers as `numbers.cell`, times to the second, anything else made inert."""
    return cell(value)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, out=None) -> None:
    (out or sys.stdout).write("".join(line + "\n" for line in table_lines(headers, rows)))


def info(message: str) -> None:
    """Progress and notes go to stderr so stdout stays clean for pipes and --json."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
