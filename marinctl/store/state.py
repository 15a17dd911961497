"""Resumable positions (`sync_state`): the one place each kind is read and written.

Every unit of sync work lands in one transaction together with its position, so a sync
killed at any moment resumes from the last committed one. Scopes:
- `history`:    the next W&B history step to fetch, per run uid;
- `wandb_file`: the offset past the last complete record of a `.wandb` file, its identity
  (device:inode) and what must survive between reads (pending console text, run uid, ...);
- `github`:     the ETag and paging facts of one GitHub URL, and when a spec was last checked;
- `detect`:     the last step anomaly detection scored, with its fingerprints and references.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from marinctl.store import Connection, first


@dataclass
class Position:
    """One `sync_state` row: a position, a token (ETag, file identity) and free-form extras."""

    position: int | None = None
    token: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    updated_at: datetime | None = None


def _get(con: Connection, scope: str, name: str) -> Position | None:
    row = first(con.execute("SELECT position, token, extra, updated_at FROM sync_state WHERE scope = ? AND name = ?",
                            [scope, name]))
    if row is None:
        return None
    extra = json.loads(row[2]) if isinstance(row[2], str) else (row[2] or {})
    return Position(row[0], row[1], extra, row[3])


def _put(con: Connection, scope: str, name: str, position: int | None, token: str | None = None,
         extra: dict[str, Any] | None = None) -> None:
    # a delete and an insert, not ON CONFLICT: a DuckLake has no keys to conflict on (store/dialect.py)
    con.execute("DELETE FROM sync_state WHERE scope = ? AND name = ?", [scope, name])
    con.execute(
        "INSERT INTO sync_state (scope, name, position, token, extra, updated_at)"
        " VALUES (?, ?, ?, ?, ?, current_timestamp)",
        [scope, name, position, token, None if extra is None else json.dumps(extra)],
    )


# --- W&B history watermarks --------------------------------------------------------------

def history_mark(con: Connection, uid: str) -> int | None:
    """The next history step to fetch for a run, or None before its first sync."""
    found = _get(con, "history", uid)
    return found.position if found else None


def set_history_mark(con: Connection, uid: str, next_step: int) -> None:
    _put(con, "history", uid, next_step)


# --- .wandb file positions ------------------------------------------------------------------

def file_position(con: Connection, path: str) -> Position:
    """Where reading a `.wandb` file stopped (offset 0 and no identity when never read)."""
    found = _get(con, "wandb_file", path)
    if found is None:
        return Position(0, None, {})
    found.position = found.position or 0
    return found


def save_file_position(con: Connection, path: str, pos: Position) -> None:
    _put(con, "wandb_file", path, pos.position, pos.token, pos.extra)


def last_step_in_other_files(con: Connection, run_uid: str, path: str) -> int | None:
    """The last history step other `.wandb` files of a run wrote (a resumed run has several)."""
    return first(con.execute(
        "SELECT max(CAST(json_extract(extra, '$.last_step') AS BIGINT)) FROM sync_state"
        " WHERE scope = 'wandb_file' AND name <> ? AND json_extract_string(extra, '$.run_uid') = ?",
        [path, run_uid]))[0]


# --- GitHub ETags ---------------------------------------------------------------------------

def etag(con: Connection, url: str) -> tuple[str | None, dict[str, Any]]:
    """(ETag, {next, count, per_page}) stored for a GitHub URL; (None, {}) when never fetched."""
    found = _get(con, "github", url)
    return (found.token, found.extra) if found else (None, {})


def save_etag(con: Connection, url: str, tag: str | None, extra: dict[str, Any]) -> None:
    _put(con, "github", url, extra.get("count"), tag, extra)


def checked_within(con: Connection, spec: str, seconds: float) -> bool:
    """Was this GitHub spec checked less than `seconds` ago?"""
    found = _get(con, "github", f"checked:{spec}")
    if found is None or found.updated_at is None:
        return False
    return (datetime.now(timezone.utc) - found.updated_at).total_seconds() < seconds


def mark_checked(con: Connection, spec: str) -> None:
    _put(con, "github", f"checked:{spec}", None, None, {})


# --- detection positions -------------------------------------------------------------------

def detection(con: Connection, uid: str) -> tuple[int | None, dict[str, Any]]:
    """(last step scored, {fingerprints, refs}) of a run's anomaly detection."""
    found = _get(con, "detect", uid)
    return (found.position, found.extra) if found else (None, {})


def save_detection(con: Connection, uid: str, last_step: int, memory: dict[str, Any]) -> None:
    _put(con, "detect", uid, last_step, None, memory)


def rewind_detection(con: Connection, uid: str, step: int) -> None:
    """History from `step` on was rewritten (and its rewind recorded): detection resumes just
    before it, with the fingerprints of what still stands, so it does not infer the rewind again."""
    position, memory = detection(con, uid)
    if position is None or position < step:
        return
    fingerprints = [f for f in memory.get("fingerprints") or [] if f[0] < step]
    save_detection(con, uid, step - 1, {**memory, "fingerprints": fingerprints})


def forget_detection(con: Connection, uid: str) -> None:
    con.execute("DELETE FROM sync_state WHERE scope = 'detect' AND name = ?", [uid])


def set_history_marks(con: Connection, marks: dict[str, int]) -> None:
    """`set_history_mark` for many runs in one statement: {uid: next step to fetch}."""
    if marks:
        con.execute("DELETE FROM sync_state WHERE scope = 'history' AND name IN (SELECT unnest(?::VARCHAR[]))",
                    [list(marks)])
        con.execute(
            "INSERT INTO sync_state (scope, name, position, token, extra, updated_at)"
            " SELECT 'history', t.uid, t.pos, NULL, NULL, current_timestamp"
            " FROM (SELECT unnest(?::VARCHAR[]) AS uid, unnest(?::BIGINT[]) AS pos) t",
            [list(marks), list(marks.values())])
