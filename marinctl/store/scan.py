"""A run's history read across its two stored forms: registered parquet parts and `metrics`.

Finished W&B history is kept as the exported parquet parts (store/parts.py); the live tail,
local runs and repro runs are long rows in `metrics`. No long row of a run lies inside one of
its parts' ranges, so every history read is a plain union of both sides, and this module is
the one place that union is made:
- `relation(...)`: a SQL relation (run_pk, key_id, step, value) for the store's queries —
  the parts' rows are read by pyarrow (only the keys asked for, only the row groups whose
  `_step` statistics overlap the steps) and registered as one Arrow table beside `metrics`;
- `arrays(...)`: one key's (steps, values), without SQL over the parts;
- `export(...)`: long rows sorted by step then key, streamed in bounded memory;
- `pieces(...)`: which parts a read covers, for reads answered from stored per-part facts.
"""

from __future__ import annotations

import itertools
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

from marinctl.store import engine
from marinctl.store import Connection
from marinctl.store.part_files import open_part
from marinctl.store.parts import root_of

if TYPE_CHECKING:
    import pyarrow as pa

Segment = tuple[int, int | None, int | None]   # (run_pk, lo inclusive or None, hi exclusive or None)


@lru_cache(maxsize=1)
def long_schema() -> pa.Schema:
    """Part rows in the long table's shape (a function: pyarrow is imported only by reads that meet parts)."""
    import pyarrow as pa
    return pa.schema([("run_pk", pa.int32()), ("key_id", pa.int32()), ("step", pa.int64()), ("value", pa.float64())])


_NAMES = itertools.count()
_LOW, _HIGH = -(2 ** 62), 2 ** 62


@dataclass(frozen=True)
class Piece:
    """A part as one read sees it: the part, its file, and the steps [a, b) read from it."""

    run_pk: int
    part_id: int
    path: Path
    lo: int          # the part's own range [lo, hi)
    hi: int
    a: int           # the range read: the part's range ∩ the segment ∩ the read's [lo, hi)
    b: int
    sorted: bool
    first_step: int | None
    last_step: int | None

    @property
    def whole(self) -> bool:
        """The read covers the part's whole range (its stored facts answer for it)."""
        return self.a <= self.lo and self.b >= self.hi

    @property
    def covers_start(self) -> bool:
        return self.a <= self.lo

    @property
    def covers_end(self) -> bool:
        return self.b >= self.hi


def _bounds(seg: Segment, lo: int | None, hi: int | None) -> tuple[int, int]:
    a = max(x for x in (seg[1], lo, _LOW) if x is not None)
    b = min(x for x in (seg[2], hi, _HIGH) if x is not None)
    return a, b


def pieces(con: Connection, segments: Sequence[Segment], lo: int | None = None, hi: int | None = None) -> list[Piece]:
    """Every part the segments and [lo, hi) touch, segment by segment, each in step order."""
    if not segments:
        return []
    pks = sorted({s[0] for s in segments})
    rows = con.execute(f"SELECT run_pk, part_id, file, lo, hi, sorted, first_step, last_step FROM history_parts"
                       f" WHERE run_pk IN ({','.join(str(int(p)) for p in pks)}) ORDER BY run_pk, lo").fetchall()
    if not rows:
        return []
    root = root_of(con)
    out = []
    for seg in segments:
        a, b = _bounds(seg, lo, hi)
        for pk, pid, rel, plo, phi, srt, fs, ls in rows:
            if pk == seg[0] and phi > a and plo < b:
                out.append(Piece(pk, pid, root / rel, plo, phi, max(a, plo), min(b, phi), bool(srt), fs, ls))
    return out


def long_where(segments: Sequence[Segment], lo: int | None = None, hi: int | None = None, alias: str = "") -> str:
    """SQL condition (literals only) selecting the segments' rows of `metrics` in [lo, hi)."""
    p = f"{alias}." if alias else ""
    clauses = []
    for seg in segments:
        a, b = _bounds(seg, lo, hi)
        c = f"({p}run_pk = {int(seg[0])}"
        if a > _LOW:
            c += f" AND {p}step >= {a}"
        if b < _HIGH:
            c += f" AND {p}step < {b}"
        clauses.append(c + ")")
    return "(" + (" OR ".join(clauses) or "false") + ")"


