"""Reads of the full-resolution history that analysis scans (detectors, attribution, alignment).

Each read covers lineage segments (store/lineage.py): a run's own steps plus, for a fork
child, its parents' steps up to the fork; and both stored forms of history, parquet parts
and long rows (store/scan.py). Frames come back as Arrow tables (key, step, value) with the
key dictionary-encoded, so detection never materialises Python rows, nor one string per
value, for 400k steps. What needs a whole part decoded (first values, NaN/Inf) is answered
from the facts stored per part when it was registered (store/parts.py).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Sequence

import numpy as np

from marinctl.store import engine
from marinctl.store import Connection, scan
from marinctl.store.metrics import Segment

if TYPE_CHECKING:
    import pyarrow as pa


def _empty() -> pa.Schema:
    import pyarrow as pa
    return pa.schema([("key", pa.dictionary(pa.int32(), pa.string())), ("step", pa.int64()), ("value", pa.float64())])


def frame(con: Connection, segments: Sequence[Segment], keys: Sequence[str], lo: int, hi: int | None) -> pa.Table:
    """Long (key, step, value) of `keys` over the segments at steps [lo, hi), key dictionary-encoded."""
    import pyarrow as pa
    ids = scan.key_ids(con, keys)
    if not ids or not segments:
        return _empty().empty_table()
    names = list(ids)
    order = np.array(sorted(ids.values()), np.int64)
    index = np.array([names.index(n) for n in sorted(ids, key=ids.get)], np.int32)
    dictionary = pa.array(names, pa.string())

    def as_frame(t: pa.Table) -> pa.Table:
        kid = t.column("key_id").to_numpy()
        codes = index[np.searchsorted(order, kid)]
        # one record batch per piece (a part, the long rows): a frame's batches come in step order
        return pa.table([pa.DictionaryArray.from_arrays(pa.array(codes, pa.int32()), dictionary),
                         t.column("step").combine_chunks(), t.column("value").combine_chunks()], schema=_empty())

    out = [as_frame(scan.part_rows(p, names, ids)) for p in scan.pieces(con, segments, lo, hi)]
    tail = engine.relation(con, f"SELECT run_pk::INTEGER AS run_pk, key_id::INTEGER AS key_id, step, value FROM metrics"
                                f" WHERE key_id IN ({','.join(str(int(i)) for i in ids.values())})"
                                f" AND {scan.long_where(segments, lo, hi)}").to_arrow_table()
    out.append(as_frame(tail))
    return pa.concat_tables([t for t in out if t.num_rows] or [_empty().empty_table()])


def keys_with_prefix(con: Connection, prefix: str, exclude: Sequence[str] = ()) -> list[str]:
    """Every stored key starting with `prefix` (any run), minus `exclude`."""
    rows = con.execute("SELECT key FROM metric_keys WHERE starts_with(key, ?)", [prefix]).fetchall()
    skip = set(exclude)
    return [r[0] for r in rows if r[0] not in skip]


def first_values(con: Connection, segments: Sequence[Segment], keys: Sequence[str],
                 below: int | None = None) -> dict[str, tuple[int, float]]:
    """Each key's first finite (step, value) over the segments (keys never logged are absent);
    with `below`, only steps below it are read (a bounded scan; a key first logged later is absent)."""
    if below is not None:
        segments = [(pk, a, below if b is None else min(b, below)) for pk, a, b in segments]
        segments = [(pk, a, b) for pk, a, b in segments if a is None or a < b]
    ids = scan.key_ids(con, keys)
    if not ids or not segments:
        return {}
    names = {v: k for k, v in ids.items()}
    best: dict[int, tuple[int, float]] = {}

    def offer(kid: int, step, value) -> None:
        if step is not None and value is not None and (kid not in best or step < best[kid][0]):
            best[kid] = (int(step), float(value))

    pieces = scan.pieces(con, segments)
    stored = scan.part_facts(con, [p for p in pieces if p.covers_start], list(ids.values()),
                             "first_finite_step, first_finite")
    for p in pieces:
        if p.covers_start:   # the part's own first finite value, if it lies in the range read
            for kid, s, v in stored.get(p.part_id, []):
                if s is not None and s < p.b:
                    offer(kid, s, v)
        else:                # a segment starts inside the part: read those keys there
            t = scan.part_rows(p, list(ids), ids)
            for kid, s, v in _firsts(t):
                offer(kid, s, v)
    for kid, s, v in con.execute(
            f"SELECT key_id, min(step), arg_min(value, step) FROM metrics WHERE key_id IN"
            f" ({','.join(str(int(i)) for i in ids.values())}) AND isfinite(value) AND {scan.long_where(segments)}"
            " GROUP BY key_id").fetchall():
        offer(kid, s, v)
    return {names[k]: sv for k, sv in best.items()}


def _firsts(t: pa.Table) -> list[tuple[int, int, float]]:
    kid, step, value = (t.column(c).to_numpy() for c in ("key_id", "step", "value"))
    out = []
    fin = np.isfinite(value)
    for k in np.unique(kid[fin]):
        m = fin & (kid == k)
        i = int(np.argmin(np.where(m, step, np.iinfo(np.int64).max)))
        out.append((int(k), int(step[i]), float(value[i])))
    return out


def nonfinite(con: Connection, segments: Sequence[Segment], lo: int, hi: int | None) -> list[tuple[str, int, int, float]]:
    """(key, first step, count, value at the first step) of NaN/Inf values at steps [lo, hi), by first step.

    Parts answer from their stored NaN/Inf list (never decoded again); long rows are scanned."""
    if not segments:
        return []
    pieces = [f"SELECT key_id, step, value FROM part_nonfinite WHERE part_id = {p.part_id}"
              f" AND step >= {p.a} AND step < {p.b}" for p in scan.pieces(con, segments, lo, hi)]
    pieces.append(f"SELECT key_id, step, value FROM metrics WHERE NOT isfinite(value)"
                  f" AND {scan.long_where(segments, lo, hi)}")
    rows = con.execute(
        f"SELECT k.key, min(x.step), count(*), arg_min(x.value, x.step) FROM ({' UNION ALL '.join(pieces)}) x"
        " JOIN metric_keys k USING (key_id) GROUP BY k.key ORDER BY 2, 1").fetchall()
    return [(k, int(s), int(n), v) for k, s, n, v in rows]


def sampled(con: Connection, run_pk: int, key: str, upto: int, every: int, lo: int = 0) -> list[tuple[int, float]]:
    """A run's own (step, value) of `key` at every `every`-th step in [lo, upto], and at `upto`."""
    steps, values = scan.arrays(con, [(run_pk, lo, upto + 1)], key)
    keep = (steps % int(every) == 0) | (steps == upto)
    return [(int(s), float(v)) for s, v in zip(steps[keep], values[keep])]


