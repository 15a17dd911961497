"""PROTOTYPE comparison: today's long table (a) vs parquet parts as stored form (b) vs wide
DuckDB table (c), on a SYNTHETIC hero-shaped run served by the fake W&B server.

Prints ratios measured side by side (the machine is shared and noisy: medians of --repeat):
1. full sync, rows/s and peak process-tree RSS: (a) today's sync (no detection, and once with
   it), (b) bench/proto_sync.py, the floor (load the export parts into a DuckDB table; and
   that plus an unpivot to long rows), and the wandb SDK's scan_history() for --sdk-seconds;
2. detection after a full sync on (a): whole-run pass vs the same detectors in step windows;
3. the read paths the product needs, (b) and (c) against (a), each result checked equal.

    python bench/proto_store.py --steps 100000 [--repeat 3] [--sdk-seconds 60] [--sweep]

Server, syncs and the floor run in separate processes; only the client's tree is sampled.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import FakeServer, run_measured, sdk_rate  # noqa: E402

HERE = Path(__file__).resolve()
ENTITY, PROJECT = "marin-community", "marin_moe"


# --- children (each measured in its own process) ---------------------------------------------

def child_today(home: str, target: str, detect: str) -> None:
    os.environ["MARINCTL_HOME"] = home
    from marinctl.store import open_store
    from marinctl.sync import sync_targets

    t = time.perf_counter()
    rep = sync_targets(open_store(), [target], detect=detect == "1")
    print(json.dumps({"seconds": time.perf_counter() - t, "rows_added": sum(r["rows_added"] for r in rep["runs"])}))


def child_parts(home: str, url: str, run_id: str, memory: str, threads: str, tail: str = "today") -> None:
    os.environ["MARINCTL_HOME"] = home
    os.environ["MARINCTL_DB_MEMORY"] = memory
    import duckdb

    connect = duckdb.connect
    duckdb.connect = lambda *a, **k: connect(*a, **{**k, "config": {**k.get("config", {}), "threads": int(threads)}})
    from bench import proto_sync
    from marinctl.sources.wandb import WandbClient
    from marinctl.store import open_store

    timings: dict = {}
    t = time.perf_counter()
    with WandbClient(url) as client:
        out = proto_sync.sync(open_store(), client, ENTITY, PROJECT, run_id, Path(home), timings,
                              fast_tail=tail == "fast")
    out["seconds"] = time.perf_counter() - t
    out["stages"] = {k: round(v, 3) for k, v in timings.items()}
    print(json.dumps(out))


def child_floor(db: str, memory: str, threads: str, unpivot: str, *files: str) -> None:
    import duckdb

    con = duckdb.connect(db)
    con.execute(f"SET memory_limit = '{memory}'; SET threads = {int(threads)}; SET enable_progress_bar = false")
    flist = "[" + ",".join("'" + f + "'" for f in files) + "]"
    t = time.perf_counter()
    con.execute(f"CREATE TABLE wide AS SELECT * FROM read_parquet({flist})")
    con.execute("CHECKPOINT")
    load = time.perf_counter() - t
    if unpivot == "1":
        con.execute("CREATE TABLE long AS SELECT _step AS step, key, value FROM"
                    " (UNPIVOT wide ON COLUMNS(* EXCLUDE (_step)) INTO NAME key VALUE value)")
        con.execute("CHECKPOINT")
    print(json.dumps({"load": load, "seconds": time.perf_counter() - t}))


def child_detect(home: str, mode: str, window: str) -> None:
    """Detection after a full sync on today's store: 'whole' (today) or in step windows."""
    os.environ["MARINCTL_HOME"] = home
    from marinctl.analysis.detect import detectors as D
    from marinctl.store import open_store

    store = open_store()
    t = time.perf_counter()
    with store.transaction() as con:
        pk = con.execute("SELECT run_pk FROM runs LIMIT 1").fetchall()[0][0]
        if mode == "whole":
            n = D.detect_incremental(con, pk)
        else:  # same detectors, emitted over bounded step windows (each reads LOOKBACK steps before)
            fr = D.frame(con, pk)
            last = D._last_step(con, pk)
            leaves = D.hyperball_leaves(con, fr)
            refs = D.hyperball_refs(con, fr, leaves) if leaves else {}
            found = []
            w = int(window)
            for lo in range(fr.own_lo, last + 1, w):
                found += D.scan(con, fr, lo, lo + w, refs=refs)
            n = D._store(con, fr, found, fr.own_lo)
            D._save_state(con, fr, last, refs)
    print(json.dumps({"seconds": time.perf_counter() - t, "anomalies": n}))