def key_ids(con: Connection, keys: Sequence[str]) -> dict[str, int]:
    if not keys:
        return {}
    rows = con.execute(f"SELECT key, key_id FROM metric_keys WHERE key IN ({','.join('?' * len(keys))})",
                       list(keys)).fetchall()
    return dict(rows)


def _all_names(con: Connection) -> dict[str, int]:
    return dict(con.execute("SELECT key, key_id FROM metric_keys").fetchall())


# --- part rows ------------------------------------------------------------------------------------

def part_rows(piece: Piece, keys: Sequence[str] | None, ids: dict[str, int]) -> pa.Table:
    """Long rows (run_pk, key_id, step, value) of `keys` (None: all) in one piece; nulls dropped."""
    import pyarrow as pa
    pf = open_part(piece.path)
    names = list(pf.keys) if keys is None else keys
    kid_parts, step_parts, value_parts = [], [], []
    for steps, keep, cols in pf.chunks([k for k in names if k in ids], piece.a, piece.b):
        for key, vals, valid in cols:
            m = valid & keep
            n = int(m.sum())
            if n:
                kid_parts.append(np.full(n, ids[key], np.int32))
                step_parts.append(steps[m])
                value_parts.append(vals[m])
    if not step_parts:
        return long_schema().empty_table()
    n = sum(len(s) for s in step_parts)
    return pa.table([pa.array(np.full(n, piece.run_pk, np.int32)), pa.array(np.concatenate(kid_parts)),
                     pa.array(np.concatenate(step_parts)), pa.array(np.concatenate(value_parts))], schema=long_schema())


@contextmanager
def relation(con: Connection, segments: Sequence[Segment], keys: Sequence[str] | None,
             lo: int | None = None, hi: int | None = None) -> Iterator[str]:
    """A SQL relation (run_pk, key_id, step, value): the segments' history of `keys` (None: every
    key) at steps [lo, hi), parts and long rows alike. Valid inside the `with` block only."""
    ids = _all_names(con) if keys is None else key_ids(con, keys)
    if not segments or (keys is not None and not ids):
        yield "(SELECT NULL::INTEGER AS run_pk, NULL::INTEGER AS key_id, NULL::BIGINT AS step, NULL::DOUBLE AS value WHERE false)"
        return
    tables = [part_rows(p, keys, ids) for p in pieces(con, segments, lo, hi)]
    where = long_where(segments, lo, hi)
    if keys is not None:
        where += f" AND key_id IN ({','.join(str(int(i)) for i in ids.values())})"
    tail = f"SELECT run_pk, key_id, step, value FROM metrics WHERE {where}"
    tables = [t for t in tables if t.num_rows]
    if not tables:
        yield f"({tail})"
        return
    import pyarrow as pa

    name = f"_scan_{next(_NAMES)}"
    engine.register(con, name, pa.concat_tables(tables) if len(tables) > 1 else tables[0])
    try:
        yield f"(SELECT run_pk, key_id, step, value FROM {name} UNION ALL {tail})"
    finally:
        con.unregister(name)


