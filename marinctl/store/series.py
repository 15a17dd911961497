"""Reads behind the views: which keys hold data, step ranges, newest values, markers, run rows.

The chart grid, the header, explain's context and the sidebar ask these small questions many
times a second while `watch` is up. Each is one key-filtered query, so DuckDB's zone maps skip
the row groups of other keys and runs even at hero scale (84M values). Whole series and
envelopes come from `store.metrics` (`series`, `downsample_many`).
"""

from __future__ import annotations

from typing import Any, Sequence

import duckdb
import numpy as np

from marinctl.store import metrics as M
from marinctl.store.metrics import Segment


def _marks(items: Sequence[Any]) -> str:
    return ",".join("?" * len(items))


def keys_with_data(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int], keys: Sequence[str]) -> set[str]:
    """Those of `keys` that these runs logged at least once (a LIMIT 1 probe per key: a few ms each)."""
    ids = M.key_ids(con, keys)
    if not ids or not run_pks:
        return set()
    present = set()
    for key, kid in ids.items():
        if con.execute(f"SELECT 1 FROM metrics WHERE key_id = ? AND run_pk IN ({_marks(run_pks)}) LIMIT 1",
                       [kid, *run_pks]).fetchall():
            present.add(key)
    return present


def key_step_range(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment],
                   keys: Sequence[str]) -> tuple[int | None, int | None]:
    """First and last step at which any of `keys` was logged over the segments."""
    ids = list(M.key_ids(con, keys).values())
    if not ids or not segments:
        return None, None
    where, params = M.segment_filter(segments)
    row = con.execute(f"SELECT min(step), max(step) FROM metrics WHERE key_id IN ({_marks(ids)}) AND {where}",
                      [*ids, *params]).fetchall()[0]
    return row[0], row[1]


def last_values(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str],
                since: int | None = None) -> dict[str, tuple[int, float]]:
    """{key: (step, value)} of the newest finite value of each key (at or after `since`, if given)."""
    return _last(con, segments, keys, since, None, finite=True)


def _last(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str], since: int | None,
          until: int | None, *, finite: bool) -> dict[str, tuple[int, float]]:
    """{key: (step, value)} of each key's last value with since <= step <= until (finite ones only, or any)."""
    ids = M.key_ids(con, keys) if keys else {}
    if not ids or not segments:
        return {}
    names = {v: k for k, v in ids.items()}
    where, params = M.segment_filter(segments)
    rows = con.execute(
        f"SELECT key_id, max(step), arg_max(value, step) FROM metrics WHERE key_id IN ({_marks(ids)})"
        f"{' AND isfinite(value)' if finite else ''} AND step >= ? AND step <= ? AND {where} GROUP BY key_id",
        [*ids.values(), since if since is not None else -(2 ** 62), until if until is not None else 2 ** 62,
         *params]).fetchall()
    return {names[k]: (int(s), float(v) if v is not None else float("nan")) for k, s, v in rows}


def smallest_value(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int], key: str) -> float | None:
    """The smallest value of `key` over these runs (the first `_timestamp`: when a lineage started)."""
    kid = M.key_id(con, key)
    if kid is None or not run_pks:
        return None
    row = con.execute(f"SELECT min(value) FROM metrics WHERE key_id = ? AND run_pk IN ({_marks(run_pks)})",
                      [kid, *run_pks]).fetchall()
    return row[0][0] if row else None


def steps_with_key_prefix(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], prefix: str,
                          lo: int, hi: int) -> list[int]:
    """Steps in [lo, hi] at which any key starting with `prefix` was logged (e.g. 'eval/': eval steps)."""
    ids = [r[0] for r in con.execute("SELECT key_id FROM metric_keys WHERE starts_with(key, ?)", [prefix]).fetchall()]
    if not ids or not segments:
        return []
    where, params = M.segment_filter(segments)
    rows = con.execute(
        f"SELECT DISTINCT step FROM metrics WHERE key_id IN ({_marks(ids)}) AND step BETWEEN ? AND ? AND {where}"
        " ORDER BY step", [*ids, lo, hi, *params]).fetchall()
    return [int(r[0]) for r in rows]


def moved_from_baseline(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], step: int, window: int,
                        recent: int, min_points: int = 10) -> list[tuple[str, int, float, float, int, float]]:
    """(key, step, value, baseline median, points, robust z) for every key, largest |z| first.

    Each key's newest finite value in [step - recent, step] against the median/MAD of its points in
    [step - window, that step); keys with fewer than `min_points` baseline points are left out.
    """
    if not segments:
        return []
    where, params = M.segment_filter(segments)
    return con.execute(f"""
        WITH d AS (SELECT key_id, step, value FROM metrics WHERE step BETWEEN ? AND ? AND {where} AND isfinite(value)),
        cur AS (SELECT key_id, max(step) AS s, arg_max(value, step) AS v FROM d WHERE step >= ? GROUP BY key_id),
        base AS (SELECT d.key_id, median(d.value) AS med, mad(d.value) AS dev, count(*) AS n
                 FROM d JOIN cur USING (key_id) WHERE d.step < cur.s GROUP BY d.key_id)
        SELECT k.key, cur.s, cur.v, base.med, base.n,
               0.6745 * (cur.v - base.med) / greatest(base.dev, abs(base.med) * 1e-6, 1e-12) AS z
        FROM cur JOIN base USING (key_id) JOIN metric_keys k USING (key_id)
        WHERE base.n >= ?
        ORDER BY abs(z) DESC
    """, [step - window, step, *params, step - recent, min_points]).fetchall()



