"""System metrics W&B records beside the history (CPU, memory, GPU, disk, network): samples by time.

They are sampled by wall time, not logged at steps, so they live in their own tables
(`system_samples`, keys interned in `system_keys`; migration 0004), never in history: exports
and history reads are unchanged by them. Keys are W&B's remote spelling, `system.<key>`.

Reads come binned by time (`binned`): a chart's worth of rows, however long the run sampled.

Two writers, both idempotent:
- a local `.wandb` window adds its samples in the transaction that moves the file's read
  position (sync/local.py); a window read again (a replaced file) replaces its own
  (key, time) samples, so nothing doubles;
- a remote run's `events` are W&B's *sampled* set: it is replaced whole, together with the run
  metadata it was fetched for (`fetched_for`), so an unchanged run is not asked again and a sync
  killed before the set landed asks again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from marinctl.store import dialect, engine
from marinctl.store import first
from marinctl.store.engine import duckdb

if TYPE_CHECKING:
    import pyarrow as pa

Sample = tuple[float, str, float]    # (unix seconds, key, value)


def _batch(samples: Sequence[Sample]) -> pa.Table:
    import pyarrow as pa   # writes only: reads (watch's m pane) never load it

    times, keys, values = zip(*samples) if samples else ((), (), ())
    return pa.table([pa.array(times, pa.float64()), pa.array(keys, pa.string()),
                     pa.array(values, pa.float64())], names=["time", "key", "value"])


def _insert(con: duckdb.DuckDBPyConnection, run_pk: int) -> None:
    """Insert the registered `_sys` batch for `run_pk` (keys interned first), ordered by key then time."""
    dialect.intern(con, "system_keys", "SELECT key FROM _sys")
    con.execute("INSERT INTO system_samples SELECT ?, k.key_id, b.time, b.value FROM _sys b"
                " JOIN system_keys k USING (key) ORDER BY k.key_id, b.time", [run_pk])


def add_samples(con: duckdb.DuckDBPyConnection, run_pk: int, samples: Sequence[Sample]) -> int:
    """Write a local window's samples (call inside its transaction); returns how many are new."""
    if not samples:
        return 0
    batch = _batch(samples)
    lo, hi = min(batch.column("time").to_pylist()), max(batch.column("time").to_pylist())
    engine.register(con, "_sys", batch)
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
        engine.register(con, "_sys", _batch(samples))
        try:
            _insert(con, run_pk)
        finally:
            con.unregister("_sys")
    con.execute("DELETE FROM system_fetches WHERE run_pk = ?", [run_pk])
    con.execute("INSERT INTO system_fetches (run_pk, fetched_for, samples, fetched_at) VALUES (?, ?, ?, now())",
                [run_pk, fetched_for, len(samples)])
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


@dataclass
class Bins:
    """One key's samples over a time range in equal time bins (only bins holding samples): each
    bin's first and last sample time, finite min/max/sum and count, all-sample count, last value."""

    t_first: np.ndarray
    t_last: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    vsum: np.ndarray
    finite: np.ndarray
    count: np.ndarray
    last: np.ndarray


def binned(con: duckdb.DuckDBPyConnection, run_pk: int, wanted: Sequence[str], t_lo: float, t_hi: float,
           bins: int) -> dict[str, Bins]:
    """{key: Bins} of one run within [t_lo, t_hi], in at most `bins` time bins, in ONE scan.

    A chart never needs more than its buckets' worth of rows, however long the run sampled: a
    bin holding one sample is that sample exactly, and min/max keep every spike.
    """
    if not wanted or t_hi < t_lo:
        return {}
    width = max((t_hi - t_lo) / max(1, int(bins)), 1e-9)
    got = con.execute(f"""
        SELECT k.key, min(s.time), max(s.time),
               min(s.value) FILTER (WHERE isfinite(s.value)), max(s.value) FILTER (WHERE isfinite(s.value)),
               sum(s.value) FILTER (WHERE isfinite(s.value)), count(*) FILTER (WHERE isfinite(s.value)),
               count(*), arg_max(s.value, s.time)
        FROM system_samples s JOIN system_keys k USING (key_id)
        WHERE s.run_pk = ? AND k.key IN ({','.join('?' * len(wanted))}) AND s.time >= ? AND s.time <= ?
        GROUP BY k.key, CAST(floor((s.time - ?) / ?) AS BIGINT) ORDER BY 1, 2
    """, [run_pk, *wanted, float(t_lo), float(t_hi), float(t_lo), width]).fetchall()
    rows: dict[str, list] = {}
    for row in got:
        rows.setdefault(row[0], []).append(row[1:])
    out = {}
    for key, kept in rows.items():
        cols = list(zip(*kept))
        f = lambda i: np.array([np.nan if v is None else v for v in cols[i]], np.float64)  # noqa: E731
        out[key] = Bins(f(0), f(1), f(2), f(3), f(4), np.array(cols[5], np.int64), np.array(cols[6], np.int64), f(7))
    return out
