"""The stored GitHub timeline as plain dicts, for `events`, `explain` and the TUI.

One query so every reader sees the same selection: events aligned to a run (for `hero`
or a fork child: every run of its lineage) and/or within `window` steps of a step.
Text fields are returned raw; printing them goes through `marinctl.text`.
"""

from __future__ import annotations

import json
from datetime import timezone
from typing import Any

import duckdb


def query_events(con: duckdb.DuckDBPyConnection, run: str | None = None, around: int | None = None,
                 window: int = 2000, kinds: tuple[str, ...] | None = None) -> list[dict[str, Any]]:
    """Events as the contract's dicts (time, kind, title, url, run, step, source, …)."""
    where, params = [], []
    if run is not None:
        from marinctl.store.lineage import resolve_target

        target = resolve_target(con, run, stitched=True)
        uids = [r["uid"] for r in target.runs]
        where.append(f"e.run_uid IN ({','.join('?' * len(uids))})")
        params += uids
    if around is not None:
        where.append("e.step BETWEEN ? AND ?")
        params += [around - window, around + window]
    if kinds:
        where.append(f"e.kind IN ({','.join('?' * len(kinds))})")
        params += list(kinds)
    sql = ("SELECT e.event_id, e.time, e.kind, e.title, e.url, r.run_id, e.step, e.source, e.author, e.fields"
           " FROM events e LEFT JOIN runs r ON r.uid = e.run_uid")
    if where:
        sql += " WHERE " + " AND ".join(where)
    sql += " ORDER BY e.step NULLS LAST, e.time, e.event_id" if around is not None else " ORDER BY e.time NULLS LAST, e.event_id"
    items: list[dict[str, Any]] = []
    for eid, when, kind, title, url, run_id, step, source, author, fields in con.execute(sql, params).fetchall():
        fields = json.loads(fields) if isinstance(fields, str) else (fields or {})
        items.append({"time": when.astimezone(timezone.utc) if when is not None else None, "kind": kind,
                      "title": title, "url": url, "run": run_id, "step": step, "source": source, "author": author,
                      "event_id": eid, "align": fields.get("align"), "fields": fields})
    return items
