"""System metrics W&B records beside the history (CPU, memory, GPU, disk, network): samples by time.

They are sampled by wall time, not logged at steps, so they live in their own tables
(`system_samples`, keys interned in `system_keys`; migration 0004), never in history: exports
and history reads are unchanged by them. Keys are W&B's remote spelling, `system.<key>`.

Two writers, both idempotent:
- a local `.wandb` window adds its samples in the transaction that moves the file's read
  position (sync/local.py); a window read again (a replaced file) replaces its own
  (key, time) samples, so nothing doubles;
- a remote run's `events` are W&B's *sampled* set: it is replaced whole, together with the run
  metadata it was fetched for (`fetched_for`), so an unchanged run is not asked again and a sync
  killed before the set landed asks again.
"""

from __future__ import annotations

from typing import Sequence

import duckdb
import numpy as np
import pyarrow as pa

from marinctl.store import first

Sample = tuple[float, str, float]    # (unix seconds, key, value)
_SCHEMA = pa.schema([("time", pa.float64()), ("key", pa.string()), ("value", pa.float64())])


def _batch(samples: Sequence[Sample]) -> pa.Table:
    times, keys, values = zip(*samples) if samples else ((), (), ())
    return pa.table([pa.array(times, pa.float64()), pa.array(keys, pa.string()),
                     pa.array(values, pa.float64())], schema=_SCHEMA)


def _insert(con: duckdb.DuckDBPyConnection, run_pk: int) -> None:
    """Insert the registered `_sys` batch for `run_pk` (keys interned first), ordered by key then time."""
    con.execute("INSERT INTO system_keys (key) SELECT DISTINCT key FROM _sys WHERE key NOT IN (SELECT key FROM system_keys)")
    con.execute("INSERT INTO system_samples SELECT ?, k.key_id, b.time, b.value FROM _sys b"
                " JOIN system_keys k USING (key) ORDER BY k.key_id, b.time", [run_pk])


def add_samples(con: duckdb.DuckDBPyConnection, run_pk: int, samples: Sequence[Sample]) -> int:
    """Write a local window's samples (call inside its transaction); returns how many are new."""
    if not samples:
        return 0
    batch = _batch(samples)
    lo, hi = min(batch.column("time").to_pylist()), max(batch.column("time").to_pylist())
    con.register("_sys", batch)
    try:
        gone = first(con.execute(
            "DELETE FROM system_samples s WHERE s.run_pk = ? AND s.time BETWEEN ? AND ? AND EXISTS ("
            " SELECT 1 FROM _sys b JOIN system_keys k USING (key) WHERE k.key_id = s.key_id AND b.time = s.time)",
            [run_pk, lo, hi]))
        _insert(con, run_pk)
    finally:
        con.unregister("_sys")
    return batch.num_rows - int(gone[0] if gone else 0)


def replace_samples(con: duckdb.DuckDBPyConnection, run_pk: int, samples: Sequence[Sample], fetched_for: str) -> int:
    """A remote run's sampled set, replacing the one stored, with what it was fetched for; returns rows."""
    con.execute("DELETE FROM system_samples WHERE run_pk = ?", [run_pk])
    if samples:
        con.register("_sys", _batch(samples))
        try:
            _insert(con, run_pk)
        finally:
            con.unregister("_sys")
    con.execute("INSERT INTO system_fetches (run_pk, fetched_for, samples) VALUES (?, ?, ?) ON CONFLICT (run_pk)"
                " DO UPDATE SET fetched_for = excluded.fetched_for, samples = excluded.samples,"
                " fetched_at = now()", [run_pk, fetched_for, len(samples)])
    return len(samples)


def fetched_for(con: duckdb.DuckDBPyConnection, run_pk: int) -> str | None:
    """The run metadata the stored remote set was fetched for (None: never fetched)."""
    row = first(con.execute("SELECT fetched_for FROM system_fetches WHERE run_pk = ?", [run_pk]))
    return row[0] if row else None


def keys(con: duckdb.DuckDBPyConnection, run_pks: Sequence[int]) -> list[str]:
    """The system keys these runs have samples of, sorted."""
    if not run_pks:
        return []
    marks = ",".join("?" * len(run_pks))
    rows = con.execute(f"SELECT k.key FROM system_keys k WHERE k.key_id IN"
                       f" (SELECT DISTINCT key_id FROM system_samples WHERE run_pk IN ({marks})) ORDER BY 1",
                       list(run_pks)).fetchall()
    return [r[0] for r in rows]


def samples(con: duckdb.DuckDBPyConnection, run_pk: int, wanted: Sequence[str], t_lo: float | None = None,
            t_hi: float | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """{key: (times, values)} of one run, sorted by time, within [t_lo, t_hi] when given."""
    if not wanted:
        return {}
    sql = ("SELECT k.key, s.time, s.value FROM system_samples s JOIN system_keys k USING (key_id)"
           f" WHERE s.run_pk = ? AND k.key IN ({','.join('?' * len(wanted))})")
    params: list = [run_pk, *wanted]
    if t_lo is not None:
        sql += " AND s.time >= ?"
        params.append(float(t_lo))
    if t_hi is not None:
        sql += " AND s.time <= ?"
        params.append(float(t_hi))
    got = con.execute(sql + " ORDER BY k.key, s.time", params).fetchnumpy()
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    names = list(got["key"])
    times, values = np.asarray(got["time"], np.float64), np.asarray(got["value"], np.float64)
    start = 0
    for i in range(1, len(names) + 1):
        if i == len(names) or names[i] != names[start]:
            out[names[start]] = (times[start:i], values[start:i])
            start = i
    return out
