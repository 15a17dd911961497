"""Reads behind the views: which keys hold data, step ranges, newest values, markers, run rows.

The chart grid, the header, explain's context and the sidebar ask these small questions many
times a second while `watch` is up. Each is answered from the facts stored per parquet part
(store/parts.py) where a part is read whole, and from one key-filtered query of the long rows,
whose zone maps skip the row groups of other keys and runs even at hero scale. Whole series
and envelopes come from `store.metrics` (`series`, `downsample_many`).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from marinctl.store import keys as key_names
from marinctl.store import metrics as M
from marinctl.store import scan
from marinctl.store.engine import duckdb
from marinctl.store.metrics import Segment


def _marks(items: Sequence[Any]) -> str:
    return ",".join("?" * len(items))


def _ids(ids) -> str:
    return ",".join(str(int(i)) for i in ids)


def keys_with_data(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int], keys: Sequence[str]) -> set[str]:
    """Those of `keys` that these runs logged at least once (store/keys.py)."""
    return key_names.logged(con, run_pks, keys)


def key_step_range(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment],
                   keys: Sequence[str]) -> tuple[int | None, int | None]:
    """First and last step at which any of `keys` was logged over the segments."""
    ids = list(M.key_ids(con, keys).values())
    if not ids or not segments:
        return None, None
    los, his = [], []
    pieces = scan.pieces(con, segments)
    stored = scan.part_facts(con, [p for p in pieces if p.whole], ids, "first_step, last_step")
    for p in pieces:
        if p.whole:
            rows = stored.get(p.part_id, [])
            los += [r[1] for r in rows]
            his += [r[2] for r in rows]
        else:
            with scan.relation(con, [(p.run_pk, p.a, p.b)], keys) as rel:
                lo, hi = con.execute(f"SELECT min(step), max(step) FROM {rel}").fetchall()[0]
            if lo is not None:
                los.append(lo)
                his.append(hi)
    lo, hi = con.execute(f"SELECT min(step), max(step) FROM metrics WHERE key_id IN ({_ids(ids)})"
                         f" AND {scan.long_where(segments)}").fetchall()[0]
    if lo is not None:
        los.append(lo)
        his.append(hi)
    return (int(min(los)), int(max(his))) if los else (None, None)


def last_values(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str],
                since: int | None = None) -> dict[str, tuple[int, float]]:
    """{key: (step, value)} of the newest finite value of each key (at or after `since`, if given)."""
    ids = M.key_ids(con, keys) if keys else {}
    if not ids or not segments:
        return {}
    names = {v: k for k, v in ids.items()}
    best: dict[int, tuple[int, float]] = {}

    def offer(kid, step, value) -> None:
        if step is not None and value is not None and (kid not in best or step > best[kid][0]):
            best[kid] = (int(step), float(value))

    pieces = scan.pieces(con, segments, since, None)
    stored = scan.part_facts(con, [p for p in pieces if p.covers_end], list(ids.values()),
                             "last_finite_step, last_finite")
    for p in pieces:
        if p.covers_end:   # the part's own last finite value, if it lies in the range read
            for kid, s, v in stored.get(p.part_id, []):
                if s is not None and s >= p.a:
                    offer(kid, s, v)
        else:
            with scan.relation(con, [(p.run_pk, p.a, p.b)], list(ids)) as rel:
                for kid, s, v in con.execute(f"SELECT key_id, max(step), arg_max(value, step) FROM {rel}"
                                             " WHERE isfinite(value) GROUP BY key_id").fetchall():
                    offer(kid, s, v)
    for kid, s, v in con.execute(
            f"SELECT key_id, max(step), arg_max(value, step) FROM metrics WHERE key_id IN ({_ids(ids.values())})"
            f" AND isfinite(value) AND {scan.long_where(segments, since, None)} GROUP BY key_id").fetchall():
        offer(kid, s, v)
    return {names[k]: sv for k, sv in best.items()}


def smallest_value(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int], key: str) -> float | None:
    """The smallest value of `key` over these runs (the first `_timestamp`: when a lineage started)."""
    kid = M.key_id(con, key)
    if kid is None or not run_pks:
        return None
    found = [r[0] for r in con.execute(
        f"SELECT min_value FROM part_keys WHERE key_id = {int(kid)} AND part_id IN"
        f" (SELECT part_id FROM history_parts WHERE run_pk IN ({_ids(run_pks)}))"
        f" UNION ALL SELECT min(value) FROM metrics WHERE key_id = {int(kid)} AND run_pk IN ({_ids(run_pks)})"
    ).fetchall() if r[0] is not None]
    numbers = [v for v in found if not math.isnan(v)]
    return min(numbers) if numbers else (found[0] if found else None)


def steps_with_key_prefix(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], prefix: str,
                          lo: int, hi: int) -> list[int]:
    """Steps in [lo, hi] at which any key starting with `prefix` was logged (e.g. 'eval/': eval steps)."""
    keys = [r[0] for r in con.execute("SELECT key FROM metric_keys WHERE starts_with(key, ?)", [prefix]).fetchall()]
    if not keys or not segments:
        return []
    with scan.relation(con, segments, keys, lo, hi + 1) as rel:
        rows = con.execute(f"SELECT DISTINCT step FROM {rel} ORDER BY step").fetchall()
    return [int(r[0]) for r in rows]


def moved_from_baseline(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], step: int, window: int,
                        recent: int, min_points: int = 10) -> list[tuple[str, int, float, float, int, float]]:
    """(key, step, value, baseline median, points, robust z) for every key, largest |z| first.

    Each key's newest finite value in [step - recent, step] against the median/MAD of its points in
    [step - window, that step); keys with fewer than `min_points` baseline points are left out.
    """
    if not segments:
        return []
    with scan.relation(con, segments, None, step - window, step + 1) as rel:
        return con.execute(f"""
            WITH d AS (SELECT key_id, step, value FROM {rel} WHERE isfinite(value)),
            cur AS (SELECT key_id, max(step) AS s, arg_max(value, step) AS v FROM d WHERE step >= ? GROUP BY key_id),
            base AS (SELECT d.key_id, median(d.value) AS med, mad(d.value) AS dev, count(*) AS n
                     FROM d JOIN cur USING (key_id) WHERE d.step < cur.s GROUP BY d.key_id)
            SELECT k.key, cur.s, cur.v, base.med, base.n,
                   0.6745 * (cur.v - base.med) / greatest(base.dev, abs(base.med) * 1e-6, 1e-12) AS z
            FROM cur JOIN base USING (key_id) JOIN metric_keys k USING (key_id)
            WHERE base.n >= ?
            ORDER BY abs(z) DESC, k.key
        """, [step - recent, min_points]).fetchall()


# --- the chart grid's reads -----------------------------------------------------------------

_ENVELOPE_COLUMNS = ("step_lo", "step_hi", "vmin", "vmax", "first", "last", "mean", "count", "nonfinite",
                     "step_of_max", "step_of_min")


def envelopes(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str], lo: int, hi: int,
              buckets: int) -> dict[str, M.Envelope]:
    """`metrics.downsample_many`'s envelopes (same buckets, same fields, parts and long rows alike)
    with non-finite values made NULL once in the inner select instead of a FILTER per aggregate
    (a third of the time at 390k steps × 8 keys, bench/bench_watch.py). Each bucket's `last`
    value sits at its `step_hi`: the cursor readout names the exact value logged at a bucket's
    end without another query.
    """
    ids = M.key_ids(con, keys)
    if not ids or not segments or hi <= lo:
        return {}
    width = max(1.0, (hi - lo) / max(1, int(buckets)))
    with scan.relation(con, segments, list(ids), lo, hi) as rel:
        res = con.execute(f"""
            SELECT key_id, min(step) AS step_lo, max(step) AS step_hi, min(fv) AS vmin, max(fv) AS vmax,
                   arg_min(value, step) AS first, arg_max(value, step) AS last, avg(fv) AS mean,
                   count(*) AS count, count(*) - count(fv) AS nonfinite,
                   arg_max(step, fv) AS step_of_max, arg_min(step, fv) AS step_of_min
            FROM (SELECT key_id, step, value, CASE WHEN isfinite(value) THEN value END AS fv,
                         CAST(floor((step - ?) / ?) AS BIGINT) AS b FROM {rel})
            GROUP BY key_id, b ORDER BY key_id, b
        """, [lo, width]).fetchnumpy()
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
    ids = M.key_ids(con, keys)
    if not ids or not segments:
        return {}
    names = {v: k for k, v in ids.items()}
    with scan.relation(con, segments, list(ids), since, step + 1) as rel:
        rows = con.execute(f"SELECT key_id, max(step), arg_max(value, step) FROM {rel} GROUP BY key_id").fetchall()
    return {names[k]: (int(s), float(v) if v is not None else float("nan")) for k, s, v in rows if s is not None}


def keys_of(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int]) -> list[str]:
    """Every key these runs logged, sorted (parts' key lists and long rows)."""
    return scan.run_keys(con, run_pks)


def data_version(con: duckdb.DuckDBPyConnection) -> tuple:
    """A cheap fingerprint of what a view shows: it changes when history (parts or long rows), runs,
    liveness, keys, events, anomalies, alerts or system samples change (aggregates of small tables),
    so an idle view re-reads nothing."""
    return tuple(con.execute("""
        SELECT (SELECT count(*) FROM runs), (SELECT sum(coalesce(last_step, -1)) FROM runs),
               (SELECT max(synced_at) FROM runs), (SELECT max(heartbeat_at) FROM runs),
               (SELECT string_agg(coalesce(state, ''), ',' ORDER BY run_pk) FROM runs),
               (SELECT count(*) FROM metric_keys), (SELECT count(*) FROM events),
               (SELECT count(*) FROM anomalies), (SELECT max(detected_at) FROM anomalies),
               (SELECT count(*) FROM history_parts), (SELECT max(part_id) FROM history_parts),
               (SELECT count(*) FROM system_samples), (SELECT max(fetched_at) FROM system_fetches),
               (SELECT max(alert_id) FROM alerts)
    """).fetchall()[0])


def console_tail(con: duckdb.DuckDBPyConnection, uids: Sequence[str], n: int = 40) -> list[tuple[int | None, str]]:
    """The last `n` console lines (step, text) the runs printed, oldest first: the run pane's console."""
    if not uids:
        return []
    rows = con.execute(
        f"SELECT step, coalesce(body, title) FROM events WHERE kind = 'console' AND run_uid IN ({_marks(uids)})"
        " ORDER BY time DESC NULLS LAST, step DESC NULLS LAST, event_id DESC LIMIT ?", [*uids, int(n)]).fetchall()
    return [(None if s is None else int(s), str(t or "")) for s, t in reversed(rows)]
