"""Full-resolution metric history: append in batches, read series, downsample in SQL.

A run's history is held in two forms: W&B's exported parquet parts (store/parts.py) and the
long `metrics` table (the live tail, local and repro runs). Every read here goes across both
through store/scan.py; the writers here keep the invariant that no long row lies inside a
part's range (a range written here is cut out of the run's parts).

Writers hand over a long batch (step, key, value) with an explicit step range [lo, hi)
that the batch completely describes. `replace_range` deletes whatever the store holds
for that run in [lo, hi) and inserts the batch, ordered by (key_id, step), inside the
caller's transaction — so re-running a batch after a crash can never duplicate rows.
Ordering by key inside each batch keeps a single series contiguous within DuckDB row
groups, which is what makes per-series queries skip the rest of a 84M-row table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from marinctl.store import dialect, engine
from marinctl.store import parts, scan
from marinctl.store.engine import duckdb

if TYPE_CHECKING:
    import pyarrow as pa

ROW_GROUP = 122_880   # DuckDB's rows per row group: the unit its zone maps skip


def batch_schema() -> pa.Schema:
    """What writers hand `replace_range`: (step, key, value) rows (a function: reads never import pyarrow)."""
    import pyarrow as pa

    return pa.schema([("step", pa.int64()), ("key", pa.string()), ("value", pa.float64())])


def ensure_keys(con: duckdb.DuckDBPyConnection, batch_name: str = "_batch") -> None:
    dialect.intern(con, "metric_keys", f"SELECT b.key FROM {batch_name} b")


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
        parts.cut(con, run_pk, lo, hi)
    if batch.num_rows == 0:
        return 0
    columns = _interned(con, batch)
    if columns is None:                   # nulls in the batch: Arrow's scan keeps them as they are
        engine.register(con, "_batch", batch)
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
    con.register("_batch", columns)
    try:
        value = "CASE WHEN b.nan THEN 'NaN'::DOUBLE ELSE b.value END" if "nan" in columns else "b.value"
        con.execute(f"INSERT INTO metrics SELECT ?, b.key_id, b.step, {value} FROM _batch b ORDER BY b.key_id, b.step",
                    [run_pk])
    finally:
        con.unregister("_batch")
    return batch.num_rows


def append_runs(con: duckdb.DuckDBPyConnection, batches: Sequence[tuple[int, pa.Table]]) -> int:
    """Several runs' new history in one insert (a project sync's page of runs): each batch holds
    only steps at or past its run's watermark, where nothing is stored (the caller's guarantee,
    held by committing the watermark in the same transaction). Keys are interned once for all.
    Runs land one after another; a run's rows are ordered by key only when it fills a row group
    (a short run's are a fraction of one: ordering them buys no skipping and cost 4x the insert).
    Returns rows inserted."""
    import pyarrow as pa

    batches = [(pk, b) for pk, b in batches if b.num_rows]
    if not batches:
        return 0
    table = pa.concat_tables([b.select(["step", "key", "value"]) for _, b in batches])
    run_pk = np.repeat(np.array([pk for pk, _ in batches], np.int32), [b.num_rows for _, b in batches])
    order = " ORDER BY b.run_pk, key_id, b.step" if any(b.num_rows > ROW_GROUP for _, b in batches) else ""
    columns = _interned(con, table)
    if columns is None:                   # nulls: Arrow's scan keeps them as they are
        engine.register(con, "_batch", table.append_column("run_pk", pa.array(run_pk)))
        try:
            ensure_keys(con)
            con.execute("INSERT INTO metrics SELECT b.run_pk, k.key_id, b.step, b.value FROM _batch b"
                        f" JOIN metric_keys k ON k.key = b.key{order}")
        finally:
            con.unregister("_batch")
        return table.num_rows
    columns["run_pk"] = run_pk
    con.register("_batch", columns)
    try:
        value = "CASE WHEN b.nan THEN 'NaN'::DOUBLE ELSE b.value END" if "nan" in columns else "b.value"
        con.execute(f"INSERT INTO metrics SELECT b.run_pk, b.key_id, b.step, {value} FROM _batch b{order}")
    finally:
        con.unregister("_batch")
    return table.num_rows


def _interned(con: duckdb.DuckDBPyConnection, batch: pa.Table) -> dict[str, np.ndarray] | None:
    """`batch` as NumPy columns with its keys interned (key_id, step, value, and `nan` where it has
    NaNs: DuckDB reads a NumPy NaN as NULL), or None when it holds nulls. DuckDB's compiled core
    scans NumPy arrays itself; an Arrow table needs the package's Python layer (store/engine.py),
    whose import held up the first view of a `watch` on a run never synced."""
    import pyarrow as pa

    if any(batch.column(c).null_count for c in ("step", "key", "value")):
        return None
    keys = batch.column("key").combine_chunks()
    if pa.types.is_dictionary(keys.type):
        keys = keys.cast(pa.string())
    enc = keys.dictionary_encode()
    names = enc.dictionary.to_pylist()
    dialect.intern(con, "metric_keys", "SELECT k FROM unnest(?::VARCHAR[]) t(k)", [names])
    ids = dict(con.execute("SELECT key, key_id FROM metric_keys WHERE key IN (SELECT unnest(?::VARCHAR[]))",
                           [names]).fetchall())
    columns = {"key_id": np.array([ids[n] for n in names], np.int32)[enc.indices.to_numpy(zero_copy_only=False)],
               "step": batch.column("step").to_numpy(), "value": batch.column("value").to_numpy()}
    nan = np.isnan(columns["value"])
    if nan.any():
        columns["nan"] = nan
    return columns


def merge_range(con: duckdb.DuckDBPyConnection, run_pk: int, batch: pa.Table, lo: int, hi: int, *,
                existing_last_step: int | None, repeated_steps: bool = False) -> int:
    """Write `batch` over steps [lo, hi) keeping stored values of keys the batch does not carry.

    For sources that may log a step twice (a `.wandb` file re-read, `log(step=N)` again): the
    later value wins per key. Returns how many (step, key) values are new to the store.
    """
    import pyarrow as pa
    if existing_last_step is not None and lo <= existing_last_step:
        engine.register(con, "_new", batch)
        try:
            old = engine.relation(con,
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
    import pyarrow as pa
    rows = {}
    for s, k, v in zip(batch.column("step").to_pylist(), batch.column("key").to_pylist(),
                       batch.column("value").to_pylist()):
        rows[(s, k)] = v
    return pa.table({"step": pa.array([s for s, _ in rows], pa.int64()),
                     "key": pa.array([k for _, k in rows], pa.string()),
                     "value": pa.array(list(rows.values()), pa.float64())})


def delete_from(con: duckdb.DuckDBPyConnection, run_pk: int, step: int) -> None:
    """Forget a run's history from `step` on (W&B rewrote it): long rows deleted, parts clipped."""
    parts.rewind(con, run_pk, step)


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
    return scan.run_keys(con, run_pks)


# --- reading ------------------------------------------------------------------------------

Segment = tuple[int, int | None, int | None]  # (run_pk, lo inclusive or None, hi exclusive or None)


def series(
    con: duckdb.DuckDBPyConnection,
    segments: Sequence[Segment],
    key: str,
    lo: int | None = None,
    hi: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Every (step, value) of one key over the given run segments, sorted by step."""
    return scan.arrays(con, segments, key, lo, hi)


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
    """`downsample` for several keys in ONE scan (a chart grid: the history is read once, not once a key).

    Keys the store does not know are absent from the result.
    """
    ids = key_ids(con, keys)
    if not ids or not segments or hi <= lo:
        return {}
    width = max(1.0, (hi - lo) / max(1, int(buckets)))
    with scan.relation(con, segments, list(ids), lo, hi) as rel:
        res = con.execute(f"""
            SELECT key_id, b,
                   min(step), max(step),
                   min(value) FILTER (WHERE isfinite(value)),
                   max(value) FILTER (WHERE isfinite(value)),
                   arg_min(value, step), arg_max(value, step),
                   avg(value) FILTER (WHERE isfinite(value)),
                   count(*), count(*) FILTER (WHERE NOT isfinite(value)),
                   arg_max(step, value) FILTER (WHERE isfinite(value)),
                   arg_min(step, value) FILTER (WHERE isfinite(value))
            FROM (SELECT key_id, step, value, CAST(floor((step - ?) / ?) AS BIGINT) AS b FROM {rel})
            GROUP BY key_id, b ORDER BY key_id, b
        """, [lo, width]).fetchall()
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
    """First and last step holding a value over the segments (parts and long rows)."""
    return scan.step_range(con, segments)


def unknown_keys(con: duckdb.DuckDBPyConnection, keys: Sequence[str]) -> list[str]:
    """The keys of `keys` no run ever logged, in the order given."""
    known = key_ids(con, keys)
    return [k for k in keys if k not in known]


def require_keys(con: duckdb.DuckDBPyConnection, keys: Sequence[str]) -> None:
    """UnknownMetric naming every key of `keys` no run ever logged (`export --keys`, the API's history)."""
    missing = unknown_keys(con, keys)
    if missing:
        from marinctl.errors import UnknownMetric

        raise UnknownMetric(f"unknown metric key(s): {', '.join(missing)}",
                            "list keys with `marinctl sql \"SELECT key FROM metric_keys\"`")


def export_batches(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str] | None,
                   rows_per_batch: int = 100_000):
    """Every long row (step, key, value) of the segments sorted by step then key (the export
    contract), streamed in Arrow record batches: memory is bounded by one part's row group."""
    return scan.export(con, segments, keys, rows_per_batch)


def export_table(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str] | None) -> pa.Table:
    """`export_batches` as one Arrow table (for small ranges: a step or a window)."""
    import pyarrow as pa
    return pa.Table.from_batches(list(export_batches(con, segments, keys)), schema=scan.export_schema())


def export_parquet(con: duckdb.DuckDBPyConnection, segments: Sequence[Segment], keys: Sequence[str] | None,
                   path) -> int:
    """`export_batches` written to a parquet file as they stream; returns rows written."""
    import pyarrow.parquet as pq

    rows = 0
    with pq.ParquetWriter(str(path), scan.export_schema()) as writer:
        for batch in export_batches(con, segments, keys):
            writer.write_batch(batch)
            rows += batch.num_rows
    return rows
