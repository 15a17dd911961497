"""Reads behind the views: which keys hold data, step ranges, newest values, markers, run rows.

The chart grid, the header, explain's context and the sidebar ask these small questions many
times a second while `watch` is up. Each is one key-filtered query, so DuckDB's zone maps skip
the row groups of other keys and runs even at hero scale (84M values). Whole series and
envelopes come from `store.metrics` (`series`, `downsample_many`).
"""

from __future__ import annotations

from typing import Any, Sequence

import duckdb

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
    ids = M.key_ids(con, keys) if keys else {}
    if not ids or not segments:
        return {}
    names = {v: k for k, v in ids.items()}
    where, params = M.segment_filter(segments)
    rows = con.execute(
        f"SELECT key_id, max(step), arg_max(value, step) FROM metrics WHERE key_id IN ({_marks(ids)})"
        f" AND isfinite(value) AND step >= ? AND {where} GROUP BY key_id",
        [*ids.values(), since if since is not None else -(2 ** 62), *params]).fetchall()
    return {names[k]: (int(s), float(v)) for k, s, v in rows}


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