CHILDREN = {"today": child_today, "parts": child_parts, "floor": child_floor, "detect": child_detect}


# --- orchestration --------------------------------------------------------------------------

def measured(args: list[str], env: dict | None = None) -> dict:
    res = run_measured([sys.executable, str(HERE), "--child", *args], env=env)
    out = json.loads(res["stdout"].strip().splitlines()[-1])
    out["wall"], out["peak_mib"] = res["wall"], res["peak_mib"]
    return out


def med(xs: list[dict], key: str) -> float:
    return statistics.median(x[key] for x in xs)


def sync_section(fs: FakeServer, work: Path, args) -> dict:
    steps = args.steps
    env = {**os.environ, "WANDB_BASE_URL": fs.url}
    files = [str(f) for f in fs.files]
    res: dict[str, list[dict]] = {"a": [], "b": [], "bf": [], "floor": [], "floor_long": []}
    sdk_runs = []
    for rep in range(args.repeat):
        if rep == 1 and args.sdk_seconds > 0:  # the SDK between repetitions too: the machine's load drifts
            sdk_runs.append(sdk_rate(fs.url, fs.run_id, args.sdk_seconds, str(work / "wandb-cache")))
        for name in ("b", "bf") + (() if args.no_today else ("a",)):
            home = work / f"{name}{rep}"
            shutil.rmtree(home, ignore_errors=True)
            home.mkdir()
            if name == "a":
                res["a"].append(measured(["today", str(home), fs.target, "0"], {**env, "MARINCTL_HOME": str(home)}))
            else:
                res[name].append(measured(["parts", str(home), fs.url, fs.run_id, args.memory, "2",
                                           "fast" if name == "bf" else "today"], {**env, "MARINCTL_HOME": str(home)}))
        db = work / "floor.duckdb"
        db.unlink(missing_ok=True)
        res["floor"].append(measured(["floor", str(db), args.floor_memory, "2", "0", *files]))
        if rep == 0:
            db.unlink(missing_ok=True)
            res["floor_long"].append(measured(["floor", str(db), args.floor_memory, "2", "1", *files]))
            db.unlink(missing_ok=True)
    for rep in range(args.repeat):
        shutil.rmtree(work / f"bf{rep}", ignore_errors=True)
    for name in ("b",) + (() if args.no_today else ("a",)):  # keep the last repetition's stores for the reads
        final = work / name
        shutil.rmtree(final, ignore_errors=True)
        (work / f"{name}{args.repeat - 1}").rename(final)
        for rep in range(args.repeat - 1):
            shutil.rmtree(work / f"{name}{rep}", ignore_errors=True)

    sdk = None
    if args.sdk_seconds > 0:
        sdk_runs.append(sdk_rate(fs.url, fs.run_id, args.sdk_seconds, str(work / "wandb-cache")))
        sdk = {"rows_s": statistics.median(x["rows_s"] for x in sdk_runs), "rows": sdk_runs[-1]["rows"],
               "seconds": sdk_runs[-1]["seconds"], "all": [round(x["rows_s"]) for x in sdk_runs]}
    with_det = None
    if args.with_detect and not args.no_today:  # today's sync WITH its detection pass, once
        home_d = work / "a_detect"
        shutil.rmtree(home_d, ignore_errors=True)
        home_d.mkdir()
        with_det = measured(["today", str(home_d), fs.target, "1"], {**env, "MARINCTL_HOME": str(home_d)})
        shutil.rmtree(home_d, ignore_errors=True)
    det = {}
    for mode in (() if args.no_today else ("whole", "windowed")):
        h = work / f"det_{mode}"
        shutil.rmtree(h, ignore_errors=True)
        shutil.copytree(work / "a", h)
        det[mode] = measured(["detect", str(h), mode, "20000"], {**env, "MARINCTL_HOME": str(h)})
        shutil.rmtree(h, ignore_errors=True)

    size = sum(f.stat().st_size for f in fs.files) / 2**20
    print(f"\n== full sync of the SYNTHETIC {steps:,}-step run ({len(files)} export parts, {size:,.0f} MiB; "
          f"5,000-step live tail), median of {args.repeat} ==")
    rows = []
    for label, xs in (("(a) today's sync, no detection", res["a"]), ("(b) parts as stored form", res["b"]),
                      ("(b) + tail: orjson, 1M-value commits", res["bf"]),
                      ("floor: parquet -> DuckDB table", res["floor"]),
                      ("floor + unpivot to long rows", res["floor_long"])):
        if xs:
            rows.append((label, med(xs, "wall"), max(x["peak_mib"] for x in xs)))
    if with_det:
        rows.append(("(a) today's sync WITH detection", with_det["wall"], with_det["peak_mib"]))
    floor = next(r[1] for r in rows if r[0].startswith("floor:"))
    print(f"{'':38} {'wall s':>7} {'rows/s':>8} {'x SDK':>7} {'/ floor':>8} {'peak tree RSS MiB':>18}")
    for label, wall, peak in rows:
        xs = f"{steps / wall / sdk['rows_s']:7.1f}" if sdk and sdk["rows_s"] > 0 else "      -"
        print(f"{label:38} {wall:7.2f} {steps / wall:8,.0f} {xs} {wall / floor:8.2f} {peak:18,.0f}")
    if sdk and sdk["rows_s"] <= 0:
        print("wandb SDK scan_history(): no row within --sdk-seconds (wandb-core start-up); give it longer")
    elif sdk:
        print(f"{'wandb SDK scan_history()':38} {'':7} {sdk['rows_s']:8,.0f} {1.0:7.1f}   (median of {sdk['all']} rows/s)")
    for name in ("b", "bf"):
        print(f"({name}) stages, last run: " + ", ".join(f"{k} {v:.2f}s" for k, v in res[name][-1]["stages"].items()))
    print(f"floor load alone (in-process timer): {med(res['floor'], 'load'):.2f} s")
    if det:
        print(f"detection after sync on (a): whole run {det['whole']['wall']:.1f} s, peak {det['whole']['peak_mib']:,.0f} MiB;"
              f" in 20k-step windows {det['windowed']['wall']:.1f} s, peak {det['windowed']['peak_mib']:,.0f} MiB"
              f" (anomalies {det['whole']['anomalies']} vs {det['windowed']['anomalies']})")
    return {"rows": rows, "sdk": sdk, "det": det, "b_stages": res["b"][-1]["stages"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--read-repeat", type=int, default=5)
    ap.add_argument("--sdk-seconds", type=float, default=60.0)
    ap.add_argument("--memory", default="512MB", help="DuckDB memory_limit for the syncs and the floor")
    ap.add_argument("--floor-memory", default="4GB",
                    help="memory_limit for the floor load (757 wide columns need more than 512MB to load at all)")
    ap.add_argument("--work", type=Path, default=None, help="keep stores here (default: a temp dir)")
    ap.add_argument("--reads-only", action="store_true", help="reuse --work's stores; skip the sync section")
    ap.add_argument("--engines", default="arrow,duckdb", help="how (b) reads parts: arrow (cached footers), duckdb; '' skips the read section")
    ap.add_argument("--with-detect", action=argparse.BooleanOptionalAction, default=True,
                    help="also time today's sync with its detection pass")
    ap.add_argument("--no-today", action="store_true", help="skip today's sync (slow at 400k) and what needs its store")
    ap.add_argument("--sweep", action="store_true", help="also sweep DuckDB memory_limit/threads")
    args = ap.parse_args()

    work = args.work or Path(tempfile.mkdtemp(prefix="proto-store-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        t = time.perf_counter()
        with FakeServer(args.steps) as fs:
            print(f"SYNTHETIC run {args.steps:,} steps served from its own process (up in {time.perf_counter() - t:.0f} s)",
                  flush=True)
            if not args.reads_only:
                sync_section(fs, work, args)
            if args.sweep:
                from bench.proto_reads import sweep

                sweep(fs, work, args)
            files = list(fs.files)
            from bench.proto_reads import read_section

            for engine in (args.engines.split(",") if args.engines else []):
                read_section(work, files, args, engine=engine)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        CHILDREN[sys.argv[2]](*sys.argv[3:])
    else:
        main()
