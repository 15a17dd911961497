"""The store's history reads: parquet parts + long tail (what sync stores) vs the all-long baseline.

SYNTHETIC data (tests/fakes/synth.py): one hero-shaped run, 164 dense keys every step and
598 watch keys every 10 steps, with NaN/±Inf injected in the exported range and in the tail.
Two stores are built from the same run in this process, side by side:
  (a) baseline: every value a long row of `metrics` (`replace_range` in 10k-step windows, the
      layout JSON-window syncs and local runs write);
  (b) product: the run's parquet export (50k-step parts, as the W&B fake writes them)
      registered as parts (`parts.facts` + `parts.register`), the last 5,000 steps long rows.
Each read path runs through marinctl's own store functions on both, interleaved (a, b, a,
b, ...), medians of --repeat; every result of (b) is checked equal to (a). a/b > 1: (b) faster.

    nice -n 10 python bench/bench_store.py [--steps 100000] [--repeat 5] [--no-export-all]
"""

from __future__ import annotations

import argparse
import math
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from marinctl.store import Store, history  # noqa: E402
from marinctl.store import metrics as M  # noqa: E402
from marinctl.store import series as S  # noqa: E402
from tests.fakes.load import load_into_store, register_parts  # noqa: E402

DENSE = ["train/loss", "grad/norm/total", "throughput/tokens_per_second", "optim/learning_rate"]
WATCH = ["params/norm/stacked_blocks.3.mlp.router_bias", "grad/norm/stacked_blocks.3.attn.w_q"]
DETECT = ["train/loss", "grad/norm/total", "throughput/tokens_per_second", "throughput/duration", "_timestamp",
          "train/router/routing_entropy_mean", "train/router/router_z_loss", "moe/drop_fraction",
          "train/router/capacity_overflow_rate_mean", "params/norm/total"]
TAIL = 5_000


def make_run(steps: int):
    from tests.fakes.synth import marin_run

    run = marin_run("hero-synthetic-bench", steps=steps, layers=27, extra_scalar_keys=120, state="running")
    bad = [steps // 3, steps // 3 + 1, steps - 100]
    run.set_values("train/loss", bad, [math.nan, math.inf, math.nan])
    run.set_values(WATCH[0], [(steps // 3) // 10 * 10], [-math.inf])
    return run


def build_long(path: Path, run) -> float:
    t = time.perf_counter()
    store = Store(path)
    load_into_store(store, [run])
    return time.perf_counter() - t


def build_parts(path: Path, run, steps: int, work: Path) -> float:
    from tests.fakes.wandb_history import HistoryView

    files = HistoryView({run.run_id: run}).write_parquet(run, steps - TAIL, work / "export", 50_000)
    t = time.perf_counter()   # the export is written untimed: W&B writes it, not marinctl
    register_parts(Store(path), run, files, steps - TAIL)
    return time.perf_counter() - t


def export_digest(batches) -> tuple[int, float, bool]:
    """(rows, sum of finite values, sorted by step then key?) of an export stream."""
    n, total, ordered, prev = 0, 0.0, True, None
    for b in batches:
        if not b.num_rows:
            continue
        st, ky = b.column(0).to_numpy(), b.column(1).to_pylist()
        pairs = list(zip(st.tolist(), ky))
        if prev is not None and pairs[0] <= prev:
            ordered = False
        if any(pairs[i + 1] <= pairs[i] for i in range(len(pairs) - 1)):
            ordered = False
        prev = pairs[-1]
        v = b.column(2).to_numpy(zero_copy_only=False)
        total += float(np.sum(v[np.isfinite(v)]))
        n += b.num_rows
    return n, round(total, 3), ordered


def same(x, y) -> bool:
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], np.ndarray):
        return np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1], equal_nan=True)
    if isinstance(x, dict) and x and isinstance(next(iter(x.values())), M.Envelope):
        return set(x) == set(y) and all(
            np.allclose(getattr(x[k], f), getattr(y[k], f), equal_nan=True, rtol=1e-12, atol=1e-12)
            for k in x for f in ("step_lo", "step_hi", "vmin", "vmax", "first", "last", "mean", "count", "nonfinite"))
    if isinstance(x, pa.Table):
        def norm(t):
            t = t.select(["key", "step", "value"])
            t = pa.table({"key": t["key"].cast(pa.string()), "step": t["step"], "value": t["value"]})
            t = t.sort_by([("key", "ascending"), ("step", "ascending")])
            return t["key"].to_pylist(), t["step"].to_numpy(), t["value"].to_numpy()
        (ka, sa, va), (kb, sb, vb) = norm(x), norm(y)
        return ka == kb and np.array_equal(sa, sb) and np.array_equal(va, vb, equal_nan=True)
    return _eq(x, y)