def largest_jump(con: Connection, run_pk: int, key: str, lo: int, hi: int) -> tuple[int, float] | None:
    """The step in [lo, hi] whose value rose most over the step before it (a `_timestamp` gap)."""
    steps, values = scan.arrays(con, [(run_pk, None, None)], key, lo, hi + 1)
    if len(steps) < 2:
        return None
    dt = np.diff(values)
    i = int(np.argmax(np.where(np.isnan(dt), np.inf, dt)))   # NaN sorts first, as in DuckDB's DESC
    return int(steps[i + 1]), float(dt[i])


def _prefixed(con: Connection, prefix: str, suffix: str = "", exclude: Sequence[str] = ()) -> list[str]:
    skip = set(exclude)
    rows = con.execute("SELECT key FROM metric_keys WHERE starts_with(key, ?) AND ends_with(key, ?)",
                       [prefix, suffix]).fetchall()
    return [r[0] for r in rows if r[0] not in skip]


def _clusters(steps: Sequence[int], gap: int = 1_000) -> list[tuple[int, int]]:
    """Sorted steps grouped into [lo, hi) ranges no wider than needed (one read per cluster)."""
    out: list[list[int]] = []
    for s in sorted(set(int(x) for x in steps)):
        if out and s - out[-1][1] <= gap:
            out[-1][1] = s
        else:
            out.append([s, s])
    return [(a, b + 1) for a, b in out]


def values_at(con: Connection, segments: Sequence[Segment], prefix: str, steps: Sequence[int],
              exclude: Sequence[str] = ()) -> dict[int, dict[str, float]]:
    """{step: {key: value}} of every key starting with `prefix` (minus `exclude`) at the given steps."""
    keys = _prefixed(con, prefix, exclude=exclude)
    if not steps or not keys:
        return {}
    wanted = ",".join(str(int(s)) for s in set(steps))
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for lo, hi in _clusters(steps):
        with scan.relation(con, segments, keys, lo, hi) as rel:
            rows = con.execute(f"SELECT r.step, k.key, r.value FROM {rel} r JOIN metric_keys k USING (key_id)"
                               f" WHERE r.step IN ({wanted})").fetchall()
        for step, key, value in rows:
            out[int(step)][key] = value
    return out


def rows_between(con: Connection, segments: Sequence[Segment], prefix: str, suffix: str,
                 lo: int, hi: int) -> list[tuple[str, int, float]]:
    """(key, step, value) of keys starting with `prefix` and ending with `suffix`, steps lo..hi."""
    keys = _prefixed(con, prefix, suffix)
    if not keys:
        return []
    with scan.relation(con, segments, keys, lo, hi + 1) as rel:
        return con.execute(f"SELECT k.key, r.step, r.value FROM {rel} r JOIN metric_keys k USING (key_id)").fetchall()
