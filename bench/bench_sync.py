"""marinctl's W&B sync vs the wandb SDK's `scan_history()`, on the same loopback server.

SYNTHETIC data: one hero-scale Marin-shaped run from tests/fakes (default 400k steps,
~150 keys every step + ~600 watch-norm keys every 10 steps) served by the W&B-compatible
test server. In one run this script measures:

1. marinctl's full sync (a subprocess: `marinctl sync ENTITY/PROJECT/RUN`) — values/s
   and peak RSS of that process;
2. the SDK: `wandb.Api().run(...).scan_history()` on the same server, iterated for at
   most --sdk-seconds (it is far slower; its rate is measured over what it reached);
3. an incremental sync after 1,000 new steps.

    python bench/bench_sync.py [--steps 400000] [--sdk-seconds 60]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.synth import marin_run  # noqa: E402
from tests.fakes.wandb_server import WandbServer  # noqa: E402

PROJECT = "marin-community/marin_moe"


def run_marinctl(env: dict, target: str) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "marinctl", "sync", target, "--json"], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    dt = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"marinctl sync failed: {out.stderr}")
    return dt, out.stdout


def count_values(db: Path) -> int:
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
    finally:
        con.close()


def sdk_rate(url: str, run_id: str, seconds: float) -> tuple[int, int, float]:
    """(rows, values, elapsed) reached by scan_history within `seconds` (bench/harness.py)."""
    from bench.harness import sdk_rate as measure

    with tempfile.TemporaryDirectory() as cache:
        got = measure(url, run_id, seconds, cache)
    return got["rows"], got["values"], got["seconds"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=400_000)
    ap.add_argument("--layers", type=int, default=27, help="27 layers ≈ 600 watch-norm keys")
    ap.add_argument("--extra-keys", type=int, default=120, help="filler scalars to reach ~150 keys/step")
    ap.add_argument("--sdk-seconds", type=float, default=60.0)
    args = ap.parse_args()

    t = time.perf_counter()
    run = marin_run("hero-synthetic-bench", steps=args.steps, layers=args.layers,
                    extra_scalar_keys=args.extra_keys, state="running")
    print(f"generated SYNTHETIC run: {args.steps:,} steps, {len(run.series)} keys in {time.perf_counter() - t:.1f} s",
          flush=True)
    with WandbServer([run], verbose=False, exported_until={run.run_id: args.steps - 5_000}) as server, \
            tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "WANDB_BASE_URL": server.url, "MARINCTL_HOME": home}
        target = f"{PROJECT}/{run.run_id}"
        # warm the server's parquet export so neither client pays for writing it
        server.export_urls(run, server.exported_until_of(run))

        dt, _ = run_marinctl(env, target)
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        values = count_values(Path(home) / "marinctl.duckdb")
        ours = values / dt
        print(f"marinctl full sync : {values:,} values in {dt:.1f} s = {ours:,.0f} values/s, "
              f"{args.steps / dt:,.0f} rows/s; peak RSS {rss:,.0f} MiB", flush=True)

        if args.sdk_seconds > 0:
            rows, vals, sdt = sdk_rate(server.url, run.run_id, args.sdk_seconds)  # retries inside
            theirs = vals / sdt if sdt else float("nan")
            print(f"wandb SDK scan     : {vals:,} values ({rows:,} rows) in {sdt:.1f} s = {theirs:,.0f} values/s, "
                  f"{rows / sdt:,.0f} rows/s", flush=True)
            print(f"ratio (marinctl / SDK, values per second): {ours / theirs:.1f}x")

        run.extend(args.steps + 999)  # 1,000 new steps arrive
        # Warm the fake server: it recomputes summaries/historyKeys of the whole SYNTHETIC run
        # after a change, a cost W&B's real servers do not put on the client.
        from marinctl.sources.wandb import WandbClient

        with WandbClient(server.url) as warm:
            warm.run(*PROJECT.split("/"), run.run_id)
            warm.history(*PROJECT.split("/"), run.run_id, args.steps - 1, args.steps + 1000)
        dt_inc, out = run_marinctl(env, target)
        import json

        timing = json.loads(out)["timing"]
        print(f"incremental sync of 1,000 new steps: {dt_inc:.2f} s wall (process start included); "
              f"marinctl's own time {timing['total_s'] - timing['wandb_http_s']:.2f} s, "
              f"waiting on the server {timing['wandb_http_s']:.2f} s")
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "import marinctl.cli"], cwd=ROOT, check=True)
        print(f"  of which interpreter + import start-up: {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
