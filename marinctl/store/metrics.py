"""Full-resolution metric history: append in batches, read series, downsample in SQL.

Writers hand over a long batch (step, key, value) with an explicit step range [lo, hi)
that the batch completely describes. `replace_range` deletes whatever the store holds
for that run in [lo, hi) and inserts the batch, ordered by (key_id, step), inside the
caller's transaction — so re-running a batch after a crash can never duplicate rows.
Ordering by key inside each batch keeps a single series contiguous within DuckDB row
groups, which is what makes per-series queries skip the rest of a 84M-row table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import duckdb
import numpy as np
import pyarrow as pa

from marinctl.store import first

BATCH_SCHEMA = pa.schema([("step", pa.int64()), ("key", pa.string()), ("value", pa.float64())])


def ensure_keys(con: duckdb.DuckDBPyConnection, batch_name: str = "_batch") -> None:
    con.execute(
        f"INSERT INTO metric_keys (key) SELECT DISTINCT b.key FROM {batch_name} b"
        " WHERE b.key NOT IN (SELECT key FROM metric_keys)"
    )


def replace_range(
    con: duckdb.DuckDBPyConnection,
    run_pk: int,
    batch: pa.Table,
    lo: int,
    hi: int | None,
    *,
    existing_last_step: int | None = None,
) -> int:
    """Make the store hold exactly `batch` for this run in [lo, hi). Returns rows inserted.

    `existing_last_step` lets the common append case (lo beyond anything stored) skip the
    delete scan. Call inside a transaction together with the watermark update.
    """
    if existing_last_step is None or lo <= existing_last_step:
        if hi is None:
            con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ?", [run_pk, lo])
        else:
            con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ? AND step < ?", [run_pk, lo, hi])
    if batch.num_rows == 0:
        return 0
    con.register("_batch", batch)
    try:
        ensure_keys(con)
        con.execute(
            "INSERT INTO metrics SELECT ?, k.key_id, b.step, b.value FROM _batch b"
            " JOIN metric_keys k ON k.key = b.key ORDER BY k.key_id, b.step",
            [run_pk],
        )
    finally:
        con.unregister("_batch")
    return batch.num_rows


def insert_from_relation(con: duckdb.DuckDBPyConnection, run_pk: int, relation_sql: str) -> int:
    """Insert long rows produced by SQL (columns step, key, value), e.g. an UNPIVOT of parquet."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _rel AS {relation_sql}")
    try:
        ensure_keys(con, "_rel")
        n = con.execute("SELECT count(*) FROM _rel").fetchall()[0][0]
        con.execute(
            "INSERT INTO metrics SELECT ?, k.key_id, r.step, r.value FROM _rel r"
            " JOIN metric_keys k ON k.key = r.key ORDER BY k.key_id, r.step",
            [run_pk],
        )
    finally:
        con.execute("DROP TABLE IF EXISTS _rel")
    return n


def replace_wide(con: duckdb.DuckDBPyConnection, run_pk: int, wide: pa.RecordBatch, numeric: Sequence[str],
                 lo: int, hi: int, *, existing_last_step: int | None = None) -> tuple[int, int | None]:
    """`replace_range` for a wide batch (a `_step` column and one column per key, e.g. a parquet
    export): steps [lo, hi) are unpivoted to long rows in DuckDB. `existing_last_step` is the
    run's last stored step (None: nothing stored, so nothing to delete). Returns (rows, last step written)."""
    def q(c: str) -> str:
        return '"' + c.replace('"', '""') + '"'

    cast = ", ".join(f"CAST({q(c)} AS DOUBLE) AS {q(c)}" for c in numeric)
    con.register("_wide", wide)
    try:
        if existing_last_step is not None and lo <= existing_last_step:
            con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ? AND step < ?", [run_pk, lo, hi])
        rel = (
            f"SELECT _step AS step, key, value FROM (UNPIVOT (SELECT CAST(_step AS BIGINT) AS _step, {cast}"
            f" FROM _wide WHERE _step >= {int(lo)} AND _step < {int(hi)}) ON COLUMNS(* EXCLUDE (_step))"
            " INTO NAME key VALUE value)"
        )
        n = insert_from_relation(con, run_pk, rel)
    finally:
        con.unregister("_wide")
    top = first(con.execute("SELECT max(step) FROM metrics WHERE run_pk = ? AND step >= ? AND step < ?",
                            [run_pk, lo, hi]))[0]
    return n, top


