"""marinctl's W&B full sync vs the wandb SDK's `scan_history()` and vs the raw parquet→DuckDB floor.

SYNTHETIC data: one hero-shaped run (tests/fakes/synth.py: 164 dense keys every step, 598
watch keys every 10 steps, 757 columns in the exports; a few NaN/Inf values) served by the
W&B fake in its OWN process (bench/harness.py): parquet exports for all but the last 5,000
steps, the live tail over GraphQL. Each measured client runs in its own process and its
process tree's RSS is sampled every 20 ms. Runs are interleaved and reported as medians
(the machine is shared: compare the ratios, not the seconds between runs):

1. `marinctl sync E/P/RUN --json`: the whole command, detection after the sync included;
2. the floor: the same parquet bytes loaded straight into a DuckDB table (`CREATE TABLE AS
   SELECT * FROM read_parquet(...)`, memory_limit 4GB: 757 wide columns do not load in 512MB);
3. the SDK: `wandb.Api().run(...).scan_history()` on the same server for --sdk-seconds;
then an incremental sync after 1,000 new steps.

    nice -n 10 python bench/bench_sync.py [--steps 100000] [--repeat 3] [--sdk-seconds 60]
    nice -n 10 python bench/bench_sync.py --steps 400000 --repeat 1 --sdk-seconds 0   # peak RSS
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyarrow.parquet as pq  # noqa: E402

from bench.harness import FakeServer, run_measured, sdk_rate  # noqa: E402

HERE = Path(__file__).resolve()


def child_floor(db: str, *files: str) -> None:
    import duckdb

    con = duckdb.connect(db)
    con.execute("SET memory_limit = '4GB'; SET enable_progress_bar = false")
    flist = "[" + ",".join("'" + f + "'" for f in files) + "]"
    con.execute(f"CREATE TABLE wide AS SELECT * FROM read_parquet({flist})")
    con.execute("CHECKPOINT")
    con.close()


def marinctl_sync(env: dict, target: str) -> dict:
    res = run_measured([sys.executable, "-m", "marinctl", "sync", target, "--json"], env=env)
    report = json.loads(res["stdout"])
    return {"wall": res["wall"], "peak_mib": res["peak_mib"], "report": report}


def floor(files: list[Path], work: Path) -> dict:
    db = work / "floor.duckdb"
    db.unlink(missing_ok=True)
    try:
        return run_measured([sys.executable, str(HERE), "--child-floor", str(db), *map(str, files)])
    finally:
        db.unlink(missing_ok=True)


def stored(home: Path) -> dict:
    import duckdb

    con = duckdb.connect(str(home / "marinctl.duckdb"), read_only=True)
    try:
        long = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
        parts, values = con.execute("SELECT count(DISTINCT p.part_id), sum(k.n_values) FROM history_parts p"
                                    " JOIN part_keys k USING (part_id)").fetchall()[0]
        anomalies = con.execute("SELECT count(*) FROM anomalies").fetchall()[0][0]
    finally:
        con.close()
    return {"long_rows": long, "parts": parts, "part_values": values or 0, "anomalies": anomalies}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sdk-seconds", type=float, default=60.0)
    ap.add_argument("--no-floor", action="store_true", help="skip the parquet→DuckDB floor (it needs ~3 GiB at 400k)")
    ap.add_argument("--no-incremental", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench-sync-"))
    try:
        t = time.perf_counter()
        with FakeServer(args.steps) as fs:
            size = sum(f.stat().st_size for f in fs.files) / 2**20
            exported = sum(pq.ParquetFile(f).metadata.num_rows for f in fs.files)   # rows the floor loads
            load0 = os.getloadavg()
            print(f"SYNTHETIC run: {args.steps:,} steps; {len(fs.files)} export parts, {size:,.0f} MiB; 5,000-step "
                  f"live tail; server in its own process (up in {time.perf_counter() - t:.0f} s)", flush=True)
            env = {**os.environ, "WANDB_BASE_URL": fs.url}
            ours, floors, sdks = [], [], []
            for rep in range(args.repeat):
                home = work / f"home{rep}"
                shutil.rmtree(home, ignore_errors=True)
                ours.append(marinctl_sync({**env, "MARINCTL_HOME": str(home)}, fs.target))
                print(f"  marinctl sync #{rep + 1}: {ours[-1]['wall']:.1f} s, peak tree RSS {ours[-1]['peak_mib']:,.0f} MiB",
                      flush=True)
                if not args.no_floor:
                    floors.append(floor(fs.files, work))
                    print(f"  floor #{rep + 1}: {floors[-1]['wall']:.1f} s, peak {floors[-1]['peak_mib']:,.0f} MiB", flush=True)
                if args.sdk_seconds > 0 and rep < 2:   # the SDK between runs: the machine's load drifts
                    sdks.append(sdk_rate(fs.url, fs.run_id, args.sdk_seconds, str(work / "wandb-cache")))
                    print(f"  SDK #{rep + 1}: {sdks[-1]['rows_s']:,.0f} rows/s ({sdks[-1]['rows']:,} rows)", flush=True)
                if rep < args.repeat - 1:
                    shutil.rmtree(home, ignore_errors=True)
            last_home = work / f"home{args.repeat - 1}"
            facts = stored(last_home)
            wall = statistics.median(o["wall"] for o in ours)
            peak = max(o["peak_mib"] for o in ours)
            rows_s = args.steps / wall
            print(f"\n== full sync of the SYNTHETIC {args.steps:,}-step run, median of {args.repeat} ==")
            print(f"machine: {os.cpu_count()} cores; load average {load0[0]:.1f} at the start, "
                  f"{os.getloadavg()[0]:.1f} at the end; marinctl's DuckDB memory_limit "
                  f"{os.environ.get('MARINCTL_DB_MEMORY', '512MB')}")
            print(f"stored: {facts['parts']} parquet parts ({facts['part_values']:,} values), "
                  f"{facts['long_rows']:,} long rows (live tail), {facts['anomalies']} anomalies detected")
            print(f"{'':46} {'wall s':>7} {'rows/s':>9} {'peak tree RSS MiB':>18}")
            print(f"{'marinctl sync (detection included)':46} {wall:7.2f} {rows_s:9,.0f} {peak:18,.0f}")
            if floors:
                fwall = statistics.median(f["wall"] for f in floors)
                print(f"{'floor: parquet -> DuckDB table (exports only)':46} {fwall:7.2f} {exported / fwall:9,.0f} "
                      f"{max(f['peak_mib'] for f in floors):18,.0f}")
            if sdks:
                srate = statistics.median(s["rows_s"] for s in sdks)
                print(f"{'wandb SDK scan_history()':46} {'':7} {srate:9,.0f}   (runs: {[round(s['rows_s']) for s in sdks]})")
            print()
            if sdks and statistics.median(s["rows_s"] for s in sdks) > 0:
                print(f"ratio vs SDK (rows/s):            {rows_s / statistics.median(s['rows_s'] for s in sdks):6.1f}x   (target >= 50x)")
            if floors:
                print(f"ratio to the floor (wall / floor): {wall / statistics.median(f['wall'] for f in floors):6.2f}    (target <= 2)")
            print(f"peak tree RSS:                    {peak:6,.0f} MiB (target <= 1,024 MiB at 400k steps)")

            if not args.no_incremental:
                incremental(fs, last_home, env, args.steps)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def incremental(fs: FakeServer, home: Path, env: dict, steps: int) -> None:
    """1,000 new steps arrive on the server (its own process extends the run), then sync again."""
    fs.proc.stdin.write(json.dumps({"extend": steps + 999}) + "\n")
    fs.proc.stdin.flush()
    if fs.proc.stdout.readline().strip() != "extended":
        print("incremental: the server did not extend the run")
        return
    res = marinctl_sync({**env, "MARINCTL_HOME": str(home)}, fs.target)
    timing = res["report"]["timing"]
    print(f"incremental sync of 1,000 new steps: {res['wall']:.2f} s wall (process start included); marinctl's own "
          f"{timing['total_s'] - timing['wandb_http_s']:.2f} s, waiting on the server {timing['wandb_http_s']:.2f} s")
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import marinctl.cli"], cwd=ROOT, check=True)
    print(f"  of which interpreter + import start-up: {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child-floor":
        child_floor(*sys.argv[2:])
    else:
        main()
