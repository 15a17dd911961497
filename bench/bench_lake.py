"""A team's DuckLake beside the embedded store, side by side on one machine (the team store's speed targets).

SYNTHETIC data only. A throwaway PostgreSQL cluster on loopback (tests/lake.py) holds the lake's
catalog, a local folder its data; the W&B fake runs in its own process (bench/harness.py) serving
one hero-shaped run (parquet exports for all but the last 5,000 steps). Interleaved rounds, medians:

1. first sync of the run: embedded home vs the lake (target: the lake >= 0.5x the embedded rows/s);
2. `explain step N --json` as a new process, after the sync (target <= 1 s on the lake);
3. watch's first frame, a new process drawing the run through Textual's Pilot (target <= 1.5 s);
4. a live run's new steps, from the moment the fake serves them to a reader's read showing them,
   a follower (`sync --follow --interval 1`) writing (target <= 2 s on the lake);
5. `store copy` of a 1M-row mirror: file -> lake beside file -> file (target <= 10 s).

    nice -n 10 python bench/bench_lake.py [--steps 20000] [--repeat 3]
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

from bench.harness import FakeServer  # noqa: E402
from tests.lake import PgCluster  # noqa: E402

_WATCH = r"""
import asyncio, os, sys, time
t0 = float(sys.argv[1])
sys.path.insert(0, {root!r})
from tests.watch_pilot import open_watch, run_test, wait_for_text
from marinctl.store import open_store
async def look():
    async with run_test(open_watch(None, sys.argv[2], store=open_store())) as pilot:
        await wait_for_text(pilot, "train/loss", timeout=120)
        print(time.time() - t0, flush=True)