def merge_range(con: duckdb.DuckDBPyConnection, run_pk: int, batch: pa.Table, lo: int, hi: int, *,
                existing_last_step: int | None, repeated_steps: bool = False) -> int:
    """Write `batch` over steps [lo, hi) keeping stored values of keys the batch does not carry.

    For sources that may log a step twice (a `.wandb` file re-read, `log(step=N)` again): the
    later value wins per key. Returns how many (step, key) values are new to the store.
    """
    if existing_last_step is not None and lo <= existing_last_step:
        con.register("_new", batch)
        try:
            old = con.sql(
                "SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
                " WHERE m.run_pk = $1 AND m.step >= $2 AND m.step < $3"
                " AND NOT EXISTS (SELECT 1 FROM _new n WHERE n.step = m.step AND n.key = k.key)",
                params=[run_pk, lo, hi]).to_arrow_table()
        finally:
            con.unregister("_new")
        if old.num_rows:
            batch = pa.concat_tables([old.cast(batch.schema), batch])
        if repeated_steps:
            batch = _last_per_key(batch)
        replace_range(con, run_pk, batch, lo, hi)
        return batch.num_rows - old.num_rows
    if repeated_steps:
        batch = _last_per_key(batch)
    replace_range(con, run_pk, batch, lo, hi, existing_last_step=existing_last_step)
    return batch.num_rows


def _last_per_key(batch: pa.Table) -> pa.Table:
    rows = {}
    for s, k, v in zip(batch.column("step").to_pylist(), batch.column("key").to_pylist(),
                       batch.column("value").to_pylist()):
        rows[(s, k)] = v
    return pa.table({"step": pa.array([s for s, _ in rows], pa.int64()),
                     "key": pa.array([k for _, k in rows], pa.string()),
                     "value": pa.array(list(rows.values()), pa.float64())})


def delete_from(con: duckdb.DuckDBPyConnection, run_pk: int, step: int) -> None:
    """Forget a run's history from `step` on (W&B rewrote it)."""
    con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ?", [run_pk, step])


def key_id(con: duckdb.DuckDBPyConnection, key: str) -> int | None:
    row = con.execute("SELECT key_id FROM metric_keys WHERE key = ?", [key]).fetchall()
    return row[0][0] if row else None


def key_ids(con: duckdb.DuckDBPyConnection, keys: Sequence[str]) -> dict[str, int]:
    """{key: key_id} for the keys the store knows (unknown keys are left out)."""
    if not keys:
        return {}
    rows = con.execute(f"SELECT key, key_id FROM metric_keys WHERE key IN ({','.join('?' * len(keys))})",
                       list(keys)).fetchall()
    return dict(rows)


def run_keys(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int]) -> list[str]:
    """Keys a run (or lineage) logged, sorted."""
    if not run_pks:
        return []
    marks = ",".join("?" * len(run_pks))
    rows = con.execute(
        f"SELECT DISTINCT k.key FROM metrics m JOIN metric_keys k USING (key_id) WHERE m.run_pk IN ({marks}) ORDER BY 1",
        list(run_pks),
    ).fetchall()
    return [r[0] for r in rows]


# --- reading ------------------------------------------------------------------------------

Segment = tuple[int, int | None, int | None]  # (run_pk, lo inclusive or None, hi exclusive or None)


def segment_filter(segments: Sequence[Segment]) -> tuple[str, list]:
    clauses, params = [], []
    for run_pk, lo, hi in segments:
        c = "(run_pk = ?"
        params.append(run_pk)
        if lo is not None:
            c += " AND step >= ?"
            params.append(lo)
        if hi is not None:
            c += " AND step < ?"
            params.append(hi)
        clauses.append(c + ")")
    return "(" + " OR ".join(clauses) + ")", params


