"""PROTOTYPE comparison, part 2: the product's read paths on (a) today's long table, (b) parquet
parts + long tail, (c) a wide DuckDB table + long tail — every result checked equal to (a).

(a) is read through marinctl's own store functions (store.metrics, the detectors' SQL);
(b) and (c) through bench/proto_parts.Reader. Medians of --read-repeat, ratio = a / b.
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench import proto_parts as P
from marinctl.store import metrics as M

DENSE = ["train/loss", "grad/norm/total", "throughput/tokens_per_second", "optim/learning_rate"]
WATCH = ["params/norm/stacked_blocks.3.mlp.router_bias", "grad/norm/stacked_blocks.3.attn.w_q"]
DETECT = ["train/loss", "grad/norm/total", "throughput/tokens_per_second", "throughput/duration", "_timestamp",
          "train/router/routing_entropy_mean", "train/router/router_z_loss", "moe/drop_fraction",
          "train/router/capacity_overflow_rate_mean", "params/norm/total"]


def timed(fn, repeat: int):
    xs, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs), out


# --- (a): today's store functions, as the product calls them ----------------------------------

def a_last_values(con, segs, keys):
    ids = M.key_ids(con, keys)
    where, params = M.segment_filter(segs)
    rows = con.execute(f"SELECT key_id, max(step), arg_max(value, step) FROM metrics WHERE key_id IN"
                       f" ({','.join(str(i) for i in ids.values())}) AND {where} GROUP BY key_id", params).fetchall()
    back = {v: k for k, v in ids.items()}
    return {back[k]: (int(s), v) for k, s, v in rows}


def a_nonfinite(con, segs, lo):
    where, params = M.segment_filter(segs)
    return con.execute(
        "SELECT k.key, min(m.step), count(*), any_value(m.value) FROM metrics m JOIN metric_keys k USING (key_id)"
        f" WHERE m.step >= ? AND NOT isfinite(m.value) AND {where.replace('run_pk', 'm.run_pk').replace('step', 'm.step')}"
        " GROUP BY k.key ORDER BY 2, 1", [lo, *params]).fetchall()


def a_export(con, segs, keys, out: Path):
    sql, params = M.export_relation_sql(segs, keys)
    return _write(con.sql(sql, params=params).to_arrow_reader(100_000), out)


def _write(batches, out: Path) -> tuple[int, float, bool]:
    """Write the export; returns (rows, sum of finite values, sorted by step then key?)."""
    import pyarrow.compute as pc

    n, total, writer, ordered, prev = 0, 0.0, None, True, None
    try:
        for b in batches:
            if b.num_rows == 0:
                continue
            st, ky = b.column(0), b.column(1)
            head = (st[0].as_py(), ky[0].as_py())
            if prev is not None and head <= prev:
                ordered = False
            if b.num_rows > 1:
                up = pc.greater(st.slice(1), st.slice(0, b.num_rows - 1))
                eq = pc.equal(st.slice(1), st.slice(0, b.num_rows - 1))
                kup = pc.greater(ky.slice(1), ky.slice(0, b.num_rows - 1))
                if not pc.all(pc.or_(up, pc.and_(eq, kup))).as_py():
                    ordered = False
            prev = (st[-1].as_py(), ky[-1].as_py())
            if writer is None:
                writer = pq.ParquetWriter(out, b.schema)
            writer.write_batch(b)
            n += b.num_rows
            v = b.column(2).to_numpy(zero_copy_only=False)
            total += float(np.nansum(np.where(np.isfinite(v), v, 0.0)))
    finally:
        if writer is not None:
            writer.close()
    return n, round(total, 3), ordered


def a_detector_read(con, segs, keys, lo, hi):
    from marinctl.analysis.detect.detectors import read

    return read(con, segs, keys, lo, hi)


# --- equality --------------------------------------------------------------------------------

def same(x, y) -> bool:
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], np.ndarray):
        return np.array_equal(x[0], y[0]) and np.allclose(x[1], y[1], equal_nan=True, rtol=0, atol=0)
    if isinstance(x, dict) and x and isinstance(next(iter(x.values())), M.Envelope):
        if set(x) != set(y):
            return False
        for k in x:
            for f in ("step_lo", "step_hi", "vmin", "vmax", "first", "last", "mean", "count", "nonfinite",
                      "step_of_max", "step_of_min"):
                if not np.allclose(getattr(x[k], f), getattr(y[k], f), equal_nan=True, rtol=1e-12, atol=1e-12):
                    return False
        return True
    if isinstance(x, pa.Table):
        def norm(t):
            t = t.select(["key", "step", "value"]).sort_by([("key", "ascending"), ("step", "ascending")])
            return t.column(0).to_pylist(), t.column(1).to_numpy(), t.column(2).to_numpy()
        (ka, sa, va), (kb, sb, vb) = norm(x), norm(y)
        return ka == kb and np.array_equal(sa, sb) and np.array_equal(va, vb, equal_nan=True)
    if isinstance(x, list) and x and isinstance(x[0], tuple):  # rows; NaN == NaN
        return len(x) == len(y) and all(_row_eq(a, b) for a, b in zip(x, y))
    if isinstance(x, dict) and x and isinstance(next(iter(x.values())), tuple):
        return set(x) == set(y) and all(_row_eq(x[k], y[k]) for k in x)
    if isinstance(x, tuple) and len(x) == 3 and isinstance(x[2], bool):  # exports: rows, sum, sorted
        import math

        return x[0] == y[0] and math.isclose(x[1], y[1], rel_tol=1e-12) and x[2] and y[2]
    return x == y


def _row_eq(a, b) -> bool:
    import math

    return len(a) == len(b) and all(
        u == v or (isinstance(u, float) and isinstance(v, float) and math.isnan(u) and math.isnan(v)) for u, v in zip(a, b))


# --- building (c) from (b) -------------------------------------------------------------------

def build_wide(work: Path) -> Path:
    """(c): copy of (b) whose parts are loaded into one wide DuckDB table (the floor's load)."""
    home_c = work / "c"
    if (home_c / "built").exists():
        return home_c
    shutil.rmtree(home_c, ignore_errors=True)
    home_c.mkdir()
    shutil.copy(work / "b" / "marinctl.duckdb", home_c / "marinctl.duckdb")
    con = duckdb.connect(str(home_c / "marinctl.duckdb"))
    P.settings(con, "4GB")
    parts = con.execute("SELECT run_pk, source, lo, hi, keys FROM history_parts ORDER BY run_pk, lo").fetchall()
    pk = parts[0][0]
    flist = "[" + ",".join(P.lit(str(work / "b" / p[1])) for p in parts) + "]"
    lo, hi = parts[0][2], parts[-1][3]
    t = time.perf_counter()
    con.execute(f"CREATE TABLE wide_{pk} AS SELECT * FROM read_parquet({flist}) WHERE _step >= {lo} AND _step < {hi}")
    keys = sorted({k for p in parts for k in p[4]})
    con.execute("DELETE FROM history_parts")
    con.execute("INSERT INTO history_parts VALUES (?, 1, ?, 'table', ?, ?, ?, ?, NULL, NULL, ?)",
                [pk, f"wide_{pk}", lo, hi, lo, hi, keys])
    con.execute("CHECKPOINT")
    print(f"(c) built: wide table loaded in {time.perf_counter() - t:.1f} s; file "
          f"{(home_c / 'marinctl.duckdb').stat().st_size / 2**20:,.0f} MiB")
    con.close()
    (home_c / "built").touch()
    return home_c


# --- the section -----------------------------------------------------------------------------

def read_section(work: Path, files, args, threads: int | None = None, engine: str = "arrow") -> None:
    home_a, home_b = work / "a", work / "b"
    home_c = build_wide(work)
    ca = duckdb.connect(str(home_a / "marinctl.duckdb"), read_only=True)
    cb = duckdb.connect(str(home_b / "marinctl.duckdb"), read_only=True)
    cc = duckdb.connect(str(home_c / "marinctl.duckdb"), read_only=True)
    for c in (ca, cb, cc):
        P.settings(c, "512MB", threads)
    rb, rc = P.Reader(cb, home_b, engine), P.Reader(cc, home_c)
    pk = ca.execute("SELECT run_pk FROM runs").fetchall()[0][0]
    segs = [(pk, None, None)]
    last = ca.execute("SELECT max(step) FROM metrics").fetchall()[0][0]
    n = last + 1
    mid = n // 2
    all_keys = M.run_keys(ca, [pk])
    some = DENSE[:3] + WATCH + ["eval/paloma/macro_loss"]
    sizes = {k: sum(f.stat().st_size for f in (h.glob('*.duckdb'))) / 2**20 for k, h in (("a", home_a), ("b", home_b), ("c", home_c))}
    parts_mib = sum(f.stat().st_size for f in (home_b / "history").rglob("*.parquet")) / 2**20
    print(f"\n== read paths, {n:,} steps, {len(all_keys)} keys; (a) {sizes['a']:,.0f} MiB DuckDB; (b) {sizes['b']:,.0f} MiB"
          f" DuckDB + {parts_mib:,.0f} MiB parquet; (c) {sizes['c']:,.0f} MiB DuckDB; threads={threads or 'default'}; (b) parts read via {engine} ==")
    R = args.read_repeat
    tmp = work / "export.parquet"
    cases = [
        ("series, dense key, all steps", lambda: M.series(ca, segs, DENSE[0]), lambda r: r.series(segs, DENSE[0]), R),
        ("series, dense key, 5k-step window", lambda: M.series(ca, segs, DENSE[0], mid, mid + 5000),
         lambda r: r.series(segs, DENSE[0], mid, mid + 5000), R),
        ("series, watch key, all steps", lambda: M.series(ca, segs, WATCH[0]), lambda r: r.series(segs, WATCH[0]), R),
        ("series across part|tail boundary", lambda: M.series(ca, segs, DENSE[1], n - 8000, n),
         lambda r: r.series(segs, DENSE[1], n - 8000, n), R),
        ("downsample_many 6 keys, all, 1000 b", lambda: M.downsample_many(ca, segs, some, 0, n, 1000),
         lambda r: r.downsample_many(segs, some, 0, n, 1000), R),
        ("downsample_many 6 keys, 10k zoom", lambda: M.downsample_many(ca, segs, some, mid, mid + 10_000, 200),
         lambda r: r.downsample_many(segs, some, mid, mid + 10_000, 200), R),
        ("keys a run logged", lambda: M.run_keys(ca, [pk]), lambda r: r.run_keys([pk]), R),
        ("last value, 20 keys", lambda: a_last_values(ca, segs, all_keys[::max(1, len(all_keys) // 20)]),
         lambda r: r.last_values(segs, all_keys[::max(1, len(all_keys) // 20)]), R),
        ("last value, every key", lambda: a_last_values(ca, segs, all_keys), lambda r: r.last_values(segs, all_keys), R),
        ("detectors: 10 keys, full resolution", lambda: a_detector_read(ca, segs, DETECT, 0, None),
         lambda r: r.detector_read(segs, DETECT, 0, None), R),
        ("detectors: nonfinite scan, all keys", lambda: a_nonfinite(ca, segs, 0), lambda r: r.nonfinite(segs, 0, None), 1),
        ("export 3 keys, sorted", lambda: a_export(ca, segs, DENSE[:3], tmp),
         lambda r: _write(r.export_batches(segs, DENSE[:3]), tmp), 1),
        ("export all keys, sorted", lambda: a_export(ca, segs, None, tmp),
         lambda r: _write(r.export_batches(segs, None), tmp), 1),
    ]
    print(f"{'read path':38} {'(a) ms':>9} {'(b) ms':>9} {'(c) ms':>9} {'a/b':>6} {'a/c':>6}  equal")
    results = []
    for label, fa, fb, rep in cases:
        ta, tb, tc = [], [], []
        for _ in range(rep):  # interleaved a, b, c: the machine's load drifts
            for xs, fn in ((ta, fa), (tb, lambda: fb(rb)), (tc, lambda: fb(rc))):
                t0, out = timed(fn, 1)
                xs.append((t0, out))
        (ya, yb, yc) = (ta[-1][1], tb[-1][1], tc[-1][1])
        ta, tb, tc = (statistics.median(x[0] for x in xs) for xs in (ta, tb, tc))
        ok = same(ya, yb) and same(ya, yc)
        results.append({"path": label, "a_ms": ta * 1e3, "b_ms": tb * 1e3, "c_ms": tc * 1e3, "equal": ok})
        print(f"{label:38} {ta * 1e3:9.1f} {tb * 1e3:9.1f} {tc * 1e3:9.1f} {ta / tb:6.2f} {ta / tc:6.2f}  {'yes' if ok else 'NO'}",
              flush=True)
    tmp.unlink(missing_ok=True)
    for c in (ca, cb, cc):
        c.close()
    (work / f"reads-{engine}-{threads or 'default'}.json").write_text(json.dumps(results))


def sweep(fs, work: Path, args) -> None:
    """DuckDB memory_limit / threads: their effect on the floor load and on (b)'s sync."""
    from bench.proto_store import measured
    import os

    files = [str(f) for f in fs.files]
    env = {**os.environ, "WANDB_BASE_URL": fs.url}
    print("\n== DuckDB settings sweep (one run each) ==")
    print(f"{'memory_limit':>12} {'threads':>7} {'floor s':>8} {'floor MiB':>10} {'(b) sync s':>11} {'(b) MiB':>8}")
    for mem, threads in (("256MB", 1), ("256MB", 2), ("512MB", 1), ("512MB", 2), ("1GB", 2), ("4GB", 2)):
        db = work / "sweep.duckdb"
        db.unlink(missing_ok=True)
        try:
            f = measured(["floor", str(db), mem, str(threads), "0", *files])
        except SystemExit as exc:
            f = {"wall": float("nan"), "peak_mib": float("nan")}
            print(f"  floor at {mem}/{threads} threads failed: {str(exc).splitlines()[-1][:100]}")
        db.unlink(missing_ok=True)
        home = work / "sweep_b"
        shutil.rmtree(home, ignore_errors=True)
        home.mkdir()
        b = measured(["parts", str(home), fs.url, fs.run_id, mem, str(threads)], {**env, "MARINCTL_HOME": str(home)})
        shutil.rmtree(home, ignore_errors=True)
        print(f"{mem:>12} {threads:7d} {f['wall']:8.2f} {f['peak_mib']:10,.0f} {b['wall']:11.2f} {b['peak_mib']:8,.0f}",
              flush=True)
    sys.stdout.flush()