asyncio.run(look())
"""


def cli(args: list[str], env: dict, timeout: float = 1800) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "marinctl", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"marinctl {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done


def new_lake(pg: PgCluster, work: Path, tag: str) -> dict:
    url, data = pg.url(pg.new_database()), work / f"data-{tag}"
    cli(["store", "init", url, "--data", str(data)], env=dict(os.environ))
    return {"MARINCTL_STORE": url, "MARINCTL_STORE_DATA": str(data)}


def timed(args: list[str], env: dict) -> float:
    t = time.perf_counter()
    cli(args, env)
    return time.perf_counter() - t


def watch_first(env: dict, run: str) -> float:
    t0 = time.time()
    done = subprocess.run([sys.executable, "-c", _WATCH.format(root=str(ROOT)), str(t0), run], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"watch failed:\n{done.stderr[-2000:]}")
    return float(done.stdout.strip().splitlines()[-1])


def live_lag(fs: FakeServer, env: dict, store, start: int, rounds: int) -> list[float]:
    """Seconds from the fake serving new steps to a reader seeing them, a follower writing."""
    follower = subprocess.Popen([sys.executable, "-m", "marinctl", "sync", fs.target, "--follow", "--interval", "1"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                                start_new_session=True)
    lags = []
    try:
        last = start
        time.sleep(5)
        for _ in range(rounds):
            last += 50
            fs.proc.stdin.write(json.dumps({"extend": last}) + "\n")
            fs.proc.stdin.flush()
            assert fs.proc.stdout.readline().strip() == "extended"
            served = time.perf_counter()
            while True:
                with store.connect() as con:
                    got = con.execute("SELECT max(last_step) FROM runs").fetchall()[0][0]
                if got is not None and got >= last:
                    break
                if time.perf_counter() - served > 60:
                    raise SystemExit("the reader never saw the new steps")
                time.sleep(0.05)
            lags.append(time.perf_counter() - served)
            time.sleep(1.5)
    finally:
        os.killpg(follower.pid, 2)
        follower.wait(timeout=60)
    return lags


def million_row_mirror(path: Path) -> int:
    from marinctl.store import Store
    from tests.fakes.load import load_into_store
    from tests.fakes.synth import marin_run

    runs = [marin_run(f"copy-synthetic-{i}", steps=11_000, layers=2, experts=4, norm_every=10, seed=i,
                      entity="synthetic-lab", project="copy-synthetic") for i in range(4)]     # ~1.05M values
    load_into_store(Store(path), runs)
    return sum(len(r.long_rows()) for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-lake-"))
    pg = PgCluster().start()
    load0 = os.getloadavg()[0]
    base = {k: v for k, v in os.environ.items() if not k.startswith("MARINCTL_")}
    try:
        with FakeServer(args.steps) as fs:
            env = {**base, "WANDB_BASE_URL": fs.url}
            sync = {"embedded": [], "lake": []}
            explain = {"embedded": [], "lake": []}
            watch = {"embedded": [], "lake": []}
            for rep in range(args.repeat):
                homes = {"embedded": {**env, "MARINCTL_HOME": str(work / f"e{rep}")},
                         "lake": {**env, "MARINCTL_HOME": str(work / f"l{rep}"), **new_lake(pg, work, str(rep))}}
                for kind in ("embedded", "lake") if rep % 2 == 0 else ("lake", "embedded"):
                    sync[kind].append(timed(["sync", fs.target, "--json"], homes[kind]))
                for kind in ("embedded", "lake"):
                    # another process; on the lake another machine too (a home of its own)
                    reader = homes[kind] if kind == "embedded" else {**homes[kind], "MARINCTL_HOME": str(work / f"r{rep}")}
                    explain[kind].append(timed(["explain", "step", str(args.steps // 2), "--run", fs.run_id,
                                                "--json"], reader))
                    watch[kind].append(watch_first(reader, fs.run_id))
                print(f"  round {rep + 1}: sync embedded {sync['embedded'][-1]:.1f} s, lake {sync['lake'][-1]:.1f} s;"
                      f" explain {explain['embedded'][-1]:.2f} / {explain['lake'][-1]:.2f} s;"
                      f" watch {watch['embedded'][-1]:.2f} / {watch['lake'][-1]:.2f} s", flush=True)
            from marinctl.store import Store, lake_store

            last_lake = homes["lake"]
            lags = {"lake": live_lag(fs, last_lake, lake_store(last_lake["MARINCTL_STORE"],
                                                             last_lake["MARINCTL_STORE_DATA"]), args.steps - 1, 5)}
            lags["embedded"] = live_lag(fs, homes["embedded"], Store(work / f"e{args.repeat - 1}" / "marinctl.duckdb"),
                                        args.steps - 1 + 250, 5)
        mirror = work / "million.duckdb"
        rows = million_row_mirror(mirror)
        copies = {"file -> lake": [], "file -> file": []}
        for rep in range(args.repeat):
            dst = new_lake(pg, work, f"copy{rep}")
            copies["file -> lake"].append(timed(["store", "copy", str(mirror), dst["MARINCTL_STORE"]],
                                                {**base, **dst}))
            copies["file -> file"].append(timed(["store", "copy", str(mirror), str(work / f"copy{rep}.duckdb")], base))
        med = {k: {kind: statistics.median(v) for kind, v in d.items()} for k, d in
               (("sync", sync), ("explain", explain), ("watch", watch), ("lag", lags), ("copy", copies))}
        print(f"\n== the lake beside the embedded store: SYNTHETIC {args.steps:,}-step hero-shaped run, medians of "
              f"{args.repeat} ==")
        print(f"machine: {os.cpu_count()} cores, load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} "
              f"at the end; PostgreSQL on loopback ({pg_version()}), data in a local folder")
        rows_s = {k: args.steps / v for k, v in med["sync"].items()}
        print(f"first sync: embedded {med['sync']['embedded']:.2f} s ({rows_s['embedded']:,.0f} steps/s), lake "
              f"{med['sync']['lake']:.2f} s ({rows_s['lake']:,.0f} steps/s): lake/embedded "
              f"{rows_s['lake'] / rows_s['embedded']:.2f}x  (target >= 0.5x)")
        print(f"explain step N as a new process: embedded {med['explain']['embedded']:.2f} s, lake "
              f"{med['explain']['lake']:.2f} s  (target <= 1 s)")
        print(f"watch's first frame, new process: embedded {med['watch']['embedded']:.2f} s, lake "
              f"{med['watch']['lake']:.2f} s  (target <= 1.5 s)")
        print(f"served -> visible to a reader, follower at --interval 1: embedded {med['lag']['embedded']:.2f} s, "
              f"lake {med['lag']['lake']:.2f} s (max {max(lags['lake']):.2f})  (target <= 2 s)")
        print(f"store copy of a {rows:,}-row mirror: file -> lake {med['copy']['file -> lake']:.2f} s, file -> file "
              f"{med['copy']['file -> file']:.2f} s  (target <= 10 s)")
    finally:
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)


def pg_version() -> str:
    from tests.lake import pg_version as version

    return version()


if __name__ == "__main__":
    main()
