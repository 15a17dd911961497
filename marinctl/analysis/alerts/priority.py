"""An alert's priority: who should be woken for it, on the scale Marin's hero monitor pages on.

Four levels, lowest first: `low` (a digest, a note), `normal` (look today), `high` (look now),
`emergency` (wake someone: a phone repeats it until `marinctl alerts ack`). Every alert has one:
a rule says its own, and the built-in findings map from their severity — high → high,
medium → normal, low → low. A sink takes alerts from its `min_level` up.
"""

from __future__ import annotations

LEVELS = ("low", "normal", "high", "emergency")
_FROM_SEVERITY = {"high": "high", "medium": "normal", "low": "low"}
_TO_SEVERITY = {"emergency": "high", "high": "high", "normal": "medium", "low": "low"}


def rank(level: str) -> int:
    """0 (low) … 3 (emergency)."""
    return LEVELS.index(level)


def from_severity(severity: str | None) -> str:
    """The priority a built-in finding of this severity gets (normal when unknown)."""
    return _FROM_SEVERITY.get(severity or "", "normal")


def severity_of(level: str) -> str:
    """The severity (high | medium | low) that goes with a priority, for a rule that names only the priority."""
    return _TO_SEVERITY[level]


def of(alert: dict) -> str:
    """A stored alert's priority (one fired before priorities existed: its severity's)."""
    return alert.get("priority") or from_severity(alert.get("severity"))


def at_least(level: str, minimum: str) -> bool:
    """Whether an alert of `level` reaches a sink that takes `minimum` and up."""
    return rank(level) >= rank(minimum)
