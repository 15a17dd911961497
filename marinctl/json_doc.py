"""The contract's JSON, one encoder for the CLI's `--json` and the Python API's documents.

JSON has no NaN or Inf: a non-finite value is spelled as W&B's own JSON exports spell it
("NaN", "Infinity", "-Infinity"), so that `null` keeps meaning "no value" (README,
Values and keys). Times are ISO text, numpy values plain numbers, and what the encoder leaves
raw that a terminal would obey is escaped (`text.json_safe`). `plain` is the same document
as Python objects: exactly what `json.loads` gives a script that read the `--json` output.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime
from typing import Any

from marinctl.text import json_safe

__all__ = ["dumps", "nonfinite", "plain"]


def nonfinite(value: float) -> str:
    """A non-finite float as a string: "NaN", "Infinity" or "-Infinity"."""
    if math.isnan(value):
        return "NaN"
    return "Infinity" if value > 0 else "-Infinity"


def _default(obj: Any) -> Any:
    if isinstance(obj, (datetime, date)):
        return obj.isoformat()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    return str(obj)


def _clean(obj: Any) -> Any:
    """Non-finite floats spelled out, so the output parses and `null` still means no value."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return nonfinite(obj)
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [_clean(v) for v in obj]
    if hasattr(obj, "tolist") and not isinstance(obj, (str, bytes)):   # numpy arrays and scalars
        return _clean(obj.tolist())
    return obj


def dumps(obj: Any) -> str:
    """`obj` as the contract's JSON text."""
    return json_safe(json.dumps(_clean(obj), default=_default, ensure_ascii=False, allow_nan=False))


def plain(obj: Any) -> Any:
    """`obj` as a reader of its JSON text gets it: dicts, lists, str, int, float, bool, None."""
    return json.loads(dumps(obj))
