"""`watch` at hero scale, side by side with the previous release's code path.

SYNTHETIC store built in SQL (cached under /tmp): a stitched 3-run hero lineage with
Marin's key names for the default panels plus filler keys, 389,000 steps × 145 dense keys
+ 600 keys every 10 steps ≈ 80M values — the size of the real hero history.

Each measurement runs `watch` (Textual's headless Pilot, 160×50) in a fresh process, once
with this tree's `marinctl` and once with the previous release's (`git archive BASE marinctl`,
BASE = the merge base with main unless `--base` says otherwise), alternating, and prints the
medians side by side with their ratio (previous / now; > 1 means now is better):
- first frame: process start → the 8 default charts drawn (imports included), and app start →
  drawn; target ≤ 1 s;
- key latency: `→` pressed → readout and every chart's cursor redrawn (median of 12);
- RSS settled: resident memory after the first frame, the key list and 3 s of quiet; ≤ 150 MB;
- idle CPU: process CPU time over 5 s with nothing changing (what a watch left open costs).
Plus the store read for one frame (`build_view`, 8 panels) vs a naive read of every point, and
`marinctl watch` launched as a person launches it, in a tmux pane of 160×50 (`terminal_runs`):
launch → first chart and → all 8 charts on screen; the CLI path, helper process included.

    nice -n 10 python bench/bench_watch.py [--steps 389000] [--db /tmp/bench_watch_CHECKOUT.duckdb] [--rounds 2]
"""

from __future__ import annotations

import time

_T0 = time.perf_counter()          # script start: the "process start" of the first-frame figure

import argparse  # noqa: E402
import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
from pathlib import Path  # noqa: E402

import duckdb  # noqa: E402
import numpy as np  # noqa: E402

try:   # the child measuring the --base tree imports this file too, with that tree's marinctl
    from marinctl.views.chart_data import DEFAULT_PANELS  # noqa: E402
    from marinctl.views.watch_view import ViewParams, build_view  # noqa: E402
except ImportError:   # a tree from before analysis/ was split into rooms
    from marinctl.analysis.chart_data import DEFAULT_PANELS  # noqa: E402
    from marinctl.analysis.watch_view import ViewParams, build_view  # noqa: E402
from marinctl.store import Store  # noqa: E402
from marinctl.store import metrics as M  # noqa: E402

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


# --- one measurement, in its own process (`--measure`), with whichever marinctl is on sys.path ---

def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _measure(db: Path, t_process: float, keys: int, idle_s: float) -> dict:
    from textual.widgets import Static

    from marinctl.tui.app import WatchApp
    try:
        from marinctl.tui.widgets.chart import MetricChart
    except ImportError:       # a tree from before the chart widget moved into widgets/
        from marinctl.tui.charts import MetricChart

    def drawn() -> bool:
        charts = list(app.query(MetricChart))
        # `_frame`: the one attribute this tree and the older ones compared against both hold
        return len(charts) >= 8 and all(c._frame is not None for c in charts)

    def busy() -> bool:
        return any(w.is_running for w in app.workers if w.group in ("load", "paint", "keys"))

    try:
        from marinctl.tui.options import WatchOptions
        app = WatchApp(WatchOptions("hero", 3600, autosync=False), store=Store(db))
    except ImportError:       # a tree from before WatchOptions
        app = WatchApp("hero", 3600, store=Store(db), autosync=False)
    t0 = time.perf_counter()
    out: dict = {}
    async with app.run_test(size=(160, 50)) as pilot:
        while not drawn():
            await pilot.pause(0.005)
            if time.perf_counter() - t0 > 120:
                raise SystemExit("first frame never came")
        out["first_frame_app_s"] = time.perf_counter() - t0
        out["first_frame_process_s"] = time.perf_counter() - t_process
        deadline = time.perf_counter() + 60
        while busy() and time.perf_counter() < deadline:
            await pilot.pause(0.05)
        await pilot.pause(3.0)
        out["rss_settled_mib"] = _rss_mib()
        readout = app.query_one("#readout", Static)
        await pilot.press("home")
        await pilot.pause(0.5)
        lat = []
        for _ in range(keys):
            before = str(readout.render())
            t1 = time.perf_counter()
            await pilot.press("right")
            while str(readout.render()) == before or busy() or not drawn():
                await pilot.pause(0.002)
            lat.append(time.perf_counter() - t1)
        out["key_latency_s"] = statistics.median(lat)
        while busy():
            await pilot.pause(0.05)
        await pilot.pause(0.5)
        c0, w0 = time.process_time(), time.perf_counter()
        await pilot.pause(idle_s)
        out["idle_cpu_pct"] = 100 * (time.process_time() - c0) / (time.perf_counter() - w0)
        out["rss_end_mib"] = _rss_mib()
    import marinctl

    out["marinctl"] = str(Path(marinctl.__file__).parent)
    return out


