"""Where the detection pass after a full sync spends time and memory (PROFILE).

Runs the steps of `analysis.detectors.detect_incremental` one by one on a copy of a store a
full sync left (pass --store: e.g. bench/proto_store.py --work DIR keeps DIR/a), printing per
step its seconds and the process's peak RSS while it ran (VmHWM, reset before each step
through /proc/self/clear_refs), with DuckDB's memory_limit/threads as given.

    python bench/profile_detect.py --store DIR/a [--memory 512MB] [--threads 2]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def hwm_mib() -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def reset_hwm() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", type=Path, required=True, help="a data home holding marinctl.duckdb")
    ap.add_argument("--memory", default="512MB")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import duckdb
    import pyarrow.compute as pc

    from marinctl.analysis.detect import detectors as D
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "marinctl.duckdb"
        shutil.copy(args.store / "marinctl.duckdb", db)
        con = duckdb.connect(str(db))
        con.execute(f"SET memory_limit = '{args.memory}'; SET threads = {args.threads}; SET enable_progress_bar = false")
        pk = con.execute("SELECT run_pk FROM runs LIMIT 1").fetchall()[0][0]
        state: dict = {}
        print(f"{'step':40} {'seconds':>8} {'peak RSS MiB':>13}")

        def step(label, fn):
            reset_hwm()
            t = time.perf_counter()
            out = fn()
            print(f"{label:40} {time.perf_counter() - t:8.2f} {hwm_mib():13,.0f}", flush=True)
            return out

        fr = step("frame (run, lineage, roles)", lambda: D.frame(con, pk))
        step("last step", lambda: D._last_step(con, pk))
        leaves = step("hyperball leaves", lambda: D.hyperball_leaves(con, fr))
        refs = step("hyperball refs (first value per leaf)", lambda: D.hyperball_refs(con, fr, leaves) if leaves else {})
        dense = step("read 10 dense keys, whole run", lambda: D.read(con, fr.segments, [
            D.LOSS, D.GRAD, D.TPS, D.DURATION, D.TIMESTAMP, D.ENTROPY, D.ZLOSS, D.DROP, D.OVERFLOW, D.PNORM], 0, None))
        owner = lambda s: pk  # noqa: E731
        found = step("spikes (rolling median/MAD)", lambda: D.spikes(con, fr, dense, fr.own_lo, None, owner))
        found += step("sustained_rise", lambda: D.sustained_rise(con, fr, dense, fr.own_lo, None, owner))
        found += step("throughput", lambda: D.throughput(con, fr, dense, fr.own_lo, None, owner))
        own = dense.filter(pc.greater_equal(dense["step"], fr.own_lo))
        found += step("timing", lambda: D.timing(con, fr, own, fr.own_lo, None, owner))
        found += step("nonfinite (all keys)", lambda: D.nonfinite(con, fr, fr.own_lo, None, owner))
        found += step("param_norm_jumps (+attribution)", lambda: D.param_norm_jumps(con, fr, dense, fr.own_lo, None, owner))
        if leaves:
            watch = step("read hyperball leaves, whole run", lambda: D.read(con, fr.segments, [k for k in leaves if k in refs], 0, None))
            found += step("hyperball_drift", lambda: D.hyperball_drift(con, fr, watch, refs, fr.own_lo, None, owner))
        state["n"] = step("store anomalies + fingerprints", lambda: (D._store(con, fr, found, fr.own_lo),
                                                                     D._save_state(con, fr, D._last_step(con, pk), refs)))
        print(f"{len(found)} anomalies")
        con.close()


if __name__ == "__main__":
    main()
