"""Marin's published ladder table as data, shared by `ladder`, `repro` and the views.

The table lives in `repro/rungs.json` (package data of the stand-alone trainer, which reads the
same file); this module only reads it — it never imports repro's code.
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from marinctl.errors import UserError


@lru_cache(maxsize=1)
def table() -> dict[str, Any]:
    return json.loads(resources.files("repro").joinpath("rungs.json").read_text())


def rungs() -> list[dict[str, Any]]:
    """Every rung, small to large, each merged with the settings all rungs share."""
    t = table()
    return [{**t["shared"], **r} for r in t["rungs"]]


def rung(name: str) -> dict[str, Any]:
    """A rung by alias (`rung1`, `hero`) or width name (`d768`)."""
    for r in rungs():
        if name in (r["rung"], r["name"]):
            return r
    known = ", ".join(r["rung"] for r in rungs())
    raise UserError(f"unknown rung {name!r} (known: {known})", "see the ladder with `marinctl ladder`")