def run_child(tree: Path, db: Path, keys: int, idle_s: float) -> dict:
    import subprocess
    import sys
    import tempfile

    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PYTHONPATH": str(tree), "MARINCTL_HOME": home}
        proc = subprocess.run([sys.executable, __file__, "--measure", "--db", str(db), "--keys", str(keys),
                               "--idle", str(idle_s)], env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"measurement with {tree} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
    from marinctl.tui.options import WatchOptions
    from marinctl.tui.capture import screen_text
    from marinctl.tui.widgets.chart import MetricChart

    app = WatchApp(WatchOptions("hero", 3600, autosync=False), store=store)
    async with app.run_test(size=size) as pilot:
        for keys in ((), ("home", "n", "n")):
            await pilot.press(*keys)
            for _ in range(400):
                await pilot.pause(0.05)
                if list(app.query(MetricChart)) and not any(w.is_running for w in app.workers):
                    break
            await pilot.pause(0.3)
        path.write_text(screen_text(app))
    print(f"wrote {path}")


def main() -> None:
    t_process = _T0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=389_000,
                    help="history length (default: a hero near its end)")
    ap.add_argument("--db", type=Path, default=Path(f"/tmp/bench_watch_{Path(__file__).resolve().parent.parent.name}.duckdb"),
                    help="the SYNTHETIC store, cached (default: one per checkout; /tmp is shared)")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--rounds", type=int, default=2, help="measurements per code path (alternating)")
    ap.add_argument("--keys", type=int, default=12, help="→ presses timed per measurement")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of idle CPU sampled")
    ap.add_argument("--base", default="auto", help="git revision of the previous release (default: merge base with main)")
    ap.add_argument("--capture", type=Path, help="write a text capture of the screen here and exit")
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        print(json.dumps(asyncio.run(_measure(args.db, t_process, args.keys, args.idle))))
        return
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
    ours = statistics.median(timeit(lambda: build_view(store, params)))
    base = statistics.median(timeit(lambda: naive_read(store, params)))
    print(f"{'store read for one frame, 8 panels (median)':44s} {ours * 1e3:8.1f}ms   naive {base * 1e3:8.1f}ms"
          f"  {base / ours:5.1f}x")

    import tempfile

    from harness import previous_tree   # noqa: PLC0415 (bench/ is the script's own folder)

    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as tmp:
        prev = previous_tree(args.base, Path(tmp))
        now_runs, prev_runs = [], []
        for _ in range(args.rounds):             # alternate: the machine's load hits both alike
            now_runs.append(run_child(root, args.db, args.keys, args.idle))
            prev_runs.append(run_child(prev, args.db, args.keys, args.idle))
        terminal = terminal_runs({"now": root, "previous": prev}, args.db, Path(tmp), args.rounds)
    assert all(r["marinctl"].startswith(str(root)) for r in now_runs), now_runs
    assert all(r["marinctl"].startswith(tmp) for r in prev_runs), prev_runs
    rows_out = [("first frame, process start → 8 charts", "first_frame_process_s", 1e3, "ms", "≤ 1000 ms"),
                ("first frame, app start → 8 charts", "first_frame_app_s", 1e3, "ms", ""),
                ("key latency, → to cursor drawn (median)", "key_latency_s", 1e3, "ms", ""),
                ("RSS settled", "rss_settled_mib", 1, "MiB", "≤ 150 MB"),
                ("RSS at the end", "rss_end_mib", 1, "MiB", ""),
                ("idle CPU", "idle_cpu_pct", 1, "%", "≈ 0")]
    print(f"{'measure (median of ' + str(args.rounds) + ')':44s} {'now':>10s} {'previous':>10s} {'prev/now':>8s}")
    for label, key, scale, unit, target in rows_out:
        a = statistics.median(r[key] for r in now_runs) * scale
        b = statistics.median(r[key] for r in prev_runs) * scale
        ratio = f"{b / a:7.2f}x" if a > 0 else "      -"
        print(f"{label:44s} {a:8.1f}{unit:<2s} {b:8.1f}{unit:<2s} {ratio}  {target}")
    for i, label in enumerate(("in a terminal: launch → first chart", "in a terminal: launch → 8 charts",
                               "in a terminal: RSS 3 s after (helper incl.)")):
        unit, scale = ("MiB", 1) if i == 2 else ("ms", 1e3)
        a, b = (statistics.median(r[i] for r in terminal[side]) * scale for side in ("now", "previous"))
        print(f"{label:44s} {a:8.1f}{unit:<2s} {b:8.1f}{unit:<2s} {b / a:7.2f}x  {'≤ 1000 ms' if i == 1 else ''}")


def terminal_runs(trees: dict[str, Path], db: Path, tmp: Path, rounds: int) -> dict[str, list[tuple]]:
    """`marinctl watch` (the hero, its default) as a person launches it, in a fresh tmux pane of 160×50,
    each tree on its own copy of the store, alternating: (s to the first chart, s to all 8 charts drawn,
    RSS MiB). The Pilot figures above start the app in-process; this one includes the CLI, the helper
    process that reads the first view while Textual is imported, and the terminal."""
    import shutil
    import subprocess
    import sys

    from bench_watch_terminal import Screens     # noqa: PLC0415 (tmux, needed by this measure alone)

    if not shutil.which("tmux"):
        raise SystemExit("the terminal figures need tmux")
    commands = {}
    for side, tree in trees.items():
        home = tmp / f"home-{side}"
        home.mkdir()
        shutil.copy(db, home / "marinctl.duckdb")
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "marinctl")], check=True, capture_output=True)
        # from the home: `python -m` puts the working directory first on sys.path, and `tmp` may hold a tree
        commands[side] = f"cd {home} && PYTHONPATH={tree} MARINCTL_HOME={home} {sys.executable} -m marinctl watch"
    out: dict[str, list[tuple]] = {side: [] for side in trees}
    with Screens() as screens:
        for _ in range(rounds):
            for side, command in commands.items():
                # all 8 drawn: each chart's bottom-left corner (a chart still loading has none)
                out[side].append(screens.measure(command, "grad/norm/total", r"(?s)(└.*){8}"))
    return out


if __name__ == "__main__":
    main()
