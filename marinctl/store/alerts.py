"""The `alerts` table: alerts fired while following, one per run, cause and episode, and their delivery.

An alert's identity is (run uid, cause, episode start). Detection re-scores the live edge at
every pass, so an incident's first step can move by a row or two as it grows: `episode_of`
finds a stored alert of the same run and cause whose span lies within `gap` steps of a new
one, and the pass extends that alert instead of firing again. A check and an insert in one
transaction cannot interleave with another follower's: DuckDB lets one process at a time open
the file read-write, and a DuckLake's writers hold its writer lock (store/lake.py); on the
embedded file the UNIQUE key stands behind that too.

Delivery is at most one process at a time per alert: the follower that fired it holds a
claim (`claimed_by`, `claimed_until`, renewed at each try); an undelivered alert whose claim
lapsed (its follower stopped) is claimed by the next follower of its run.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Sequence

from marinctl.store import Connection, dialect, first

_FIELDS = ("alert_id", "run_uid", "cause", "episode_start", "episode_end", "step", "metric", "kind", "cause_class",
           "severity", "title", "summary", "command", "details", "fired_at", "delivered_at", "delivered_to", "tries",
           "last_error")
_SELECT = ", ".join(f"a.{f}" for f in _FIELDS) + ", r.run_id, r.name"
_WRITTEN = ("run_uid", "cause", "episode_start", "episode_end", "step", "metric", "kind", "cause_class", "severity",
            "title", "summary", "command", "details")


def _rows(cur) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    out = []
    for row in cur.fetchall():
        d = dict(zip(cols, row))
        if isinstance(d.get("details"), str):
            d["details"] = json.loads(d["details"])
        out.append(d)
    return out


def _marks(items: Sequence[Any]) -> str:
    return ",".join("?" * len(items))


# --- firing --------------------------------------------------------------------------------------

def episode_of(con: Connection, run_uid: str, cause: str, start: int, end: int, gap: int) -> tuple[int, int] | None:
    """(alert_id, episode_end) of a stored alert of this run and cause whose episode lies within
    `gap` steps of [start, end] (gap 0: the same start only), else None."""
    if gap <= 0:
        row = first(con.execute("SELECT alert_id, episode_end FROM alerts WHERE run_uid = ? AND cause = ?"
                                " AND episode_start = ?", [run_uid, cause, start]))
    else:
        row = first(con.execute("SELECT alert_id, episode_end FROM alerts WHERE run_uid = ? AND cause = ?"
                                " AND episode_start <= ? AND episode_end >= ? ORDER BY episode_end DESC LIMIT 1",
                                [run_uid, cause, end + gap, start - gap]))
    return (int(row[0]), int(row[1])) if row else None


def extend(con: Connection, alert_id: int, end: int) -> None:
    """An alert's episode seen to go on until `end` (never shortened)."""
    con.execute("UPDATE alerts SET episode_end = greatest(episode_end, ?) WHERE alert_id = ?", [end, alert_id])


def insert(con: Connection, alert: dict[str, Any], *, claimed_by: str | None = None,
           claimed_until: datetime | None = None) -> int:
    """Store a new alert (`alert` holds the written columns); returns its id. The caller has
    checked `episode_of` in the same transaction."""
    values = [json.dumps(alert.get("details") or {}, default=str) if f == "details" else alert.get(f) for f in _WRITTEN]
    alert_id = dialect.new_id(con, "alerts", "alert_id")
    con.execute(f"INSERT INTO alerts (alert_id, {', '.join(_WRITTEN)}, claimed_by, claimed_until)"
                f" VALUES (?, {_marks(_WRITTEN)}, ?, ?)", [alert_id, *values, claimed_by, claimed_until])
    return alert_id


