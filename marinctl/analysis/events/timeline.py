"""The stored GitHub timeline as plain dicts, for `events`, `explain` and the TUI.

One selection so every reader sees the same events: those aligned to a run (for `hero`
or a fork child: every run of its lineage) and/or within `window` steps of a step.
Text fields are returned raw; printing them goes through `marinctl.text`.
"""

from __future__ import annotations

from datetime import timezone
from typing import Any

from marinctl.store import Connection
from marinctl.store import events as events_store


def query_events(con: Connection, run: str | None = None, around: int | None = None,
                 window: int = 2000, kinds: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Events as the contract's dicts (time, kind, title, url, run, step, source, …)."""
    uids = None
    if run is not None:
        from marinctl.store.lineage import resolve_target

        uids = [r["uid"] for r in resolve_target(con, run, stitched=True).runs]
    items: list[dict[str, Any]] = []
    for e in events_store.select(con, uids, around, window, kinds):
        when = e["time"]
        items.append({"time": when.astimezone(timezone.utc) if when is not None else None, "kind": e["kind"],
                      "title": e["title"], "url": e["url"], "run": e["run"], "step": e["step"], "source": e["source"],
                      "author": e["author"], "event_id": e["event_id"], "align": e["fields"].get("align"),
                      "fields": e["fields"]})
    return items
