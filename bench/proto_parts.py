"""PROTOTYPE (bench only, not product code): W&B parquet export parts kept as the stored form.

Layout (b) of bench/STORE_DESIGN.md. A run's history is
  * registered parquet parts — the exported files themselves, immutable, under
    `<home>/history/<run hash>/`, listed in `history_parts` with the step range each one
    is *effective* for ([lo, hi), never overlapping another part of the run), and
  * the long `metrics` table (today's layout) for everything else: the live tail, local
    `.wandb` runs, runs without exports.
Invariant: no long row of a run lies inside one of its parts' effective ranges, so every
read is a plain UNION ALL of both sides, no de-duplication.

Reads never unpivot a whole part: they name only the columns they need (parquet column
projection), and `_step` filters skip row groups through the parquet statistics.

Crash safety: a part is downloaded to `.part` then renamed (WandbClient.download), its
footer checked, and registered — long rows in its range deleted, the `history_parts` row,
the watermark and runs.last_step — in ONE transaction. A kill before the commit leaves an
unregistered file that `collect_garbage` deletes; after it, the part is complete.
Rewinds inside an exported range clip the straddling part's `hi` (no file is rewritten).

The same read code serves layout (c), wide DuckDB tables: a "part" whose `source` is a
table name instead of a file path.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pyarrow.types as pt

from marinctl.store import metrics as M

Segment = M.Segment

SCHEMA = """
CREATE TABLE IF NOT EXISTS history_parts (
    run_pk    INTEGER NOT NULL,
    part_id   INTEGER NOT NULL,
    source    VARCHAR NOT NULL,   -- path relative to the data home ('history/…/x.parquet') or a table name
    kind      VARCHAR NOT NULL,   -- 'parquet' | 'table'
    lo        BIGINT  NOT NULL,   -- effective range [lo, hi): reads filter _step to it
    hi        BIGINT  NOT NULL,
    file_lo   BIGINT,             -- what the file itself holds (a rewind clips hi, never the file)
    file_hi   BIGINT,
    num_rows  BIGINT,
    bytes     BIGINT,
    keys      VARCHAR[],          -- numeric columns with at least one value (parquet statistics)
    PRIMARY KEY (run_pk, part_id)
);
"""


def q(name: str) -> str:
    """A column name as a DuckDB identifier (W&B keys hold '/', '.', spaces, quotes)."""
    return '"' + name.replace('"', '""') + '"'


def lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


# --- registering parts -----------------------------------------------------------------------

@dataclass
class Footer:
    file_lo: int
    file_hi: int      # exclusive
    num_rows: int
    keys: list[str]   # numeric columns holding at least one value


def read_footer(path: Path) -> Footer:
    """Step range and logged numeric keys from the parquet footer alone (no data pages read)."""
    md = pq.read_metadata(path)
    schema = md.schema.to_arrow_schema()
    names = schema.names
    if "_step" not in names:
        raise ValueError(f"{path.name}: no _step column")
    step_idx = names.index("_step")
    nulls = np.zeros(len(names), np.int64)
    lo, hi = None, None
    for g in range(md.num_row_groups):
        rg = md.row_group(g)
        st = rg.column(step_idx).statistics
        if st is None or not st.has_min_max:  # no statistics: fall back to reading _step
            col = pq.read_table(path, columns=["_step"]).column(0)
            return _footer_slow(path, md, schema, col)
        lo = st.min if lo is None else min(lo, st.min)
        hi = st.max if hi is None else max(hi, st.max)
        for i in range(len(names)):
            s = rg.column(i).statistics
            nulls[i] += s.null_count if (s is not None and s.has_null_count) else 0
    keys = [n for i, n in enumerate(names) if n != "_step" and _numeric(schema.field(n).type) and nulls[i] < md.num_rows]
    return Footer(int(lo), int(hi) + 1, md.num_rows, keys)


def _footer_slow(path, md, schema, steps) -> Footer:
    import pyarrow.compute as pc

    keys = [n for n in schema.names if n != "_step" and _numeric(schema.field(n).type)]
    mm = pc.min_max(steps)
    return Footer(int(mm["min"].as_py()), int(mm["max"].as_py()) + 1, md.num_rows, keys)


def _numeric(t) -> bool:
    return pt.is_integer(t) or pt.is_floating(t) or pt.is_boolean(t) or pt.is_decimal(t)


def run_folder(home: Path, uid: str) -> Path:
    return home / "history" / hashlib.sha1(uid.encode()).hexdigest()[:16]


def new_part_path(home: Path, uid: str) -> Path:
    """A fresh, never-reused file name: a re-export after a rewind never overwrites a file a reader may hold."""
    folder = run_folder(home, uid)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{uuid.uuid4().hex[:12]}.parquet"


def register_part(con: duckdb.DuckDBPyConnection, home: Path, run_pk: int, uid: str, path: Path,
                  footer: Footer, lo: int, hi: int) -> int:
    """Make `path` the stored history of the run for steps [lo, hi). Call inside a transaction
    with the watermark update. Long rows and parts already there are cut out of the range."""
    con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ? AND step < ?", [run_pk, lo, hi])
    _cut(con, run_pk, lo, hi)
    pid = con.execute("SELECT coalesce(max(part_id), 0) + 1 FROM history_parts WHERE run_pk = ?", [run_pk]).fetchall()[0][0]
    con.execute("INSERT INTO history_parts VALUES (?, ?, ?, 'parquet', ?, ?, ?, ?, ?, ?, ?)",
                [run_pk, pid, str(path.relative_to(home)), lo, hi, footer.file_lo, footer.file_hi,
                 footer.num_rows, path.stat().st_size, footer.keys])
    new = pa.table({"key": footer.keys})
    con.register("_newkeys", new)
    try:
        con.execute("INSERT INTO metric_keys (key) SELECT key FROM _newkeys WHERE key NOT IN (SELECT key FROM metric_keys)")
    finally:
        con.unregister("_newkeys")
    return pid


def _cut(con, run_pk: int, lo: int, hi: int | None) -> None:
    """Remove [lo, hi) from the run's parts: drop parts inside it, clip parts that straddle an end,
    split a part that straddles both (two rows, one file)."""
    top = 2**62 if hi is None else int(hi)
    rows = con.execute("SELECT part_id, source, kind, lo, hi, file_lo, file_hi, num_rows, bytes, keys"
                       " FROM history_parts WHERE run_pk = ? AND hi > ? AND lo < ?", [run_pk, lo, top]).fetchall()
    for pid, source, kind, plo, phi, flo, fhi, n, size, keys in rows:
        con.execute("DELETE FROM history_parts WHERE run_pk = ? AND part_id = ?", [run_pk, pid])
        pieces = [(plo, lo)] if plo < lo else []
        if phi > top:
            pieces.append((top, phi))
        for a, b in pieces:
            new_id = con.execute("SELECT coalesce(max(part_id), 0) + 1 FROM history_parts WHERE run_pk = ?",
                                 [run_pk]).fetchall()[0][0]
            new_id = max(new_id, pid + 1) if a != plo else pid  # the left piece keeps its id
            con.execute("INSERT INTO history_parts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_pk, new_id, source, kind, a, b, flo, fhi, n, size, keys])


def rewind(con: duckdb.DuckDBPyConnection, run_pk: int, at: int) -> None:
    """History from step `at` on was rewritten upstream: forget it (parts clipped, long rows deleted)."""
    con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ?", [run_pk, at])
    _cut(con, run_pk, at, None)


def collect_garbage(con: duckdb.DuckDBPyConnection, home: Path, uid: str) -> int:
    """Delete files of the run no part references (a kill between rename and commit; superseded parts)."""
    folder = run_folder(home, uid)
    if not folder.is_dir():
        return 0
    keep = {r[0] for r in con.execute("SELECT source FROM history_parts WHERE kind = 'parquet'").fetchall()}
    gone = 0
    for f in folder.iterdir():
        if str(f.relative_to(home)) not in keep:
            f.unlink(missing_ok=True)
            gone += 1
    return gone


# --- reading --------------------------------------------------------------------------------

@dataclass
class Part:
    run_pk: int
    source: str
    kind: str
    lo: int
    hi: int
    keys: list[str]


def parts_for(con, segments: Sequence[Segment], lo: int | None = None, hi: int | None = None) -> list[tuple[Part, int, int]]:
    """(part, read_lo, read_hi) for every part overlapping the segments and [lo, hi), in step order."""
    out = []
    for run_pk, slo, shi in segments:
        a = max(x for x in (slo, lo, -(2**62)) if x is not None)
        b = min(x for x in (shi, hi, 2**62) if x is not None)
        if a >= b:
            continue
        rows = con.execute("SELECT run_pk, source, kind, lo, hi, keys FROM history_parts"
                           " WHERE run_pk = ? AND hi > ? AND lo < ? ORDER BY lo", [run_pk, a, b]).fetchall()
        for r in rows:
            p = Part(*r)
            out.append((p, max(a, p.lo), min(b, p.hi)))
    return out


class Reader:
    """Read paths over parts ∪ long table. `home` resolves relative part paths."""

    def __init__(self, con: duckdb.DuckDBPyConnection, home: Path, engine: str = "arrow"):
        self.con, self.home, self.engine = con, home, engine
        self._registered: list[str] = []

    def _rel(self, part: Part, a: int = None, b: int = None, keys: Sequence[str] = ()) -> str:
        """What SQL reads a part through: DuckDB's read_parquet (parses the wide footer each query),
        or ('arrow') the needed columns and row groups read by pyarrow with a cached footer."""
        if part.kind == "table":
            return q(part.source)
        if self.engine == "duckdb" or a is None:
            return f"read_parquet({lit(str(self.home / part.source))})"
        pf = self._file(part)
        md = pf.metadata
        idx = md.schema.to_arrow_schema().get_field_index("_step")
        groups = []
        for g in range(md.num_row_groups):
            st = md.row_group(g).column(idx).statistics
            if st is None or not st.has_min_max or (st.max >= a and st.min < b):
                groups.append(g)
        tab = pf.read_row_groups(groups, columns=["_step", *keys], use_threads=False)
        name = f"_part{len(self._registered)}"
        self.con.register(name, tab)
        self._registered.append(name)
        return name

    def release(self) -> None:
        for name in self._registered:
            self.con.unregister(name)
        self._registered.clear()

    def _part_long_sql(self, part: Part, a: int, b: int, keys: Sequence[str]) -> str | None:
        """Long rows (run_pk, step, key, value) of `keys` in one part, nulls (= not logged) dropped."""
        have = [k for k in keys if k in set(part.keys)]
        if not have:
            return None
        cols = ", ".join(f"CAST({q(k)} AS DOUBLE) AS {q(k)}" for k in have)
        inner = f"SELECT CAST(_step AS BIGINT) AS _step, {cols} FROM {self._rel(part, a, b, have)} WHERE _step >= {a} AND _step < {b}"
        if len(have) == 1:
            return (f"SELECT {part.run_pk} AS run_pk, _step AS step, {lit(have[0])} AS key, {q(have[0])} AS value"
                    f" FROM ({inner}) WHERE {q(have[0])} IS NOT NULL")
        on = ", ".join(q(k) for k in have)
        return (f"SELECT {part.run_pk} AS run_pk, _step AS step, key, value FROM"
                f" (UNPIVOT ({inner}) ON {on} INTO NAME key VALUE value)")

    def _tail_sql(self, segments, keys: Sequence[str] | None, lo, hi) -> tuple[str, list]:
        where, params = M.segment_filter(segments)
        where = where.replace("run_pk", "m.run_pk").replace("step", "m.step")
        sql = f"SELECT m.run_pk, m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id) WHERE {where}"
        if keys is not None:
            ids = M.key_ids(self.con, keys)
            if not ids:
                return "", []
            sql += f" AND m.key_id IN ({','.join(str(int(i)) for i in ids.values())})"
        if lo is not None:
            sql += " AND m.step >= ?"
            params.append(lo)
        if hi is not None:
            sql += " AND m.step < ?"
            params.append(hi)
        return sql, params

    def long_sql(self, segments, keys: Sequence[str] | None, lo=None, hi=None) -> tuple[str, list]:
        """One relation (run_pk, step, key, value) over parts and the long table; keys=None: all."""
        pieces = []
        for part, a, b in parts_for(self.con, segments, lo, hi):
            s = self._part_long_sql(part, a, b, part.keys if keys is None else keys)
            if s:
                pieces.append(s)
        tail, params = self._tail_sql(segments, keys, lo, hi)
        if tail:
            pieces.append(tail)
        if not pieces:
            return "SELECT NULL::INTEGER AS run_pk, NULL::BIGINT AS step, NULL::VARCHAR AS key, NULL::DOUBLE AS value WHERE false", []
        return " UNION ALL ".join(f"({p})" for p in pieces), params

    # -- the product's read paths ----------------------------------------------------------
    def series(self, segments, key: str, lo=None, hi=None) -> tuple[np.ndarray, np.ndarray]:
        if self.engine == "arrow":
            return self._series_arrow(segments, key, lo, hi)
        sql, params = self.long_sql(segments, [key], lo, hi)
        res = self.con.execute(f"SELECT step, value FROM ({sql}) ORDER BY step", params).fetchnumpy()
        self.release()
        return np.asarray(res["step"], dtype=np.int64), np.asarray(res["value"], dtype=np.float64)

    def _series_arrow(self, segments, key: str, lo, hi) -> tuple[np.ndarray, np.ndarray]:
        """One key: pyarrow reads the column from each part (cached footer, row groups by _step
        statistics), numpy filters; the long table answers the rest. No SQL over parts."""
        st, vs = [], []
        for part, a, b in parts_for(self.con, segments, lo, hi):
            if key not in set(part.keys):
                continue
            if part.kind == "table":
                res = self.con.execute(f"SELECT _step, CAST({q(key)} AS DOUBLE) AS v FROM {q(part.source)}"
                                       f" WHERE _step >= {a} AND _step < {b} AND {q(key)} IS NOT NULL").fetchnumpy()
                st.append(np.asarray(res["_step"], np.int64))
                vs.append(np.asarray(res["v"], np.float64))
                continue
            pf = self._file(part)
            md = pf.metadata
            idx = md.schema.to_arrow_schema().get_field_index("_step")
            groups = [g for g in range(md.num_row_groups)
                      if (s := md.row_group(g).column(idx).statistics) is None or not s.has_min_max
                      or (s.max >= a and s.min < b)]
            tab = pf.read_row_groups(groups, columns=["_step", key], use_threads=False)
            steps = tab.column(0).to_numpy()
            col = tab.column(1).cast(pa.float64())
            keep = (steps >= a) & (steps < b)
            if col.null_count:
                keep &= np.asarray(col.is_valid())
            st.append(steps[keep].astype(np.int64))
            vs.append(col.to_numpy()[keep])
        tail, params = self._tail_sql(segments, [key], lo, hi)
        if tail:
            res = self.con.execute(f"SELECT step, value FROM ({tail})", params).fetchnumpy()
            st.append(np.asarray(res["step"], np.int64))
            vs.append(np.asarray(res["value"], np.float64))
        if not st:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        steps, values = np.concatenate(st), np.concatenate(vs)
        order = np.argsort(steps, kind="stable")
        return steps[order], values[order]

    def downsample_many(self, segments, keys: Sequence[str], lo: int, hi: int, buckets: int) -> dict[str, M.Envelope]:
        """store.metrics.downsample_many's semantics, over parts and the long table."""
        if not keys or hi <= lo:
            return {}
        width = max(1.0, (hi - lo) / max(1, int(buckets)))
        rel, params = self.long_sql(segments, keys, lo, hi)
        sql = f"""
            SELECT key, b, min(step), max(step),
                   min(value) FILTER (WHERE isfinite(value)), max(value) FILTER (WHERE isfinite(value)),
                   arg_min(value, step), arg_max(value, step),
                   avg(value) FILTER (WHERE isfinite(value)),
                   count(*), count(*) FILTER (WHERE NOT isfinite(value)),
                   arg_max(step, value) FILTER (WHERE isfinite(value)),
                   arg_min(step, value) FILTER (WHERE isfinite(value))
            FROM (SELECT key, step, value, CAST(floor((step - {int(lo)}) / {width!r}) AS BIGINT) AS b FROM ({rel}))
            GROUP BY key, b ORDER BY key, b
        """
        by_key: dict[str, list] = {}
        for row in self.con.execute(sql, params).fetchall():
            by_key.setdefault(row[0], []).append(row)
        self.release()
        out = {}
        for key in keys:
            rows = by_key.get(key)
            if not rows:
                continue
            cols = list(zip(*rows))
            f = lambda i: np.array([np.nan if v is None else v for v in cols[i]], dtype=np.float64)  # noqa: E731
            out[key] = M.Envelope(step_lo=f(2), step_hi=f(3), vmin=f(4), vmax=f(5), first=f(6), last=f(7), mean=f(8),
                                  count=np.array(cols[9], dtype=np.int64), nonfinite=np.array(cols[10], dtype=np.int64),
                                  step_of_max=f(11), step_of_min=f(12))
        return out

    def run_keys(self, run_pks: Sequence[int]) -> list[str]:
        marks = ",".join("?" * len(run_pks))
        keys = {r[0] for r in self.con.execute(
            f"SELECT DISTINCT unnest(keys) FROM history_parts WHERE run_pk IN ({marks})", list(run_pks)).fetchall()}
        keys |= set(M.run_keys(self.con, run_pks))
        return sorted(keys)

    def export_batches(self, segments, keys: Sequence[str] | None, window: int = 5_000, rows_per_batch: int = 2_000):
        """Long rows (step, key, value) sorted by step then key, as Arrow batches, in bounded memory.

        Parts are read with pyarrow in row batches and reshaped with numpy: rows come in step
        order and columns are taken in sorted key order, so the output needs no sort. Long-table
        stretches between parts are sorted by DuckDB one step window at a time.
        """
        for run_pk, slo, shi in sorted(segments, key=lambda s: s[1] if s[1] is not None else -(2**62)):
            seg = [(run_pk, slo, shi)]
            lo, hi = self.step_range(seg)
            if lo is None:
                continue
            cursor = lo
            for part, a, b in parts_for(self.con, seg) + [(None, hi + 1, hi + 1)]:
                for w in range(cursor, a, window):  # long rows before this part
                    rel, params = self._tail_sql(seg, keys, w, min(w + window, a))
                    if rel:
                        yield from self.con.sql(f"SELECT step, key, value FROM ({rel}) ORDER BY step, key",
                                                params=params).to_arrow_reader(100_000)
                if part is None:
                    break
                yield from self._part_rows(part, a, b, keys, rows_per_batch)
                cursor = b

    def _part_rows(self, part: Part, a: int, b: int, keys, rows_per_batch: int):
        names = sorted(part.keys if keys is None else [k for k in keys if k in set(part.keys)])
        if not names:
            return
        if part.kind == "table":
            rel = f"SELECT _step, {', '.join(f'CAST({q(k)} AS DOUBLE)' for k in names)} FROM {q(part.source)}"
            # insertion order is step order (the table was loaded from step-ordered parts); _write checks it
            batches = self.con.sql(f"{rel} WHERE _step >= {a} AND _step < {b}").to_arrow_reader(rows_per_batch)
        else:
            pf = self._file(part)
            batches = pf.iter_batches(batch_size=rows_per_batch, columns=["_step", *names], use_threads=False)
        key_arr = pa.array(names, pa.string())
        for rb in batches:
            steps = rb.column(0).to_numpy(zero_copy_only=False).astype(np.int64)
            keep = (steps >= a) & (steps < b)
            if not keep.any():
                continue
            vals = np.empty((len(steps), len(names)))
            valid = np.empty_like(vals, dtype=bool)
            for j in range(len(names)):
                col = rb.column(j + 1).cast(pa.float64())
                valid[:, j] = np.asarray(col.is_valid()) if col.null_count else True
                vals[:, j] = col.to_numpy(zero_copy_only=False)
            valid &= keep[:, None]
            rows, cols = np.nonzero(valid)  # row-major: step order, then key order
            yield pa.record_batch([pa.array(steps[rows]), key_arr.take(pa.array(cols)), pa.array(vals[rows, cols])],
                                  names=["step", "key", "value"])

    def _file(self, part: Part) -> pq.ParquetFile:
        """pyarrow handle with the footer parsed once per process (a 757-column footer costs ~10-20 ms)."""
        path = str(self.home / part.source)
        pf = _FOOTERS.get(path)
        if pf is None:  # the open handle too: constructing a ParquetFile over 757 columns costs ~10 ms
            pf = _FOOTERS[path] = pq.ParquetFile(path, pre_buffer=False)
        return pf

    def step_range(self, segments) -> tuple[int | None, int | None]:
        los, his = [], []
        for part, a, b in parts_for(self.con, segments):
            los.append(a)
            his.append(b - 1)
        tlo, thi = M.step_range(self.con, segments)
        if tlo is not None:
            los.append(tlo)
            his.append(thi)
        return (min(los), max(his)) if los else (None, None)

    def last_values(self, segments, keys: Sequence[str]) -> dict[str, tuple[int, float]]:
        """(step, value) of each key's last logged point: long table first, then parts newest first,
        reading only the columns still unresolved and only the newest row groups that hold them."""
        out: dict[str, tuple[int, float]] = {}
        tail, params = self._tail_sql(segments, keys, None, None)
        if tail:
            for k, s, v in self.con.execute(
                    f"SELECT key, max(step), arg_max(value, step) FROM ({tail}) GROUP BY key", params).fetchall():
                out[k] = (int(s), v)
        todo = [k for k in keys if k not in out]
        for part, a, b in reversed(parts_for(self.con, segments)):
            want = [k for k in todo if k in set(part.keys)]
            if not want:
                continue
            span = 1_000
            while want:  # look back from the part's end in growing windows
                lo_w = max(a, b - span)
                rel = self._part_long_sql(part, lo_w, b, want)
                for k, s, v in self.con.execute(
                        f"SELECT key, max(step), arg_max(value, step) FROM ({rel}) GROUP BY key").fetchall():
                    out[k] = (int(s), v)
                self.release()
                want = [k for k in want if k not in out]
                if lo_w == a:
                    break
                span *= 8
            todo = [k for k in todo if k not in out]
            if not todo:
                break
        return out

    def detector_read(self, segments, keys: Sequence[str], lo: int, hi: int | None) -> pa.Table:
        """analysis.detectors.read: long (key, step, value) for a few keys at full resolution."""
        rel, params = self.long_sql(segments, keys, lo, hi)
        out = self.con.sql(f"SELECT key, step, value FROM ({rel})", params=params).to_arrow_table()
        self.release()
        return out

    def nonfinite(self, segments, lo: int, hi: int | None) -> list[tuple]:
        """analysis.detectors.nonfinite's scan: (key, first step, count, a value) of NaN/Inf, all keys.

        Decodes every column of every part in range (DuckDB's UNPIVOT: ~3x faster than pyarrow
        reading 757 columns); the product should keep each part's result (parts are immutable)."""
        found: dict[str, list] = {}
        for part, a0, b0 in parts_for(self.con, segments, lo, hi):
            cols = ", ".join(f"CAST({q(k)} AS DOUBLE) AS {q(k)}" for k in part.keys)
            for a in range(a0, b0, 50_000):  # bounded: an all-column UNPIVOT of 400k rows needs > 512MB
                b = min(b0, a + 50_000)
                rel = (f"UNPIVOT (SELECT CAST(_step AS BIGINT) AS _step, {cols} FROM {self._rel(part)}"
                       f" WHERE _step >= {a} AND _step < {b}) ON COLUMNS(* EXCLUDE (_step)) INTO NAME key VALUE value")
                for k, s, n, v in self.con.execute(f"SELECT key, min(_step), count(*), any_value(value) FROM ({rel})"
                                                   " WHERE NOT isfinite(value) GROUP BY key").fetchall():
                    f = found.setdefault(k, [int(s), 0, v])
                    f[0], f[1] = min(f[0], int(s)), f[1] + n
        tail, params = self._tail_sql(segments, None, lo, hi)
        for k, s, n, v in self.con.execute(f"SELECT key, min(step), count(*), any_value(value) FROM ({tail})"
                                           " WHERE NOT isfinite(value) GROUP BY key", params).fetchall():
            f = found.setdefault(k, [int(s), 0, v])
            f[0], f[1] = min(f[0], int(s)), f[1] + n
        return sorted(((k, f[0], f[1], f[2]) for k, f in found.items()), key=lambda r: (r[1], r[0]))


_FOOTERS: dict[str, pq.ParquetFile] = {}  # the product: an LRU of open files, keyed by path


def settings(con: duckdb.DuckDBPyConnection, memory_limit: str | None = None, threads: int | None = None) -> None:
    con.execute("SET enable_progress_bar = false")
    con.execute("SET parquet_metadata_cache = true")
    if memory_limit:
        con.execute(f"SET memory_limit = '{memory_limit}'")
    if threads:
        con.execute(f"SET threads = {int(threads)}")


def data_home() -> Path:
    return Path(os.environ["MARINCTL_HOME"])
