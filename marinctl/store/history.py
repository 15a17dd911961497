"""Reads of the full-resolution history that analysis scans (detectors, attribution, alignment).

Each read is one SQL scan of `metrics` over lineage segments (store/lineage.py): a run's
own steps plus, for a fork child, its parents' steps up to the fork. Frames come back as
Arrow tables (key, step, value) so detection never materialises Python rows for 400k steps.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

import pyarrow as pa

from marinctl.store import Connection, first
from marinctl.store.metrics import Segment, key_id, key_ids, segment_filter

_EMPTY = pa.schema([("key", pa.string()), ("step", pa.int64()), ("value", pa.float64())])


def _on_m(segments: Sequence[Segment]) -> tuple[str, list]:
    where, params = segment_filter(segments)
    return where.replace("run_pk", "m.run_pk").replace("step", "m.step"), params


def frame(con: Connection, segments: Sequence[Segment], keys: Sequence[str], lo: int, hi: int | None) -> pa.Table:
    """Long (key, step, value) of `keys` over the segments at steps [lo, hi): one scan."""
    ids = key_ids(con, keys)
    if not ids:
        return _EMPTY.empty_table()
    where, params = _on_m(segments)
    sql = (f"SELECT k.key, m.step, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
           f" WHERE m.key_id IN ({','.join('?' * len(ids))}) AND m.step >= ?"
           + (" AND m.step < ?" if hi is not None else "") + f" AND {where}")
    params = [*ids.values(), lo, *([hi] if hi is not None else []), *params]
    return con.sql(sql, params=params).to_arrow_table()


def keys_with_prefix(con: Connection, prefix: str, exclude: Sequence[str] = ()) -> list[str]:
    """Every stored key starting with `prefix` (any run), minus `exclude`."""
    rows = con.execute("SELECT key FROM metric_keys WHERE starts_with(key, ?)", [prefix]).fetchall()
    skip = set(exclude)
    return [r[0] for r in rows if r[0] not in skip]


def first_values(con: Connection, segments: Sequence[Segment], keys: Sequence[str],
                 below: int | None = None) -> dict[str, tuple[int, float]]:
    """Each key's first finite (step, value) over the segments (keys never logged are absent);
    with `below`, only steps below it are read (a bounded scan; a key first logged later is absent)."""
    ids = key_ids(con, keys)
    if not ids:
        return {}
    where, params = _on_m(segments)
    rows = con.execute(
        f"SELECT k.key, min(m.step), arg_min(m.value, m.step) FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE m.key_id IN ({','.join('?' * len(ids))}) AND isfinite(m.value) AND {where}"
        + (" AND m.step < ?" if below is not None else "") + " GROUP BY k.key",
        [*ids.values(), *params, *([below] if below is not None else [])]).fetchall()
    return {k: (int(s), float(v)) for k, s, v in rows if v is not None}


def nonfinite(con: Connection, segments: Sequence[Segment], lo: int, hi: int | None) -> list[tuple[str, int, int, float]]:
    """(key, first step, count, a value) of NaN/Inf values at steps [lo, hi), by first step."""
    where, params = _on_m(segments)
    rows = con.execute(
        f"SELECT k.key, min(m.step), count(*), any_value(m.value) FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE m.step >= ? {'AND m.step < ?' if hi is not None else ''} AND NOT isfinite(m.value)"
        f" AND {where} GROUP BY k.key ORDER BY 2, 1",
        [lo, *([hi] if hi is not None else []), *params]).fetchall()
    return [(k, int(s), int(n), v) for k, s, n, v in rows]


def sampled(con: Connection, run_pk: int, key: str, upto: int, every: int, lo: int = 0) -> list[tuple[int, float]]:
    """A run's own (step, value) of `key` at every `every`-th step in [lo, upto], and at `upto`."""
    kid = key_id(con, key)
    if kid is None:
        return []
    rows = con.execute(
        f"SELECT step, value FROM metrics WHERE run_pk = ? AND key_id = ? AND step BETWEEN ? AND ?"
        f" AND (step % {int(every)} = 0 OR step = ?) ORDER BY step", [run_pk, kid, lo, upto, upto]).fetchall()
    return [(int(s), float(v)) for s, v in rows]


def largest_jump(con: Connection, run_pk: int, key: str, lo: int, hi: int) -> tuple[int, float] | None:
    """The step in [lo, hi] whose value rose most over the step before it (a `_timestamp` gap)."""
    kid = key_id(con, key)
    if kid is None:
        return None
    rows = con.execute(
        "SELECT step, value - lag(value) OVER (ORDER BY step) AS dt FROM metrics WHERE run_pk = ? AND key_id = ?"
        " AND step BETWEEN ? AND ? ORDER BY dt DESC NULLS LAST LIMIT 1", [run_pk, kid, lo, hi]).fetchall()
    return (int(rows[0][0]), float(rows[0][1])) if rows and rows[0][1] is not None else None


def bracket(con: Connection, segments: Sequence[Segment], key: str, around: int,
            span: int = 10_000) -> tuple[int | None, int | None]:
    """The logged steps of `key` around a step: (last one before it, first one at or after it)."""
    kid = key_id(con, key)
    if kid is None:
        return None, None
    where, params = segment_filter(segments)
    row = first(con.execute(
        f"SELECT max(step) FILTER (WHERE step < ?), min(step) FILTER (WHERE step >= ?) FROM metrics"
        f" WHERE key_id = ? AND step BETWEEN ? AND ? AND {where}",
        [around, around, kid, around - span, around + span, *params]))
    return row[0], row[1]


def values_at(con: Connection, segments: Sequence[Segment], prefix: str, steps: Sequence[int],
              exclude: Sequence[str] = ()) -> dict[int, dict[str, float]]:
    """{step: {key: value}} of every key starting with `prefix` (minus `exclude`) at the given steps."""
    if not steps:
        return {}
    where, params = _on_m(segments)
    skip = list(exclude)
    rows = con.execute(
        f"SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE m.step IN ({','.join('?' * len(steps))}) AND starts_with(k.key, ?)"
        + (f" AND k.key NOT IN ({','.join('?' * len(skip))})" if skip else "")
        + f" AND {where}",
        [*steps, prefix, *skip, *params]).fetchall()
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for step, key, value in rows:
        out[int(step)][key] = value
    return out


def rows_between(con: Connection, segments: Sequence[Segment], prefix: str, suffix: str,
                 lo: int, hi: int) -> list[tuple[str, int, float]]:
    """(key, step, value) of keys starting with `prefix` and ending with `suffix`, steps lo..hi."""
    where, params = _on_m(segments)
    return con.execute(
        f"SELECT k.key, m.step, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE starts_with(k.key, ?) AND ends_with(k.key, ?) AND m.step BETWEEN ? AND ? AND {where}",
        [prefix, suffix, lo, hi, *params]).fetchall()