def get(con: Connection, alert_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Stored alerts by id (with their run's id and name), oldest first."""
    if not alert_ids:
        return []
    return _rows(con.execute(f"SELECT {_SELECT} FROM alerts a LEFT JOIN runs r ON r.uid = a.run_uid"
                             f" WHERE a.alert_id IN ({_marks(alert_ids)}) ORDER BY a.alert_id", list(alert_ids)))


# --- delivering ----------------------------------------------------------------------------------

def claim_pending(con: Connection, run_uids: Sequence[str], me: str, until: datetime,
                  fired_since: datetime) -> list[dict[str, Any]]:
    """Undelivered alerts of these runs fired since `fired_since` that no live claim holds (and
    that `me` is not delivering already): claimed for `me` until `until`, returned oldest first."""
    if not run_uids:
        return []
    ids = [r[0] for r in con.execute(
        f"SELECT alert_id FROM alerts WHERE delivered_at IS NULL AND run_uid IN ({_marks(run_uids)})"
        " AND fired_at >= ? AND (claimed_by IS NULL OR claimed_until IS NULL OR claimed_until < current_timestamp)"
        " AND coalesce(claimed_by, '') <> ?",
        [*run_uids, fired_since, me]).fetchall()]
    if ids:
        con.execute(f"UPDATE alerts SET claimed_by = ?, claimed_until = ? WHERE alert_id IN ({_marks(ids)})",
                    [me, until, *ids])
    return get(con, ids)


def tried(con: Connection, alert_id: int, error: str | None, me: str, until: datetime) -> None:
    """One delivery try made (`error`: why it failed, None when it was accepted); the claim renewed."""
    con.execute("UPDATE alerts SET tries = tries + 1, last_error = coalesce(?, last_error), claimed_by = ?,"
                " claimed_until = ? WHERE alert_id = ?", [error, me, until, alert_id])


def delivered(con: Connection, alert_id: int, sink_kind: str) -> None:
    """A sink of kind `sink_kind` accepted the alert (the first acceptance sets `delivered_at`)."""
    con.execute("UPDATE alerts SET delivered_at = coalesce(delivered_at, current_timestamp),"
                " delivered_to = CASE WHEN delivered_to IS NULL THEN ?"
                " WHEN list_contains(string_split(delivered_to, ','), ?) THEN delivered_to"
                " ELSE delivered_to || ',' || ? END WHERE alert_id = ?",
                [sink_kind, sink_kind, sink_kind, alert_id])


def release(con: Connection, me: str) -> None:
    """This follower stops: its claims on undelivered alerts lapse at once (the next follower takes them)."""
    con.execute("UPDATE alerts SET claimed_until = NULL, claimed_by = NULL WHERE claimed_by = ? AND delivered_at IS NULL",
                [me])


# --- reading -------------------------------------------------------------------------------------

def listed(con: Connection, run_uids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Fired alerts (of these runs, when given), newest first."""
    where, params = "", []
    if run_uids is not None:
        if not run_uids:
            return []
        where, params = f" WHERE a.run_uid IN ({_marks(run_uids)})", list(run_uids)
    return _rows(con.execute(f"SELECT {_SELECT} FROM alerts a LEFT JOIN runs r ON r.uid = a.run_uid{where}"
                             " ORDER BY a.fired_at DESC, a.alert_id DESC", params))


def marks(con: Connection, run_uids: Sequence[str], lo: int, hi: int) -> list[tuple[int, str, str]]:
    """(step, metric, title) of the runs' alerts on a metric at steps lo..hi, by step (chart markers)."""
    if not run_uids:
        return []
    rows = con.execute(f"SELECT step, metric, title FROM alerts WHERE run_uid IN ({_marks(run_uids)})"
                       " AND metric IS NOT NULL AND step BETWEEN ? AND ? ORDER BY step, alert_id",
                       [*run_uids, lo, hi]).fetchall()
    return [(int(s), m, t) for s, m, t in rows]


def recent(con: Connection, run_uids: Sequence[str], limit: int = 20) -> list[dict[str, Any]]:
    """The runs' newest alerts (what a watching screen says when new), oldest of them first."""
    if not run_uids:
        return []
    rows = _rows(con.execute(f"SELECT {_SELECT} FROM alerts a LEFT JOIN runs r ON r.uid = a.run_uid"
                             f" WHERE a.run_uid IN ({_marks(run_uids)}) ORDER BY a.alert_id DESC LIMIT ?",
                             [*run_uids, limit]))
    return rows[::-1]


def run_facts(con: Connection, run_uids: Sequence[str]) -> list[dict[str, Any]]:
    """What an alert pass reads of each run: pk, ids, name, source, state, heartbeat, last step, tags, group."""
    if not run_uids:
        return []
    cur = con.execute("SELECT run_pk, uid, run_id, name, source, state, heartbeat_at, last_step, created_at, tags,"
                      f" run_group FROM runs WHERE uid IN ({_marks(run_uids)}) ORDER BY run_pk", list(run_uids))
    return _rows(cur)


def local_uids(con: Connection, run_ids: Sequence[str]) -> list[str]:
    """The uids of local (or repro) runs with these run ids: what a `.wandb` follower names."""
    if not run_ids:
        return []
    return [r[0] for r in con.execute(f"SELECT uid FROM runs WHERE source <> 'wandb' AND run_id IN ({_marks(run_ids)})",
                                      list(run_ids)).fetchall()]


def run_ref_is_unique(con: Connection, run_id: str) -> bool:
    """Whether a bare run id names one stored run (else commands need its uid)."""
    return first(con.execute("SELECT count(*) FROM runs WHERE run_id = ? OR name = ?", [run_id, run_id]))[0] == 1
