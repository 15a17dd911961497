"""Store scale check: a hero-sized run in DuckDB, and single-series downsample latency.

SYNTHETIC data (random values under Marin-shaped key ids), built directly in SQL in the
same layout sync writes: 10k-step batches, each ordered by (key_id, step). Hero scale:
400k steps × 150 scalar keys every step + 600 norm keys every 10 steps ≈ 84M values.

Prints, side by side, the latency of one series' min/max downsample over several step
ranges for (a) marinctl's layout and (b) a baseline table holding the same rows in
arrival (step-major) order — the ratio is what the batch ordering buys.

    python bench/bench_store.py [--steps 400000] [--db /tmp/bench_store.duckdb]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import duckdb

from marinctl.store import Store
from marinctl.store import metrics as M


def build(path: Path, steps: int, scalar_keys: int, norm_keys: int, batch: int) -> None:
    if path.exists():
        path.unlink()
    Store(path).ensure_schema()
    con = duckdb.connect(str(path))
    con.execute("INSERT INTO runs (uid, source, run_id) VALUES ('bench/synthetic/hero', 'wandb', 'hero-synthetic')")
    con.execute(f"INSERT INTO metric_keys (key) SELECT 'k' || i FROM range({scalar_keys + norm_keys}) t(i)")
    con.execute("CREATE TABLE baseline AS SELECT * FROM metrics LIMIT 0")
    for lo in range(0, steps, batch):
        hi = min(lo + batch, steps)
        rows = f"""
            SELECT 1 AS run_pk, k + 1 AS key_id, s AS step, sin(s / 1000.0 + k) + random() * 0.01 AS value
            FROM range({lo}, {hi}) a(s), range({scalar_keys}) b(k)
            UNION ALL
            SELECT 1, {scalar_keys} + k + 1, s, random()
            FROM range({lo}, {hi}, 10) a(s), range({norm_keys}) b(k)
        """
        con.execute(f"INSERT INTO metrics SELECT * FROM ({rows}) ORDER BY key_id, step")
        con.execute(f"INSERT INTO baseline SELECT * FROM ({rows}) ORDER BY step, key_id")
    con.execute("CHECKPOINT")
    con.close()


def timed(fn, repeat: int = 7) -> float:
    samples = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=400_000)
    ap.add_argument("--scalar-keys", type=int, default=150)
    ap.add_argument("--norm-keys", type=int, default=600)
    ap.add_argument("--db", type=Path, default=Path("/tmp/bench_store.duckdb"))
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()
    if args.rebuild or not args.db.exists():
        t = time.perf_counter()
        build(args.db, args.steps, args.scalar_keys, args.norm_keys, 10_000)
        print(f"built SYNTHETIC hero-scale store in {time.perf_counter() - t:.1f} s")
    con = duckdb.connect(str(args.db), read_only=True)
    n = con.execute("SELECT count(*) FROM metrics").fetchone()[0]
    size = os.path.getsize(args.db) / 2**20
    print(f"rows {n:,}  file {size:,.0f} MiB (both tables)  steps {args.steps:,}")
    key = "k7"
    kid = M.key_id(con, key)
    seg = [(1, None, None)]
    ranges = [(0, args.steps), (0, args.steps // 10), (args.steps // 2, args.steps // 2 + 5_000)]
    print(f"{'range':>22} {'marinctl ms':>12} {'baseline ms':>12} {'ratio':>7}")
    for lo, hi in ranges:
        ours = timed(lambda: M.downsample(con, seg, key, lo, hi, 1000))
        base_sql = (
            "SELECT CAST(floor((step - ?) / ?) AS BIGINT) b, min(value), max(value) FROM baseline"
            " WHERE key_id = ? AND run_pk = 1 AND step >= ? AND step < ? GROUP BY b"
        )
        width = max(1.0, (hi - lo) / 1000)
        base = timed(lambda: con.execute(base_sql, [lo, width, kid, lo, hi]).fetchall())
        print(f"{f'[{lo:,}, {hi:,})':>22} {ours * 1e3:12.1f} {base * 1e3:12.1f} {base / ours:7.1f}x")
    con.close()


if __name__ == "__main__":
    main()
