"""The `alerts` table: alerts fired while following, one per run, cause and episode, and their delivery.

An alert's identity is (run uid, cause, episode start). Detection re-scores the live edge at
every pass, so an incident's first step can move by a row or two as it grows: `episode_of`
finds a stored alert of the same run and cause whose span lies within `gap` steps of a new
one, and the pass extends that alert instead of firing again. A check and an insert in one
transaction cannot interleave with another follower's: DuckDB lets one process at a time open
the file read-write, and a DuckLake's writers hold its writer lock (store/lake.py); on the
embedded file the UNIQUE key stands behind that too.

Delivery is per sink (`alert_deliveries`): each sink's row says whether that sink accepted
the alert, and at most one process at a time delivers it there — the follower that holds the
row's claim (`claimed_by`, `claimed_until`, renewed at each try); a row whose claim lapsed (its
follower stopped) is claimed by the next follower with that sink. The alert's own `tries`,
`last_error`, `delivered_at` and `delivered_to` add its sinks up.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable, Sequence

from marinctl.store import Connection, dialect, first

_FIELDS = ("alert_id", "run_uid", "cause", "episode_start", "episode_end", "step", "metric", "kind", "cause_class",
           "severity", "title", "summary", "command", "details", "fired_at", "delivered_at", "delivered_to", "tries",
           "last_error", "priority", "acked_at")
_SELECT = ", ".join(f"a.{f}" for f in _FIELDS) + ", r.run_id, r.name"
_WRITTEN = ("run_uid", "cause", "episode_start", "episode_end", "step", "metric", "kind", "cause_class", "severity",
            "title", "summary", "command", "details", "priority")


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


def insert(con: Connection, alert: dict[str, Any]) -> int:
    """Store a new alert (`alert` holds the written columns); returns its id. The caller has
    checked `episode_of` in the same transaction."""
    values = [json.dumps(alert.get("details") or {}, default=str) if f == "details" else alert.get(f) for f in _WRITTEN]
    alert_id = dialect.new_id(con, "alerts", "alert_id")
    con.execute(f"INSERT INTO alerts (alert_id, {', '.join(_WRITTEN)}) VALUES (?, {_marks(_WRITTEN)})",
                [alert_id, *values])
    return alert_id


def get(con: Connection, alert_ids: Sequence[int]) -> list[dict[str, Any]]:
    """Stored alerts by id (with their run's id and name), oldest first."""
    if not alert_ids:
        return []
    return _rows(con.execute(f"SELECT {_SELECT} FROM alerts a LEFT JOIN runs r ON r.uid = a.run_uid"
                             f" WHERE a.alert_id IN ({_marks(alert_ids)}) ORDER BY a.alert_id", list(alert_ids)))


# --- delivering ----------------------------------------------------------------------------------
# One `alert_deliveries` row per (alert, sink), created by the follower that first delivers the
# alert to that sink and claimed by it; every function below keeps that one row inside the
# caller's transaction (no key constraint does: the table is DuckLake-friendly).

def add_deliveries(con: Connection, alert_id: int, sinks: Sequence[tuple[str, str]], me: str,
                   until: datetime) -> None:
    """Rows for an alert this follower just fired, one per (sink id, kind), claimed by `me`."""
    have = {r[0] for r in con.execute("SELECT sink FROM alert_deliveries WHERE alert_id = ?", [alert_id]).fetchall()}
    for sink, kind in sinks:
        if sink not in have:
            con.execute("INSERT INTO alert_deliveries (alert_id, sink, kind, tries, claimed_by, claimed_until)"
                        " VALUES (?, ?, ?, 0, ?, ?)", [alert_id, sink, kind, me, until])


def claim_pending(con: Connection, run_uids: Sequence[str], sinks: Sequence[tuple[str, str]], me: str,
                  until: datetime, fired_since: datetime, *, gone: Callable[[str], bool] = lambda holder: False,
                  takes: Callable[[str, dict[str, Any]], bool] = lambda sink, alert: True,
                  ) -> list[tuple[dict[str, Any], list[str]]]:
    """What these sinks (sink id, kind) still owe the runs' alerts fired since `fired_since` and
    not acknowledged: for each alert, the sinks that take it (`takes(sink, alert)`: its priority
    reaches theirs), have not accepted it, and that no live claim of another follower holds (nor
    `me`: it is delivering them already), claimed for `me` until `until`. Oldest first. A claim
    is live until its time ends, unless `gone(holder)` says its holder has stopped. An alert some
    sink accepted before deliveries were kept per sink (no rows) counts as sent."""
    if not run_uids or not sinks:
        return []
    cand = con.execute(
        f"SELECT a.alert_id, a.delivered_at IS NOT NULL, count(d.alert_id) FROM alerts a"
        f" LEFT JOIN alert_deliveries d ON d.alert_id = a.alert_id"
        f" WHERE a.run_uid IN ({_marks(run_uids)}) AND a.fired_at >= ? AND a.acked_at IS NULL"
        f" GROUP BY a.alert_id, a.delivered_at ORDER BY a.alert_id", [*run_uids, fired_since]).fetchall()
    ids = [int(aid) for aid, sent, rows in cand if not (sent and rows == 0)]
    if not ids:
        return []
    rows = {(int(a), s): (d, by, till) for a, s, d, by, till in con.execute(
        f"SELECT alert_id, sink, delivered_at, claimed_by, claimed_until FROM alert_deliveries"
        f" WHERE alert_id IN ({_marks(ids)})", ids).fetchall()}
    now = first(con.execute("SELECT current_timestamp"))[0]
    alerts = {a["alert_id"]: a for a in get(con, ids)}
    owed: dict[int, list[str]] = {}
    for aid in ids:
        for sink, kind in sinks:
            if aid not in alerts or not takes(sink, alerts[aid]):
                continue
            row = rows.get((aid, sink))
            if row is None:
                con.execute("INSERT INTO alert_deliveries (alert_id, sink, kind, tries, claimed_by, claimed_until)"
                            " VALUES (?, ?, ?, 0, ?, ?)", [aid, sink, kind, me, until])
            else:
                done, by, till = row
                if done is not None or by == me or (by is not None and till is not None and till >= now
                                                    and not gone(by)):
                    continue
                con.execute("UPDATE alert_deliveries SET claimed_by = ?, claimed_until = ? WHERE alert_id = ?"
                            " AND sink = ?", [me, until, aid, sink])
            owed.setdefault(aid, []).append(sink)
    return [(alerts[aid], owed[aid]) for aid in sorted(owed)]


def tried(con: Connection, alert_id: int, sink: str, kind: str, error: str | None, me: str, until: datetime,
          receipt: str | None = None) -> None:
    """One try of one sink (`error`: why it failed, None when the sink accepted the alert; `receipt`:
    what stops the sink's repeats of it): the sink's row counts it and renews the claim; the alert's
    own columns add it up (tries, the last error, the first acceptance and the kinds of the sinks
    that accepted it)."""
    found = first(con.execute("SELECT count(*) FROM alert_deliveries WHERE alert_id = ? AND sink = ?", [alert_id, sink]))
    if not found[0]:
        con.execute("INSERT INTO alert_deliveries (alert_id, sink, kind, tries, claimed_by, claimed_until)"
                    " VALUES (?, ?, ?, 0, ?, ?)", [alert_id, sink, kind, me, until])
    con.execute("UPDATE alert_deliveries SET tries = tries + 1, tried_at = current_timestamp,"
                " last_error = CASE WHEN ? IS NULL THEN last_error ELSE ? END,"
                " delivered_at = CASE WHEN ? IS NULL THEN coalesce(delivered_at, current_timestamp) ELSE delivered_at END,"
                " receipt = coalesce(?, receipt), claimed_by = ?, claimed_until = ? WHERE alert_id = ? AND sink = ?",
                [error, error, error, receipt, me, until, alert_id, sink])
    con.execute("UPDATE alerts SET tries = tries + 1, last_error = coalesce(?, last_error) WHERE alert_id = ?",
                [error, alert_id])
    if error is None:
        con.execute("UPDATE alerts SET delivered_at = coalesce(delivered_at, current_timestamp),"
                    " delivered_to = CASE WHEN delivered_to IS NULL THEN ?"
                    " WHEN list_contains(string_split(delivered_to, ','), ?) THEN delivered_to"
                    " ELSE delivered_to || ',' || ? END WHERE alert_id = ?",
                    [kind, kind, kind, alert_id])


def deliveries(con: Connection, alert_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each alert's deliveries, sink by sink (kind, tries, last error, when accepted)."""
    if not alert_ids:
        return {}
    out: dict[int, list[dict[str, Any]]] = {}
    cur = con.execute(f"SELECT alert_id, sink, kind, tries, last_error, tried_at, delivered_at, receipt IS NOT NULL AS"
                      f" repeats, cancelled_at FROM alert_deliveries"
                      f" WHERE alert_id IN ({_marks(alert_ids)}) ORDER BY alert_id, kind, sink", list(alert_ids))
    for d in _rows(cur):
        out.setdefault(int(d.pop("alert_id")), []).append(d)
    return out


def acked(con: Connection, alert_id: int) -> bool:
    """Whether `marinctl alerts ack` was run for the alert."""
    row = first(con.execute("SELECT acked_at IS NOT NULL FROM alerts WHERE alert_id = ?", [alert_id]))
    return bool(row and row[0])


def acknowledge(con: Connection, alert_id: int) -> dict[str, Any] | None:
    """Mark the alert acknowledged (the first time counts); the alert, or None when there is none."""
    con.execute("UPDATE alerts SET acked_at = coalesce(acked_at, current_timestamp) WHERE alert_id = ?", [alert_id])
    got = get(con, [alert_id])
    return got[0] if got else None


def receipts(con: Connection, alert_id: int) -> list[tuple[str, str, str]]:
    """(sink, kind, receipt) of the alert's deliveries that repeat until cancelled and are not yet."""
    return [(s, k, r) for s, k, r in con.execute(
        "SELECT sink, kind, receipt FROM alert_deliveries WHERE alert_id = ? AND receipt IS NOT NULL"
        " AND cancelled_at IS NULL ORDER BY sink", [alert_id]).fetchall()]


def cancelled(con: Connection, alert_id: int, sink: str) -> None:
    """A sink's repeats of the alert were stopped."""
    con.execute("UPDATE alert_deliveries SET cancelled_at = current_timestamp WHERE alert_id = ? AND sink = ?",
                [alert_id, sink])


def since(con: Connection, run_uids: Sequence[str], after: datetime) -> dict[str, int]:
    """How many alerts each of these runs fired after `after` (a digest's count)."""
    if not run_uids:
        return {}
    return {u: int(n) for u, n in con.execute(
        f"SELECT run_uid, count(*) FROM alerts WHERE run_uid IN ({_marks(run_uids)}) AND fired_at > ?"
        " GROUP BY run_uid", [*run_uids, after]).fetchall()}


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
    """What an alert pass reads of each run: pk, ids, name, source, state, heartbeat, last step, tags,
    group, and its fork parent (entity, project, parent, fork step: its lineage)."""
    if not run_uids:
        return []
    cur = con.execute("SELECT run_pk, uid, run_id, name, source, state, heartbeat_at, last_step, created_at, tags,"
                      " run_group, entity, project, fork_parent, fork_step"
                      f" FROM runs WHERE uid IN ({_marks(run_uids)}) ORDER BY run_pk", list(run_uids))
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
