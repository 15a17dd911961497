"""Windowed statistics over a long frame (key, step, value), computed by DuckDB.

Analysis decides what is anomalous; these functions only compute trailing medians, MADs,
gaps and crossings over a frame that store/history.py read, and return the rows that pass
the bar the caller gives. DuckDB's windowed `median`/`mad` over `ROWS BETWEEN n PRECEDING`
is what keeps full detection of a 400k-step run in seconds (bench/bench_explain.py).
Every window is trailing and excludes the current row unless said otherwise.
"""

from __future__ import annotations

from typing import Any, Sequence

import pyarrow as pa

from marinctl.store import Connection


def _until(hi: int | None) -> tuple[str, list[Any]]:
    return ("AND step < ?", [hi]) if hi is not None else ("", [])


class _Frame:
    """Register Arrow tables on the connection for one query, and always unregister them."""

    def __init__(self, con: Connection, **tables: pa.Table):
        self.con, self.tables = con, tables

    def __enter__(self) -> Connection:
        for name, table in self.tables.items():
            self.con.register(name, table)
        return self.con

    def __exit__(self, *exc) -> None:
        for name in self.tables:
            self.con.unregister(name)


def robust_z(con: Connection, data: pa.Table, specs: Sequence[tuple[str, str, int, float, float]],
             window: int, min_points: int, lo: int, hi: int | None) -> list[tuple[str, int, float, float, float]]:
    """Modified z-scores 0.6745·(y − median)/MAD over each key's trailing `window` points.

    `specs`: (key, transform 'log'|'raw', direction ±1, bar, MAD floor) per key; a point is
    returned when direction·z > bar and at least `min_points` precede it. Rows are
    (key, step, value, baseline in the value's units, z), by key then step.
    """
    cfg = pa.table({"key": [s[0] for s in specs], "xform": [s[1] for s in specs], "dir": [s[2] for s in specs],
                    "bar": [float(s[3]) for s in specs], "floor": [float(s[4]) for s in specs]})
    until, extra = _until(hi)
    with _Frame(con, _det_data=data, _det_cfg=cfg):
        return con.execute(f"""
            WITH x AS (
                SELECT d.key, d.step, d.value, c.dir, c.bar, c.floor, c.xform,
                       CASE WHEN c.xform = 'log' THEN ln(d.value) ELSE d.value END AS y
                FROM _det_data d JOIN _det_cfg c USING (key)
                WHERE isfinite(d.value) AND (c.xform <> 'log' OR d.value > 0)
            ), w AS (
                SELECT *, median(y) OVER win AS med, mad(y) OVER win AS dev, count(*) OVER win AS n
                FROM x WINDOW win AS (PARTITION BY key ORDER BY step ROWS BETWEEN {int(window)} PRECEDING AND 1 PRECEDING)
            )
            SELECT key, step, value, CASE WHEN xform = 'log' THEN exp(med) ELSE med END AS base,
                   0.6745 * (y - med) / greatest(dev, floor) AS z
            FROM w
            WHERE n >= {int(min_points)} AND step >= ? {until}
              AND dir * 0.6745 * (y - med) / greatest(dev, floor) > bar
            ORDER BY key, step
        """, [lo, *extra]).fetchall()


def above_trend(con: Connection, data: pa.Table, key: str, window: int, min_points: int, ratio: float,
                lo: int) -> list[tuple[int, float, float]]:
    """(step, value, trend) where a key's value exceeds `ratio` × the median of its previous `window` points."""
    with _Frame(con, _det_data=data):
        return con.execute(f"""
            WITH w AS (
                SELECT step, value, median(value) OVER (ORDER BY step ROWS BETWEEN {int(window)} PRECEDING AND 1 PRECEDING) AS trend,
                       count(*) OVER (ORDER BY step ROWS BETWEEN {int(window)} PRECEDING AND 1 PRECEDING) AS n
                FROM _det_data WHERE key = ? AND isfinite(value)
            )
            SELECT step, value, trend FROM w WHERE n >= {int(min_points)} AND value > {float(ratio)} * trend AND step >= ?
            ORDER BY step
        """, [key, lo]).fetchall()


def rate_drops(con: Connection, data: pa.Table, key: str, *, invert: bool, recent: int, base: int, min_points: int,
               ratio: float) -> list[tuple[int, float, float]]:
    """(step, recent median, baseline median) where the median rate of the last `recent` points
    (this one included) is below `ratio` × the median of the `base` points before them.

    The rate is the key's value, or 1/value with `invert` (a duration per step)."""
    with _Frame(con, _det_data=data):
        return con.execute(f"""
            WITH x AS (SELECT step, CASE WHEN ? THEN 1.0 / value ELSE value END AS rate
                       FROM _det_data WHERE key = ? AND isfinite(value) AND value > 0),
            w AS (SELECT step, rate,
                         median(rate) OVER (ORDER BY step ROWS BETWEEN {int(recent) - 1} PRECEDING AND CURRENT ROW) AS recent,
                         median(rate) OVER (ORDER BY step ROWS BETWEEN {int(base) + int(recent)} PRECEDING AND {int(recent)} PRECEDING) AS base,
                         count(*) OVER (ORDER BY step ROWS BETWEEN {int(base) + int(recent)} PRECEDING AND {int(recent)} PRECEDING) AS n
                  FROM x)
            SELECT step, recent, base FROM w WHERE n >= {int(min_points)} AND recent < {float(ratio)} * base ORDER BY step
        """, [invert, key]).fetchall()