# --- the chart grid's reads -----------------------------------------------------------------

_ENVELOPE_COLUMNS = ("step_lo", "step_hi", "vmin", "vmax", "first", "last", "mean", "count", "nonfinite",
                     "step_of_max", "step_of_min")


def envelopes(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str], lo: int, hi: int,
              buckets: int) -> dict[str, M.Envelope]:
    """`metrics.downsample_many`'s envelopes (same buckets, same fields) in about a third of the time.

    Non-finite values become NULL once in the inner select instead of a FILTER per aggregate:
    at 390k steps × 8 keys that is ~170–230 ms instead of ~560 ms (bench/bench_watch.py).
    Each bucket's `last` value sits at its `step_hi`, which is what lets the cursor readout
    name the exact logged value at a bucket's end without another query.
    """
    ids = M.key_ids(con, keys)
    if not ids or not segments or hi <= lo:
        return {}
    width = max(1.0, (hi - lo) / max(1, int(buckets)))
    where, params = M.segment_filter(segments)
    res = con.execute(f"""
        SELECT key_id, min(step) AS step_lo, max(step) AS step_hi, min(fv) AS vmin, max(fv) AS vmax,
               arg_min(value, step) AS first, arg_max(value, step) AS last, avg(fv) AS mean,
               count(*) AS count, count(*) - count(fv) AS nonfinite,
               arg_max(step, fv) AS step_of_max, arg_min(step, fv) AS step_of_min
        FROM (SELECT key_id, step, value, CASE WHEN isfinite(value) THEN value END AS fv,
                     CAST(floor((step - ?) / ?) AS BIGINT) AS b
              FROM metrics WHERE key_id IN ({_marks(ids)}) AND step >= ? AND step < ? AND {where})
        GROUP BY key_id, b ORDER BY key_id, b
    """, [lo, width, *ids.values(), lo, hi, *params]).fetchnumpy()
    kid = np.asarray(res["key_id"])
    out: dict[str, M.Envelope] = {}
    for key, k in ids.items():
        sel = kid == k
        cols = {c: _floats(res[c][sel]) for c in _ENVELOPE_COLUMNS}
        cols["count"] = cols["count"].astype(np.int64)
        cols["nonfinite"] = cols["nonfinite"].astype(np.int64)
        out[key] = M.Envelope(**cols)
    return out


def _floats(column) -> np.ndarray:
    """A fetched column as float64 with NULL as NaN (DuckDB hands NULLs back as a masked array)."""
    if np.ma.isMaskedArray(column):
        return np.ma.filled(column.astype(np.float64), np.nan)
    return np.asarray(column, dtype=np.float64)


def values_at_or_before(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str],
                        step: int, since: int | None = None) -> dict[str, tuple[int, float]]:
    """{key: (step, value)} of each key's last logged value at or before `step` (not before `since`).

    The cursor readout's exact value: what was logged at that step, or — for a key logged
    every 10 steps — at the step before it that logged the key (the caller names that step).
    Non-finite values are returned as they are.
    """
    return _last(con, segments, keys, since, step, finite=False)


def keys_of(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int]) -> list[str]:
    """Every key these runs logged, sorted (`metrics.run_keys` without joining names to 80M rows first)."""
    if not run_pks:
        return []
    rows = con.execute(
        f"SELECT key FROM metric_keys WHERE key_id IN (SELECT DISTINCT key_id FROM metrics WHERE run_pk IN"
        f" ({_marks(run_pks)})) ORDER BY key", list(run_pks)).fetchall()
    return [r[0] for r in rows]


def data_version(con: duckdb.DuckDBPyConnection) -> tuple:
    """A cheap fingerprint of what a view shows: it changes when history, runs, liveness, keys,
    events or anomalies change (a few small-table aggregates, ~1 ms), so an idle view re-reads nothing."""
    return tuple(con.execute("""
        SELECT (SELECT count(*) FROM runs), (SELECT sum(coalesce(last_step, -1)) FROM runs),
               (SELECT max(synced_at) FROM runs), (SELECT max(heartbeat_at) FROM runs),
               (SELECT string_agg(coalesce(state, ''), ',' ORDER BY run_pk) FROM runs),
               (SELECT count(*) FROM metric_keys), (SELECT count(*) FROM events),
               (SELECT count(*) FROM anomalies), (SELECT max(detected_at) FROM anomalies)
    """).fetchall()[0])


def console_tail(con: duckdb.DuckDBPyConnection, uids: Sequence[str], n: int = 40) -> list[tuple[int | None, str]]:
    """The last `n` console lines (step, text) the runs printed, oldest first: the run pane's console."""
    if not uids:
        return []
    rows = con.execute(
        f"SELECT step, coalesce(body, title) FROM events WHERE kind = 'console' AND run_uid IN ({_marks(uids)})"
        " ORDER BY time DESC NULLS LAST, step DESC NULLS LAST, event_id DESC LIMIT ?", [*uids, int(n)]).fetchall()
    return [(None if s is None else int(s), str(t or "")) for s, t in reversed(rows)]
