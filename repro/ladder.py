"""Marin's published ladder table (`rungs.json`, beside this file): one row per rung.

The same file is what marinctl's `ladder` reads; this is repro's own reader, so repro needs
nothing from marinctl. Rows merge the settings every rung shares (`shared`) with their own.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from repro.errors import UsageError


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    return json.loads(resources.files("repro").joinpath("rungs.json").read_text())


def rungs() -> list[dict[str, Any]]:
    t = table()
    return [{**t["shared"], **r} for r in t["rungs"]]


def rung(name: str) -> dict[str, Any]:
    """A rung by alias (`rung1`, `hero`) or width name (`d768`)."""
    for r in rungs():
        if name in (r["rung"], r["name"]):
            return r
    known = ", ".join(f"{r['rung']} ({r['name']})" for r in rungs())
    raise UsageError(f"unknown rung {name!r} (known: {known})", "try: python -m repro.train rung1 --cpu --dry-run")
