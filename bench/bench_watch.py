"""`watch` at hero scale: first frame, and UI-thread time per live refresh.

SYNTHETIC store built in SQL (cached under /tmp): a stitched 3-run hero lineage with
Marin's key names for the default panels plus filler keys, 390,251 steps × 150 dense keys
+ 600 watch keys every 10 steps ≈ 84M values — the size of the real hero history.

Prints, side by side with a baseline:
- the store read for one frame (`watch_view.build_view`, 8 panels) vs a naive read
  that fetches every point of the 8 series and buckets them in numpy;
- first frame (app start → all 8 charts drawn), target ≤ 1 s;
- UI-thread time per live refresh (new rows appended, frame rebuilt), target ≤ 100 ms,
  vs the baseline of building the 8 plotext frames on the UI thread.

    python bench/bench_watch.py [--steps 390251] [--db /tmp/bench_watch.duckdb] [--refreshes 8]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import duckdb
import numpy as np

from marinctl.analysis.chart_data import DEFAULT_PANELS
from marinctl.analysis.watch_view import ViewParams, build_view
from marinctl.store import Store
from marinctl.store import metrics as M

NAMED = list(DEFAULT_PANELS) + ["_timestamp", "throughput/total_tokens", "throughput/tokens_per_second",
                                   "throughput/duration", "train/router/layer_0/routing_entropy"]
HERO = [("hero-12d8b6f0-dee637", None, None), ("hero-wd-gate-router-p02-step54k", "hero-12d8b6f0-dee637", 54_000),
        ("hero-ragged_a2a-ep-step81k", "hero-wd-gate-router-p02-step54k", 81_000)]


def value_sql(key: str, k: int) -> str:
    """A plausible SYNTHETIC curve per named key (sin + noise for the filler keys)."""
    curves = {
        "train/loss": "1.2 + 9.0 / (1 + s / 800.0) + random() * 0.05 + CASE WHEN s % 99991 = 0 THEN 3 ELSE 0 END",
        "eval/paloma/macro_loss": "1.5 + 9.0 / (1 + s / 800.0)",
        "grad/norm/total": "0.3 + 0.7 / (1 + s / 500.0) + random() * 0.05",
        "params/norm/total": "1340 + s / 400.0",
        "throughput/mfu": "22.7 + random()",
        "optim/learning_rate": "0.003291 * least(1.0, s / 3902.0) * (1 - 0.95 * s / 390251.0)",
        "moe/drop_fraction": "random() * 0.0004",
        "train/router/routing_entropy_mean": "2.0 + random() * 0.02",
        "_timestamp": "1788249600 + s * 19.8",
        "throughput/total_tokens": "s * 46137344.0",
        "throughput/tokens_per_second": "2.33e6 + random() * 1e4",
        "throughput/duration": "19.8 + random()",
    }
    return curves.get(key, f"sin(s / 1000.0 + {k}) + random() * 0.01")


def build(path: Path, steps: int, filler: int = 133, norm_keys: int = 600, batch: int = 20_000) -> None:
    if path.exists():
        path.unlink()
    Store(path).ensure_schema()
    con = duckdb.connect(str(path))
    for i, (rid, parent, fork) in enumerate(HERO):
        state = "running" if i == len(HERO) - 1 else "finished"
        cfg = json.dumps({"synthetic": True, "num_train_steps": 390_251, "tokens_per_step": 46_137_344})
        con.execute("INSERT INTO runs (uid, source, entity, project, run_id, name, run_group, state, created_at, heartbeat_at,"
                    " config, summary, fork_parent, fork_step) VALUES (?, 'wandb', 'marin-community', 'marin_moe', ?, ?,"
                    " 'moe-hero-ep', ?, now(), now(), ?, '{}', ?, ?)",
                    [f"marin-community/marin_moe/{rid}", rid, f"{rid} (synthetic)", state, cfg, parent, fork])
    keys = NAMED + [f"synthetic/filler_{i}" for i in range(filler)]
    norms = [f"params/norm/synthetic_{i}" for i in range(norm_keys)]
    con.executemany("INSERT INTO metric_keys (key) VALUES (?)", [[k] for k in keys + norms])
    bounds = [(1, 0, 54_001), (2, 54_001, 81_001), (3, 81_001, steps)]
    for run_pk, start, stop in bounds:
        for lo in range(start, stop, batch):
            hi = min(lo + batch, stop)
            parts = [f"SELECT {run_pk} AS run_pk, {k + 1} AS key_id, s AS step, {value_sql(key, k)} AS value FROM range({lo}, {hi}) a(s)"
                     for k, key in enumerate(keys)]
            parts.append(f"SELECT {run_pk}, {len(keys)} + k + 1, s, random() FROM range({lo + (-lo % 10)}, {hi}, 10) a(s), range({norm_keys}) b(k)")
            con.execute(f"INSERT INTO metrics SELECT * FROM ({' UNION ALL '.join(parts)}) ORDER BY key_id, step")
        con.execute("UPDATE runs SET last_step = ? WHERE run_pk = ?", [stop - 1, run_pk])
    con.execute("CHECKPOINT")
    n = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
    con.close()
    print(f"built {path}: {n:,} SYNTHETIC values")


def naive_read(store: Store, params: ViewParams) -> None:
    """Baseline: fetch every point of each panel's series, bucket in numpy."""
    from marinctl.store.lineage import resolve_target

    with store.connect() as con:
        target = resolve_target(con, "hero", stitched=True)
        for key in DEFAULT_PANELS:
            s, v = M.series(con, target.segments, key)
            if len(s):
                b = np.minimum((s - s[0]) * params.buckets // max(1, s[-1] - s[0] + 1), params.buckets - 1)
                np.maximum.reduceat(v, np.flatnonzero(np.r_[True, b[1:] != b[:-1]]))


def timeit(fn, n: int = 5) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def append_steps(store: Store, first: int, count: int) -> None:
    """A live sync's worth of new rows for the leaf (only appends)."""
    with store.transaction() as con:
        parts = [f"SELECT 3 AS run_pk, (SELECT key_id FROM metric_keys WHERE key = '{key}') AS key_id, s AS step,"
                 f" {value_sql(key, k)} AS value FROM range({first}, {first + count}) a(s)" for k, key in enumerate(NAMED)]
        con.execute(f"INSERT INTO metrics SELECT * FROM ({' UNION ALL '.join(parts)}) ORDER BY key_id, step")
        con.execute("UPDATE runs SET last_step = ? WHERE run_pk = 3", [first + count - 1])


async def run_app(store: Store, refreshes: int, last_step: int) -> dict:
    from marinctl.tui.app import WatchApp
    from marinctl.tui.charts import MetricChart

    app = WatchApp("hero", 3600, store=store, autosync=False)
    t0 = time.perf_counter()
    out: dict = {}
    async with app.run_test(size=(160, 50)) as pilot:
        while True:
            await pilot.pause(0.01)
            charts = list(app.query(MetricChart))
            if app.refreshes >= 1 and len(charts) == 8 and all(c._frame is not None for c in charts):
                break
            if time.perf_counter() - t0 > 60:
                raise SystemExit("first frame never came")
        out["first_frame_s"] = time.perf_counter() - t0
        charts = list(app.query(MetricChart))
        # baseline: the same 8 frames built synchronously on the UI thread
        view = app.view
        t1 = time.perf_counter()
        for c in charts:
            panel = next(p for p in view.panels if p.key == c.key)
            c.prepare(panel, view.axis, c.options, (c.size.width, c.size.height))
        out["baseline_ui_build_s"] = time.perf_counter() - t1
        ui, walls = [], []
        step = last_step + 1
        for _ in range(refreshes):
            append_steps(store, step, 10)       # a 10-step sync
            step += 10
            before_ui = app.ui_seconds + sum(c.render_seconds for c in charts)
            before_n = app.refreshes
            t2 = time.perf_counter()
            app.reload()
            while app.refreshes == before_n:
                await pilot.pause(0.005)
            await pilot.pause(0.05)           # let the compositor paint the new frames
            walls.append(time.perf_counter() - t2)
            charts = list(app.query(MetricChart))
            ui.append(app.ui_seconds + sum(c.render_seconds for c in charts) - before_ui)
        out["refresh_ui_s"] = ui
        out["refresh_wall_s"] = walls
        out["header_step"] = app.view.header.step
    return out


def add_markers(store: Store) -> None:
    """SYNTHETIC markers for the capture: an anomaly on the injected loss spike, a fork event."""
    with store.transaction() as con:
        if not con.execute("SELECT count(*) FROM anomalies").fetchall()[0][0]:
            con.execute("INSERT INTO anomalies (run_pk, step, metric, kind, score, cause_class)"
                        " VALUES (3, 199982, 'train/loss', 'spike', 9.1, 'data_batch')")
        con.execute("INSERT OR REPLACE INTO events (event_id, source, kind, time, title, run_uid, step) VALUES"
                    " ('synthetic:fork81k', 'github', 'comment', now(), 'forked hero-ragged_a2a-ep-step81k (synthetic)',"
                    " 'marin-community/marin_moe/hero-ragged_a2a-ep-step81k', 81000)")


async def capture(store: Store, path: Path, size: tuple[int, int]) -> None:
    """Write the screen as plain text (for the README), cursor on the first marker."""
    from marinctl.tui.app import WatchApp
    from marinctl.tui.capture import screen_text

    app = WatchApp("hero", 3600, store=store, autosync=False)
    async with app.run_test(size=size) as pilot:
        for keys in ((), ("home", "n", "n")):
            await pilot.press(*keys)
            for _ in range(400):
                await pilot.pause(0.05)
                if app.view is not None and not any(w.is_running for w in app.workers):
                    break
            await pilot.pause(0.3)
        path.write_text(screen_text(app))
    print(f"wrote {path}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=389_000,
                    help="history length (default: a hero near its end, leaving room for the simulated live appends)")
    ap.add_argument("--db", type=Path, default=Path("/tmp/bench_watch.duckdb"))
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--refreshes", type=int, default=8)
    ap.add_argument("--capture", type=Path, help="write a text capture of the screen here and exit")
    args = ap.parse_args()
    if args.rebuild or not args.db.exists():
        t0 = time.perf_counter()
        build(args.db, args.steps)
        print(f"build: {time.perf_counter() - t0:.1f} s")
    store = Store(args.db)
    if args.capture:
        add_markers(store)
        asyncio.run(capture(store, args.capture, (140, 44)))
        return
    with store.connect() as con:
        last = con.execute("SELECT max(step) FROM metrics").fetchall()[0][0]
        rows = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
    print(f"store: {rows:,} SYNTHETIC values, hero lineage to step {last:,}")
    params = ViewParams(ref="hero", buckets=240)
    ours = timeit(lambda: build_view(store, params))
    base = timeit(lambda: naive_read(store, params))
    print(f"{'measure':44s} {'marinctl':>10s} {'baseline':>10s} {'ratio':>7s}")
    m, b = statistics.median(ours), statistics.median(base)
    print(f"{'store read for one frame, 8 panels (median)':44s} {m * 1e3:8.1f}ms {b * 1e3:8.1f}ms {b / m:6.1f}x")
    res = asyncio.run(run_app(store, args.refreshes, last))
    ui = res["refresh_ui_s"]
    print(f"{'first frame: start → 8 charts drawn':44s} {res['first_frame_s'] * 1e3:8.1f}ms {'':>10s}   target ≤ 1000 ms")
    med, worst = statistics.median(ui), max(ui)
    bb = res["baseline_ui_build_s"]
    print(f"{'UI-thread time per live refresh (median)':44s} {med * 1e3:8.1f}ms {bb * 1e3:8.1f}ms {bb / max(med, 1e-9):6.1f}x  target ≤ 100 ms")
    print(f"{'UI-thread time per live refresh (worst)':44s} {worst * 1e3:8.1f}ms")
    print(f"{'refresh wall time incl. worker (median)':44s} {statistics.median(res['refresh_wall_s']) * 1e3:8.1f}ms")
    print(f"header follows the appends: step {res['header_step']:,}; per-refresh UI ms: {[round(x * 1e3, 1) for x in ui]}")


if __name__ == "__main__":
    main()