def series(
    con: duckdb.DuckDBPyConnection,
    segments: Sequence[Segment],
    key: str,
    lo: int | None = None,
    hi: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every (step, value) of one key over the given run segments, sorted by step."""
    kid = key_id(con, key)
    if kid is None or not segments:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    where, params = segment_filter(segments)
    sql = f"SELECT step, value FROM metrics WHERE key_id = ? AND {where}"
    params = [kid, *params]
    if lo is not None:
        sql += " AND step >= ?"
        params.append(lo)
    if hi is not None:
        sql += " AND step < ?"
        params.append(hi)
    res = con.execute(sql + " ORDER BY step", params).fetchnumpy()
    return np.asarray(res["step"], dtype=np.int64), np.asarray(res["value"], dtype=np.float64)


@dataclass
class Envelope:
    """Per-bucket summary of one series: the min/max envelope keeps every spike visible."""

    step_lo: np.ndarray
    step_hi: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    first: np.ndarray
    last: np.ndarray
    mean: np.ndarray
    count: np.ndarray
    nonfinite: np.ndarray
    step_of_max: np.ndarray
    step_of_min: np.ndarray

    def __len__(self) -> int:
        return len(self.step_lo)


def downsample(
    con: duckdb.DuckDBPyConnection,
    segments: Sequence[Segment],
    key: str,
    lo: int,
    hi: int,
    buckets: int,
) -> Envelope:
    """Min/max envelope of one key over [lo, hi) in at most `buckets` step buckets, in SQL.

    Never samples: every finite value lands in exactly one bucket's min/max, so a one-step
    spike anywhere in 400k steps survives at every zoom. Non-finite values are counted.
    """
    return downsample_many(con, segments, [key], lo, hi, buckets).get(key, _empty_envelope())


def downsample_many(
    con: duckdb.DuckDBPyConnection,
    segments: Sequence[Segment],
    keys: Sequence[str],
    lo: int,
    hi: int,
    buckets: int,
) -> dict[str, Envelope]:
    """`downsample` for several keys in ONE scan (a chart grid: ~2-3x cheaper than one query per key).

    Keys the store does not know are absent from the result.
    """
    ids = key_ids(con, keys)
    if not ids or not segments or hi <= lo:
        return {}
    width = max(1.0, (hi - lo) / max(1, int(buckets)))
    where, params = segment_filter(segments)
    sql = f"""
        SELECT key_id, b,
               min(step), max(step),
               min(value) FILTER (WHERE isfinite(value)),
               max(value) FILTER (WHERE isfinite(value)),
               arg_min(value, step), arg_max(value, step),
               avg(value) FILTER (WHERE isfinite(value)),
               count(*), count(*) FILTER (WHERE NOT isfinite(value)),
               arg_max(step, value) FILTER (WHERE isfinite(value)),
               arg_min(step, value) FILTER (WHERE isfinite(value))
        FROM (
            SELECT key_id, step, value, CAST(floor((step - ?) / ?) AS BIGINT) AS b
            FROM metrics
            WHERE key_id IN ({','.join('?' * len(ids))}) AND step >= ? AND step < ? AND {where}
        )
        GROUP BY key_id, b ORDER BY key_id, b
    """
    res = con.execute(sql, [lo, width, *ids.values(), lo, hi, *params]).fetchall()
    by_id: dict[int, list] = {}
    for row in res:
        by_id.setdefault(row[0], []).append(row)
    out: dict[str, Envelope] = {}
    for key, kid in ids.items():
        rows = by_id.get(kid)
        if not rows:
            out[key] = _empty_envelope()
            continue
        cols = list(zip(*rows))
        f = lambda i: np.array([np.nan if v is None else v for v in cols[i]], dtype=np.float64)  # noqa: E731
        out[key] = Envelope(
            step_lo=f(2), step_hi=f(3), vmin=f(4), vmax=f(5), first=f(6), last=f(7), mean=f(8),
            count=np.array(cols[9], dtype=np.int64), nonfinite=np.array(cols[10], dtype=np.int64),
            step_of_max=f(11), step_of_min=f(12),
        )
    return out


def _empty_envelope() -> Envelope:
    empty = np.empty(0)
    return Envelope(*(empty,) * 9, step_of_max=empty, step_of_min=empty)


def step_range(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment]) -> tuple[int | None, int | None]:
    where, params = segment_filter(segments)
    return tuple(con.execute(f"SELECT min(step), max(step) FROM metrics WHERE {where}", params).fetchall()[0])


def unknown_keys(con: duckdb.DuckDBPyConnection, keys: Sequence[str]) -> list[str]:
    """The keys of `keys` no run ever logged, in the order given."""
    known = key_ids(con, keys)
    return [k for k in keys if k not in known]


def export_table(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str] | None) -> pa.Table:
    """Every long row (step, key, value) of the segments, as one Arrow table (the export contract)."""
    sql, params = export_relation_sql(segments, keys)
    return con.sql(sql, params=params).to_arrow_table()


def export_batches(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str] | None,
                   rows_per_batch: int = 100_000):
    """The same rows as `export_table`, streamed in Arrow record batches (bounded memory)."""
    sql, params = export_relation_sql(segments, keys)
    return con.sql(sql, params=params).to_arrow_reader(rows_per_batch)


def export_relation_sql(segments: Sequence[Segment], keys: Sequence[str] | None) -> tuple[str, list]:
    """SQL for long rows (step, key, value) sorted by step then key — the export contract."""
    where, params = segment_filter(segments)
    sql = (
        "SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE {where.replace('run_pk', 'm.run_pk').replace('step', 'm.step')}"
    )
    if keys:
        sql += f" AND k.key IN ({','.join('?' * len(keys))})"
        params = [*params, *keys]
    return sql + " ORDER BY m.step, k.key", params
