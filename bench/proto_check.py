"""PROTOTYPE self-check for layout (b): kills and rewinds end identical to a clean mirror.

SYNTHETIC run (30k steps, 4 layers, exports in 10k-step parts, 5k-step live tail) served
in-process by the fake W&B server. Checks, each against a clean sync into a fresh home:
1. SIGKILL the prototype sync at --kills random moments (download, register, tail), resume
   until it finishes: same history (digest of the sorted long export) and no orphan files;
2. a rewind INSIDE the exported range (W&B history rewritten from step 10,500 with new
   values; new export files): the straddling part is clipped, later parts dropped, new
   parts registered from the rewind on;
3. a rewind inside the live tail (long table only).

    python bench/proto_check.py [--kills 10] [--seed 0] [--fast-tail]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import proto_parts as P  # noqa: E402
from bench import proto_sync  # noqa: E402
from marinctl.sources.wandb import WandbClient  # noqa: E402
from marinctl.store import Store  # noqa: E402
from tests.fakes.synth import marin_run  # noqa: E402
from tests.fakes.wandb_server import WandbServer  # noqa: E402

ENTITY, PROJECT, RUN = "marin-community", "marin_moe", "check-synthetic"


def sync_into(home: Path, url: str) -> None:
    os.environ["MARINCTL_HOME"] = str(home)
    with WandbClient(url, max_attempts=3) as client:
        proto_sync.sync(Store(home / "marinctl.duckdb"), client, ENTITY, PROJECT, RUN, home,
                        fast_tail=os.environ.get("PROTO_FAST_TAIL") == "1")


def digest(home: Path) -> tuple[str, int, int]:
    """(sha1 of the sorted long history, rows, unreferenced files) of the run in `home`."""
    import duckdb

    con = duckdb.connect(str(home / "marinctl.duckdb"), read_only=True)
    try:
        pk = con.execute("SELECT run_pk FROM runs").fetchall()[0][0]
        hs, n = [hashlib.sha1() for _ in range(3)], 0  # one hash per column: batch bounds differ between homes
        for b in P.Reader(con, home).export_batches([(pk, None, None)], None):
            hs[0].update(b.column(0).to_numpy().tobytes())
            hs[1].update("".join(k + "\n" for k in b.column(1).to_pylist()).encode())
            hs[2].update(b.column(2).to_numpy(zero_copy_only=False).tobytes())
            n += b.num_rows
        h = hashlib.sha1(b"".join(x.digest() for x in hs))
        refs = {r[0] for r in con.execute("SELECT source FROM history_parts").fetchall()}
    finally:
        con.close()
    files = {str(f.relative_to(home)) for f in (home / "history").rglob("*") if f.is_file()} if (home / "history").exists() else set()
    return h.hexdigest(), n, len(files - refs)


def clean(url: str, work: Path, name: str) -> tuple[str, int, int]:
    home = work / name
    home.mkdir()
    sync_into(home, url)
    return digest(home)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--fast-tail", action="store_true", help="the tail with orjson and ~1M-value commits")
    args = ap.parse_args()
    if args.fast_tail:
        os.environ["PROTO_FAST_TAIL"] = "1"
    rng = random.Random(args.seed)
    run = marin_run(RUN, steps=30_000, layers=4, extra_scalar_keys=20, state="running")
    failures = 0

    def check(label: str, got, want) -> None:
        nonlocal failures
        ok = got[:2] == want[:2] and got[2] == 0
        failures += not ok
        print(f"  {'ok ' if ok else 'FAIL'} {label}: {got[1]:,} rows, orphans {got[2]}"
              + ("" if ok else f" (want {want[1]:,} rows, digest {want[0][:8]} got {got[0][:8]})"), flush=True)

    with WandbServer([run], verbose=False, exported_until={RUN: 25_000}, parquet_steps_per_file=10_000) as server, \
            tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "WANDB_BASE_URL": server.url}
        want = clean(server.url, work, "clean")
        print(f"clean mirror: {want[1]:,} long rows")

        print(f"1. SIGKILL at {args.kills} random moments, then resume")
        for k in range(args.kills):
            home = work / f"kill{k}"
            home.mkdir()
            delay = rng.uniform(0.5, 8.0)
            proc = subprocess.Popen([sys.executable, __file__, "--child", str(home), server.url], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(delay)
            killed = proc.poll() is None
            if killed:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
            sync_into(home, server.url)  # resume
            check(f"killed at {delay:.1f} s{'' if killed else ' (finished first)'}", digest(home), want)

        print("2. rewind inside the exported range (from step 10,500)")
        home = work / "rewind"
        home.mkdir()
        sync_into(home, server.url)
        server.runs[RUN].rewrite_from(10_500, seed=7)
        sync_into(home, server.url)
        check("after rewind + resync", digest(home), clean(server.url, work, "clean2"))

        print("3. rewind inside the live tail (from step 27,000)")
        server.runs[RUN].rewrite_from(27_000, seed=8)
        sync_into(home, server.url)
        check("after tail rewind + resync", digest(home), clean(server.url, work, "clean3"))
    print("all checks passed" if not failures else f"{failures} check(s) FAILED")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        sync_into(Path(sys.argv[2]), sys.argv[3])
    else:
        main()
