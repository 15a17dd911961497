"""The `events` table: GitHub/logbook entries and console lines, and their place on a run's steps.

Writers: `upsert` (one GitHub or logbook event; stable ids make a rewrite an update, and
a commit seen through two paths gains the path instead of a duplicate), `put_run_note` (what a
sync noted about a run at a step: a resumed segment, a rewind), `remove_comments_except`
(comments deleted on GitHub), `write_console`
(a window of `.wandb` console lines in bulk) and `set_alignment` (what analysis/events/align.py
decided). Readers return raw text: printing it goes through `marinctl.text`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Iterable, Sequence

from marinctl.domain import Event
from marinctl.store import engine
from marinctl.store import Connection, first

_COLS = ("source", "kind", "time", "title", "author", "url", "body")


def _fields(raw: Any) -> dict[str, Any]:
    return json.loads(raw) if isinstance(raw, str) else (raw or {})


# --- writing ---------------------------------------------------------------------------------

def upsert(con: Connection, ev: Event) -> bool:
    """Insert or update one event; True when it was new or its content changed."""
    row = first(con.execute(f"SELECT {', '.join(_COLS)}, fields FROM events WHERE event_id = ?", [ev.event_id]))
    new = [ev.source, ev.kind, ev.time, ev.title, ev.author, ev.url, ev.body]
    if row is None:
        con.execute(
            f"INSERT INTO events (event_id, {', '.join(_COLS)}, fields) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [ev.event_id, *new, json.dumps(ev.fields)],
        )
        return True
    old_fields = _fields(row[-1])
    merged = dict(old_fields)
    for k, v in ev.fields.items():
        merged[k] = sorted(set(old_fields.get(k, [])) | set(v)) if k == "paths" else v
    old = list(row[:-1])
    if old[2] is not None and new[2] is not None:
        old[2] = old[2].astimezone(timezone.utc)
    if old == new and merged == old_fields:
        return False
    con.execute(
        f"UPDATE events SET {', '.join(c + ' = ?' for c in _COLS)}, fields = ? WHERE event_id = ?",
        [*new, json.dumps(merged), ev.event_id],
    )
    return True


def put_run_note(con: Connection, ev: Event) -> None:
    """An event the sync itself noted about a run, placed on its run and step (a resumed
    segment, a rewind); written again with the same id it is replaced, never doubled."""
    con.execute("DELETE FROM events WHERE event_id = ?", [ev.event_id])
    con.execute(
        "INSERT INTO events (event_id, source, kind, time, title, author, url, body, run_uid, step, fields)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [ev.event_id, ev.source, ev.kind, ev.time, ev.title, ev.author, ev.url, ev.body, ev.run_uid, ev.step,
         json.dumps(ev.fields)])


def remove_comments_except(con: Connection, prefix: str, keep: Sequence[str]) -> int:
    """Remove the events whose id starts with `prefix` (an issue's comments) other than `keep`:
    the comments GitHub no longer lists were deleted there. Returns how many went."""
    import pyarrow as pa

    engine.register(con, "_keep", pa.table({"event_id": pa.array(list(keep), pa.string())}))
    try:
        gone = con.execute("SELECT count(*) FROM events WHERE starts_with(event_id, ?)"
                           " AND event_id NOT IN (SELECT event_id FROM _keep)", [prefix]).fetchall()[0][0]
        if gone:
            con.execute("DELETE FROM events WHERE starts_with(event_id, ?)"
                        " AND event_id NOT IN (SELECT event_id FROM _keep)", [prefix])
    finally:
        con.unregister("_keep")
    return gone


def write_console(con: Connection, uid: str, lines: Sequence[Event]) -> None:
    """Console lines of one run, in bulk (insert or replace by event id)."""
    import pyarrow as pa

    tbl = pa.table({
        "event_id": [e.event_id for e in lines],
        "time": pa.array([e.time for e in lines], pa.timestamp("us", tz="UTC")),
        "title": [e.title for e in lines],
        "body": [e.body for e in lines],
        "step": pa.array([e.step for e in lines], pa.int64()),
        "fields": [json.dumps(e.fields) for e in lines],
    })
    engine.register(con, "_ev", tbl)
    try:
        con.execute("DELETE FROM events WHERE event_id IN (SELECT event_id FROM _ev)")
        con.execute(
            "INSERT INTO events (event_id, source, kind, time, title, author, url, body, run_uid,"
            " step, fields) SELECT event_id, 'local', 'console', time, title, NULL, NULL, body, ?, step,"
            " CAST(fields AS JSON) FROM _ev", [uid])
    finally:
        con.unregister("_ev")


def set_alignment(con: Connection, updates: Iterable[tuple[str, str | None, int | None, dict[str, Any]]]) -> int:
    """Write (event_id, run_uid, step, fields) decided by the aligner; returns rows changed."""
    rows = [[uid, step, json.dumps(fields), eid] for eid, uid, step, fields in updates]
    if rows:
        con.executemany("UPDATE events SET run_uid = ?, step = ?, fields = ? WHERE event_id = ?", rows)
    return len(rows)


# --- reading ---------------------------------------------------------------------------------

def to_align(con: Connection) -> list[tuple[str, datetime | None, str | None, str | None, str | None, int | None, dict]]:
    """(event_id, time, title, body, run_uid, step, fields) of every GitHub and logbook event."""
    rows = con.execute("SELECT event_id, time, title, body, run_uid, step, fields FROM events"
                       " WHERE source IN ('github', 'logbook')").fetchall()
    return [(*r[:6], _fields(r[6])) for r in rows]


def any_to_align(con: Connection) -> bool:
    """Is there any GitHub or logbook event to align (a sync without them skips the aligner)?"""
    return bool(con.execute("SELECT EXISTS (SELECT 1 FROM events WHERE source IN ('github', 'logbook'))").fetchall()[0][0])


def issue_fields(con: Connection, repo: str) -> list[dict[str, Any]]:
    """The stored `fields` of every issue and pull request of a repository."""
    rows = con.execute("SELECT fields FROM events WHERE kind IN ('issue', 'pull') AND event_id LIKE ?",
                       [f"github:{repo}#%"]).fetchall()
    return [_fields(raw) for (raw,) in rows]


def select(con: Connection, uids: Sequence[str] | None = None, around: int | None = None, window: int = 2000,
           kinds: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Events (with their run's id) aligned to `uids` and/or within `window` steps of `around`.

    Ordered by step when `around` is given, else by time.
    """
    where, params = [], []
    if uids is not None:
        where.append(f"e.run_uid IN ({','.join('?' * len(uids)) or 'NULL'})")
        params += list(uids)
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
    out = []
    for eid, when, kind, title, url, run_id, step, source, author, fields in con.execute(sql, params).fetchall():
        out.append({"event_id": eid, "time": when, "kind": kind, "title": title, "url": url, "run": run_id,
                    "step": step, "source": source, "author": author, "fields": _fields(fields)})
    return out


def markers(con: Connection, uids: Sequence[str], lo: int, hi: int) -> list[tuple[int, str | None, str]]:
    """(step, title, kind) of events aligned to `uids` at steps lo..hi, by step (chart markers)."""
    if not uids:
        return []
    rows = con.execute(f"SELECT step, title, kind FROM events WHERE run_uid IN ({','.join('?' * len(uids))})"
                       " AND step BETWEEN ? AND ? ORDER BY step", [*uids, lo, hi]).fetchall()
    return [(int(s), t, k) for s, t, k in rows]


def bodies_containing(con: Connection, text: str) -> list[str]:
    """Bodies of events that contain `text` (case-insensitive), sorted."""
    rows = con.execute("SELECT body FROM events WHERE strpos(lower(body), lower(?)) > 0 ORDER BY 1", [text]).fetchall()
    return [r[0] for r in rows]
