"""The `anomalies` table: what analysis/detect/detectors.py found, per run and step.

Detection re-scores a window at each pass, so writing is "replace everything this run
holds from step N on (except the kinds that record history itself, like `rewind`) with
what was found"; `clear` voids detections when the history under them changed.
"""

from __future__ import annotations

import json
import math
from typing import Any, Sequence

import numpy as np

from marinctl.domain import Anomaly
from marinctl.store import Connection, first

_INSERT = "INSERT INTO anomalies (run_pk, step, metric, kind, score, cause_class, details) VALUES (?, ?, ?, ?, ?, ?, ?)"


def _finite(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def _json_default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return _finite(float(o))
    return str(o)


def _row(a: Anomaly) -> list[Any]:
    return [a.run_pk, a.step, a.metric, a.kind, _finite(a.score), a.cause_class,
            json.dumps(a.details, default=_json_default)]


def _not_kinds(keep: Sequence[str]) -> tuple[str, list[str]]:
    if not keep:
        return "", []
    return f" AND kind NOT IN ({','.join('?' * len(keep))})", list(keep)


def insert(con: Connection, found: Sequence[Anomaly]) -> None:
    if found:
        con.executemany(_INSERT, [_row(a) for a in found])


def remove(con: Connection, gone: Sequence[Anomaly]) -> None:
    """Delete the stored detections at each one's run, step, metric and kind (replaced by another kind)."""
    for a in gone:
        con.execute("DELETE FROM anomalies WHERE run_pk = ? AND step = ? AND metric = ? AND kind = ?",
                    [a.run_pk, a.step, a.metric, a.kind])


def restore(con: Connection, found: Sequence[Anomaly]) -> None:
    """Store each detection in place of the one a run holds at the same step, metric and kind
    (a window finding that grew since an earlier pass stored it)."""
    for a in found:
        con.execute("DELETE FROM anomalies WHERE run_pk = ? AND step = ? AND metric = ? AND kind = ?",
                    [a.run_pk, a.step, a.metric, a.kind])
    insert(con, found)


def clear(con: Connection, run_pk: int, from_step: int | None = None, keep_kinds: Sequence[str] = ()) -> None:
    """Delete a run's detections (from `from_step` on when given), keeping `keep_kinds`."""
    extra, params = _not_kinds(keep_kinds)
    step = "" if from_step is None else " AND step >= ?"
    con.execute(f"DELETE FROM anomalies WHERE run_pk = ?{step}{extra}",
                [run_pk, *([] if from_step is None else [from_step]), *params])


def replace_from(con: Connection, run_pk: int, from_step: int, found: Sequence[Anomaly],
                 keep_kinds: Sequence[str] = ("rewind",)) -> int:
    """Make the run hold exactly `found` (its own, at steps >= from_step) there; returns how many are new."""
    extra, params = _not_kinds(keep_kinds)
    before = first(con.execute(f"SELECT count(*) FROM anomalies WHERE run_pk = ? AND step >= ?{extra}",
                               [run_pk, from_step, *params]))[0]
    clear(con, run_pk, from_step, keep_kinds)
    mine = [a for a in found if a.run_pk == run_pk and a.step >= from_step]
    insert(con, mine)
    return max(0, len(mine) - before)


# --- reading ---------------------------------------------------------------------------------

def stored(con: Connection, target, lo: int | None = None, hi: int | None = None,
           kinds: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Stored anomalies of a lineage target (each run's within its segment), by step; only `kinds` when given."""
    out = []
    for run, (pk, slo, shi) in zip(target.runs, target.segments):
        sql = "SELECT step, metric, kind, score, cause_class, details FROM anomalies WHERE run_pk = ?"
        params: list[Any] = [pk]
        if kinds:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params += list(kinds)
        for cond, val in (("step >= ?", slo), ("step < ?", shi), ("step >= ?", lo), ("step <= ?", hi)):
            if val is not None:
                sql += f" AND {cond}"
                params.append(val)
        for step, metric, kind, score, cause, details in con.execute(sql, params).fetchall():
            out.append({"run": run["run_id"], "run_pk": pk, "step": int(step), "metric": metric, "kind": kind,
                        "score": score, "cause_class": cause,
                        "details": json.loads(details) if isinstance(details, str) else (details or {})})
    return sorted(out, key=lambda a: (a["step"], a["metric"], a["kind"]))


def of_run(con: Connection, run_pk: int, kinds: Sequence[str], below: int) -> list[Anomaly]:
    """A run's stored detections of `kinds` at steps below `below`, as Anomalies."""
    if not kinds:
        return []
    rows = con.execute(f"SELECT step, metric, kind, score, cause_class, details FROM anomalies WHERE run_pk = ?"
                       f" AND step < ? AND kind IN ({','.join('?' * len(kinds))}) ORDER BY step",
                       [run_pk, below, *kinds]).fetchall()
    return [Anomaly(run_pk, int(step), metric, kind, score if score is not None else float("nan"), cause,
                    json.loads(details) if isinstance(details, str) else (details or {}))
            for step, metric, kind, score, cause, details in rows]


def in_range(con: Connection, run_pks: Sequence[int], lo: int, hi: int) -> list[tuple[int, str, str, float | None]]:
    """(step, metric, kind, score) of the runs' detections at steps lo..hi, by step (chart markers)."""
    if not run_pks:
        return []
    rows = con.execute(f"SELECT step, metric, kind, score FROM anomalies WHERE run_pk IN ({','.join('?' * len(run_pks))})"
                       " AND step BETWEEN ? AND ? ORDER BY step", [*run_pks, lo, hi]).fetchall()
    return [(int(s), m, k, sc) for s, m, k, sc in rows]