def arrays(con: Connection, segments: Sequence[Segment], key: str, lo: int | None = None,
           hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Every (step, value) of one key over the segments at [lo, hi), sorted by step."""
    ids = key_ids(con, [key])
    if not ids or not segments:
        return np.empty(0, np.int64), np.empty(0, np.float64)
    st, vs = [], []
    for p in pieces(con, segments, lo, hi):
        t = part_rows(p, [key], ids)
        st.append(t.column("step").to_numpy())
        vs.append(t.column("value").to_numpy())
    res = con.execute(f"SELECT step, value FROM metrics WHERE key_id = {int(ids[key])} AND {long_where(segments, lo, hi)}"
                      ).fetchnumpy()
    st.append(np.asarray(res["step"], np.int64))
    vs.append(np.asarray(res["value"], np.float64))
    steps, values = np.concatenate(st), np.concatenate(vs)
    if len(steps) > 1 and not np.all(steps[1:] >= steps[:-1]):
        order = np.argsort(steps, kind="stable")
        steps, values = steps[order], values[order]
    return steps, values


# --- per-part facts ---------------------------------------------------------------------------------

def part_facts(con: Connection, parts: Sequence[Piece], ids: Sequence[int] | None,
               columns: str) -> dict[int, list[tuple]]:
    """{part_id: [(key_id, *columns)]} from `part_keys` for these parts (and key ids, unless None)."""
    if not parts:
        return {}
    sql = (f"SELECT part_id, key_id, {columns} FROM part_keys WHERE part_id IN"
           f" ({','.join(str(p.part_id) for p in parts)})")
    if ids is not None:
        if not ids:
            return {}
        sql += f" AND key_id IN ({','.join(str(int(i)) for i in ids)})"
    out: dict[int, list[tuple]] = {}
    for row in con.execute(sql).fetchall():
        out.setdefault(row[0], []).append(row[1:])
    return out


def step_range(con: Connection, segments: Sequence[Segment]) -> tuple[int | None, int | None]:
    """First and last step holding any value over the segments."""
    if not segments:
        return None, None
    los, his = [], []
    for p in pieces(con, segments):
        if p.first_step is None:
            continue
        if p.whole:
            los.append(p.first_step)
            his.append(p.last_step)
        else:   # a segment cuts the part: the steps of its rows in the cut range
            steps = _steps_of(p)
            steps = steps[(steps >= p.a) & (steps < p.b)]
            if len(steps):
                los.append(int(steps.min()))
                his.append(int(steps.max()))
    lo, hi = con.execute(f"SELECT min(step), max(step) FROM metrics WHERE {long_where(segments)}").fetchall()[0]
    if lo is not None:
        los.append(lo)
        his.append(hi)
    return (int(min(los)), int(max(his))) if los else (None, None)


def _steps_of(p: Piece) -> np.ndarray:
    pf = open_part(p.path)
    with pf.lock:
        col = pf.file.read(columns=["_step"]).column(0)
    return col.drop_null().to_numpy().astype(np.int64, copy=False)


def run_keys(con: Connection, run_pks: Sequence[int]) -> list[str]:
    """Keys these runs logged, sorted. The distinct ids first, then their names: written as `key_id IN
    (long rows) OR key_id IN (parts)` the same answer is an order of magnitude slower at hero scale
    (bench/NOTES.md)."""
    if not run_pks:
        return []
    marks = ",".join(str(int(p)) for p in run_pks)
    rows = con.execute(
        f"SELECT k.key FROM metric_keys k JOIN (SELECT DISTINCT key_id FROM metrics WHERE run_pk IN ({marks})"
        f" UNION SELECT p.key_id FROM part_keys p JOIN history_parts h ON h.part_id = p.part_id"
        f" WHERE h.run_pk IN ({marks})) USING (key_id) ORDER BY 1").fetchall()
    return [r[0] for r in rows]


# --- export ------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def export_schema() -> pa.Schema:
    import pyarrow as pa
    return pa.schema([("step", pa.int64()), ("key", pa.string()), ("value", pa.float64())])


def export(con: Connection, segments: Sequence[Segment], keys: Sequence[str] | None,
           rows_per_batch: int = 100_000, window_steps: int = 5_000) -> Iterator[pa.RecordBatch]:
    """Long rows (step, key, value) sorted by step then key, as record batches, in bounded memory.

    Segments are taken in step order (a stitched lineage's never overlap). A sorted part is
    streamed as it is: its rows come in step order and its columns are taken in key order,
    so nothing is sorted. Long rows between parts (and unsorted parts) are sorted one window
    of `window_steps` logged steps at a time.
    """
    ids = _all_names(con) if keys is None else key_ids(con, keys)
    if not ids:
        return
    names = {v: k for k, v in ids.items()}
    for seg in sorted(segments, key=lambda s: s[1] if s[1] is not None else _LOW):
        cursor = _bounds(seg, None, None)[0]
        for p in pieces(con, [seg]) + [None]:
            stop = p.a if p is not None else _bounds(seg, None, None)[1]
            yield from _long_sorted(con, seg[0], cursor, stop, ids, names, keys is not None, rows_per_batch,
                                    window_steps)
            if p is None:
                break
            if p.sorted:
                yield from _part_sorted(p, keys, ids, rows_per_batch)
            else:
                yield from _piece_windows(con, p, keys, ids, names, window_steps)
            cursor = p.b


def _long_sorted(con, run_pk, a, b, ids, names, filtered, rows_per_batch, window) -> Iterator[pa.RecordBatch]:
    where = long_where([(run_pk, a, b)], alias="m")
    if filtered:
        where += f" AND m.key_id IN ({','.join(str(int(i)) for i in ids.values())})"
    steps = [r[0] for r in con.execute(f"SELECT DISTINCT m.step FROM metrics m WHERE {where} ORDER BY 1").fetchall()]
    for i in range(0, len(steps), window):
        lo, hi = steps[i], steps[min(i + window, len(steps)) - 1] + 1
        sql = (f"SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
               f" WHERE {where} AND m.step >= {lo} AND m.step < {hi} ORDER BY m.step, k.key")
        for batch in engine.relation(con, sql).to_arrow_reader(rows_per_batch):
            if batch.num_rows:
                yield batch.cast(export_schema()) if batch.schema != export_schema() else batch


def _part_sorted(p: Piece, keys, ids, rows_per_batch: int) -> Iterator[pa.RecordBatch]:
    """A sorted part streamed through its own file handle (the shared one stays free for other readers)."""
    import pyarrow as pa
    from marinctl.store.part_files import open_file, values

    pf = open_part(p.path)
    wanted = sorted(k for k in (pf.keys if keys is None else keys) if k in pf.keys and k in ids)
    if not wanted:
        return
    key_arr = pa.array(wanted, pa.string())
    step_rows = max(1, rows_per_batch // len(wanted))
    tops = list(dict.fromkeys(pf.keys[k][0] for k in wanted))
    own = open_file(p.path)
    try:
        for rb in own.iter_batches(batch_size=step_rows, row_groups=pf.groups(p.a, p.b),
                                   columns=["_step", *tops], use_threads=True):
            table = pa.Table.from_batches([rb])
            col = table.column(0)
            keep = np.asarray(col.is_valid()) if col.null_count else np.ones(len(col), bool)
            steps = (col.fill_null(0) if col.null_count else col).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            keep &= (steps >= p.a) & (steps < p.b)
            if not keep.any():
                continue
            vals = np.empty((len(steps), len(wanted)))
            valid = np.empty(vals.shape, bool)
            for j, k in enumerate(wanted):
                vals[:, j], valid[:, j] = values(table, pf.keys[k])
            valid &= keep[:, None]
            rows, cols = np.nonzero(valid)   # row-major: step order, then key order
            if len(rows):
                yield pa.record_batch([pa.array(steps[rows]), key_arr.take(pa.array(cols)),
                                       pa.array(vals[rows, cols])], schema=export_schema())
    finally:
        own.close()


def _piece_windows(con, p: Piece, keys, ids, names, window: int) -> Iterator[pa.RecordBatch]:
    """An unsorted part: its rows sorted one step window at a time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for lo in range(p.a, p.b, window):
        t = part_rows(Piece(p.run_pk, p.part_id, p.path, p.lo, p.hi, lo, min(lo + window, p.b), p.sorted,
                            p.first_step, p.last_step), keys, ids)
        if not t.num_rows:
            continue
        key = pa.array([names[i] for i in t.column("key_id").to_pylist()], pa.string())
        out = pa.table({"step": t.column("step"), "key": key, "value": t.column("value")}, schema=export_schema())
        idx = pc.sort_indices(out, sort_keys=[("step", "ascending"), ("key", "ascending")])
        yield from out.take(idx).to_batches()


# --- the SQL form, for `marinctl sql` ------------------------------------------------------------------

def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def inline_sql(con: Connection) -> str:
    """Every run's history as one self-contained SQL relation (run_pk, step, key, value): parts
    read in place by DuckDB's `read_parquet` and unpivoted, beside the long rows. For a user's
    own queries (a view must outlive any registered table); an all-key scan decodes every part."""
    selects = ["SELECT m.run_pk, m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"]
    root = root_of(con)
    for run_pk, rel, lo, hi in con.execute("SELECT run_pk, file, lo, hi FROM history_parts ORDER BY run_pk, lo").fetchall():
        path = root / rel
        if not path.exists():
            continue
        cols = []
        for key, (top, fields) in sorted(open_part(path).keys.items()):
            expr = _ident(top)
            for f in fields:
                expr = f"struct_extract({expr}, {_literal(f)})"
            cols.append(f"CAST({expr} AS DOUBLE) AS {_ident(key)}")
        if not cols:
            continue
        selects.append(
            f"SELECT {int(run_pk)} AS run_pk, _marinctl_step AS step, key, value FROM (UNPIVOT"
            f" (SELECT CAST(_step AS BIGINT) AS _marinctl_step, {', '.join(cols)} FROM read_parquet({_literal(str(path))})"
            f" WHERE _step >= {int(lo)} AND _step < {int(hi)}) ON COLUMNS(* EXCLUDE (_marinctl_step))"
            f" INTO NAME key VALUE value)")
    return " UNION ALL ".join(f"({s})" for s in selects)