def gaps(con: Connection, data: pa.Table, key: str, *, window: int, factor: float, min_seconds: float,
         lo: int, hi: int | None, since: int = 0) -> list[tuple[int, int, float | None, float | None, float | None]]:
    """(step, previous step, Δvalue, trailing median Δvalue, median step interval) where the
    steps skip at least two of the frame's usual logging intervals (a run logging every 10
    steps skips 10 every row: that is its interval, not a gap), or where `key` (a wall
    clock) jumped more than max(factor × its median Δ per row, min_seconds). Rows before `since`
    are not read (a fork child's own steps start after its parent's)."""
    until, extra = _until(hi)
    with _Frame(con, _det_data=data):
        return con.execute(f"""
            WITH t AS (SELECT step, value AS ts, lag(step) OVER (ORDER BY step) AS prev_step, lag(value) OVER (ORDER BY step) AS prev_ts
                       FROM _det_data WHERE key = ? AND step >= ?),
            w AS (SELECT *, ts - prev_ts AS dt, step - prev_step AS ds,
                         median(ts - prev_ts) OVER (ORDER BY step ROWS BETWEEN {int(window)} PRECEDING AND 1 PRECEDING) AS med_dt,
                         median(step - prev_step) OVER () AS med_ds
                  FROM t)
            SELECT step, prev_step, dt, med_dt, med_ds FROM w
            WHERE prev_step IS NOT NULL AND step >= ? {until}
              AND ((ds > 1 AND ds >= 2 * coalesce(med_ds, 1))
                   OR (dt > greatest({float(factor)} * coalesce(med_dt, 0), {float(min_seconds)})))
            ORDER BY step
        """, [key, since, lo, *extra]).fetchall()


def crossings(con: Connection, data: pa.Table, refs: dict[str, float], rel: float,
              lo: int, hi: int | None) -> list[tuple[str, int, float, float, float]]:
    """(key, step, value, reference, |value/reference − 1|) where a key first moves more than
    `rel` away from its reference (after being within it), by step then deviation."""
    ref_tab = pa.table({"key": list(refs), "ref": list(refs.values())})
    until, extra = _until(hi)
    with _Frame(con, _det_data=data, _det_ref=ref_tab):
        return con.execute(f"""
            WITH x AS (SELECT d.key, d.step, d.value, r.ref, abs(d.value / r.ref - 1) AS dev FROM _det_data d JOIN _det_ref r USING (key)),
            w AS (SELECT *, lag(dev) OVER (PARTITION BY key ORDER BY step) AS prev_dev FROM x)
            SELECT key, step, value, ref, dev FROM w
            WHERE dev > {float(rel)} AND (prev_dev IS NULL OR prev_dev <= {float(rel)}) AND step >= ? {until}
            ORDER BY step, dev DESC
        """, [lo, *extra]).fetchall()


def log_change_z(con: Connection, data: pa.Table, key: str, *, window: int, min_points: int, min_change: float,
                 bar: float, lo: int, hi: int | None, per_step: bool = False) -> list[tuple[int, int, float, float, float, float]]:
    """(step, previous step, value, Δlog, median change, z) where a key's change in log between
    logged points has |robust z| > bar over the previous `window` changes and |Δlog| > min_change.

    With `per_step` the change scored is Δlog divided by the steps it spans (and the median is
    per step too): a delta across a logging gap or a restart is judged as that many steps of
    change, not as one jump."""
    until, extra = _until(hi)
    rate = "d / (step - prev_step)" if per_step else "d"
    with _Frame(con, _det_data=data):
        return con.execute(f"""
            WITH x AS (SELECT step, value, ln(value) - lag(ln(value)) OVER (ORDER BY step) AS d, lag(step) OVER (ORDER BY step) AS prev_step
                       FROM _det_data WHERE key = ? AND isfinite(value) AND value > 0),
            r AS (SELECT *, {rate} AS c FROM x),
            w AS (SELECT *, median(c) OVER win AS med, mad(c) OVER win AS dev, count(c) OVER win AS n
                  FROM r WINDOW win AS (ORDER BY step ROWS BETWEEN {int(window)} PRECEDING AND 1 PRECEDING))
            SELECT step, prev_step, value, d, med, 0.6745 * (c - med) / greatest(dev, 1e-9) AS z FROM w
            WHERE n >= {int(min_points)} AND d IS NOT NULL AND abs(d) > {float(min_change)}
              AND abs(0.6745 * (c - med) / greatest(dev, 1e-9)) > {float(bar)}
              AND step >= ? {until}
            ORDER BY step
        """, [key, lo, *extra]).fetchall()


def by_key(con: Connection, data: pa.Table) -> dict[str, tuple[Any, Any]]:
    """A long (key, step, value) frame as {key: (steps, values)} numpy arrays in step order.

    One sort in DuckDB; analysis then walks each key's rows without pyarrow.compute (whose
    import alone costs explain a tenth of a second)."""
    import numpy as np

    if not data.num_rows:
        return {}
    with _Frame(con, _det_data=data):
        names = [r[0] for r in con.execute("SELECT DISTINCT key FROM _det_data ORDER BY key").fetchall()]
        res = con.execute("""
            SELECT k.i, d.step, d.value FROM _det_data d
            JOIN (SELECT key, (row_number() OVER (ORDER BY key) - 1)::INTEGER AS i FROM (SELECT DISTINCT key FROM _det_data)) k USING (key)
            ORDER BY k.i, d.step""").fetchnumpy()
    idx = np.asarray(res["i"])
    steps = np.asarray(res["step"], dtype=np.int64)
    values = np.asarray(res["value"], dtype=np.float64)
    cuts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1], True])
    return {names[int(idx[a])]: (steps[a:b], values[a:b]) for a, b in zip(cuts[:-1], cuts[1:])}