def _eq(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_eq(u, v) for u, v in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return set(a) == set(b) and all(_eq(a[k], b[k]) for k in a)
    return a == b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-export-all", action="store_true", help="skip exporting every key (minutes at 400k)")
    args = ap.parse_args()
    n = args.steps
    work = Path(tempfile.mkdtemp(prefix="bench-store-"))
    try:
        run = make_run(n)
        ta = build_long(work / "a" / "marinctl.duckdb", run)
        tb = build_parts(work / "b" / "marinctl.duckdb", run, n, work)
        size_a = (work / "a" / "marinctl.duckdb").stat().st_size / 2**20
        size_b = (work / "b" / "marinctl.duckdb").stat().st_size / 2**20
        parts_mib = sum(f.stat().st_size for f in (work / "b").rglob("*.parquet")) / 2**20
        print(f"SYNTHETIC run {n:,} steps, {len(run.series)} keys. (a) all long rows: {size_a:,.0f} MiB DuckDB, "
              f"built in {ta:.0f} s; (b) parts + {TAIL:,}-step tail: {size_b:,.0f} MiB DuckDB + {parts_mib:,.0f} MiB "
              f"parquet, registered in {tb:.0f} s (facts included)")
        sa, sb = Store(work / "a" / "marinctl.duckdb"), Store(work / "b" / "marinctl.duckdb")
        with sa.connect() as con:
            pk = con.execute("SELECT run_pk FROM runs").fetchall()[0][0]
            all_keys = M.run_keys(con, [pk])
        seg = [(pk, None, None)]
        mid = n // 2
        some = DENSE[:3] + WATCH + ["eval/paloma/macro_loss"]
        leaves = [k for k in all_keys if k.startswith("params/norm/") and k != "params/norm/total"]
        twenty = all_keys[::max(1, len(all_keys) // 20)]
        cases = [
            ("series, dense key, all steps", lambda c: M.series(c, seg, DENSE[0])),
            ("series, dense key, 5k-step window", lambda c: M.series(c, seg, DENSE[0], mid, mid + 5000)),
            ("series, watch key, all steps", lambda c: M.series(c, seg, WATCH[0])),
            ("series across the part/tail boundary", lambda c: M.series(c, seg, DENSE[1], n - 8000, n)),
            ("downsample_many 6 keys, all, 1000 b", lambda c: M.downsample_many(c, seg, some, 0, n, 1000)),
            ("downsample_many 6 keys, 10k zoom", lambda c: M.downsample_many(c, seg, some, mid, mid + 10_000, 200)),
            ("keys a run logged", lambda c: M.run_keys(c, [pk])),
            ("step range", lambda c: M.step_range(c, seg)),
            ("keys with data (chart grid)", lambda c: sorted(S.keys_with_data(c, [pk], some))),
            ("key step range", lambda c: S.key_step_range(c, seg, some)),
            ("last value, 20 keys", lambda c: S.last_values(c, seg, twenty)),
            ("last value, every key", lambda c: S.last_values(c, seg, all_keys)),
            ("detector frame: 10 keys, whole run", lambda c: history.frame(c, seg, DETECT, 0, None)),
            ("detector frame: hyperball leaves", lambda c: history.frame(c, seg, leaves, 0, None)),
            ("nonfinite, all keys, whole run", lambda c: history.nonfinite(c, seg, 0, None)),
            ("first values, hyperball leaves", lambda c: history.first_values(c, seg, leaves)),
            ("moved metrics at a step (explain)", lambda c: S.moved_from_baseline(c, seg, mid, 200, 9)),
            ("norm leaves at two steps (attribution)", lambda c: history.values_at(c, seg, "params/norm/", [mid, mid + 10])),
            ("export 3 keys, sorted", lambda c: export_digest(M.export_batches(c, seg, DENSE[:3]))),
        ]
        if not args.no_export_all:
            cases.append(("export all keys, sorted", lambda c: export_digest(M.export_batches(c, seg, None))))
        print(f"\n{'read path':42} {'(a) ms':>9} {'(b) ms':>9} {'a/b':>6}  equal")
        for label, fn in cases:
            reps = 1 if label.startswith("export all") else args.repeat
            ta_s, tb_s, outs = [], [], [None, None]
            for _ in range(reps):   # interleaved: the machine's load drifts
                for i, (store, xs) in enumerate(((sa, ta_s), (sb, tb_s))):
                    with store.connect() as con:
                        t = time.perf_counter()
                        outs[i] = fn(con)
                        xs.append(time.perf_counter() - t)
            a, b = statistics.median(ta_s), statistics.median(tb_s)
            ok = same(outs[0], outs[1])
            print(f"{label:42} {a * 1e3:9.1f} {b * 1e3:9.1f} {a / b:6.2f}  {'yes' if ok else 'NO'}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
