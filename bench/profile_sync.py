"""Where the W&B full sync spends time and memory (PROFILE, not a pass/fail check).

SYNTHETIC hero-shaped run (tests/fakes/synth.py: 164 dense keys every step, 598 watch keys
every 10 steps, 757 columns in the exports), served by the fake W&B server in its own
process: parquet exports for all but the last 5,000 steps, the live tail over GraphQL.

The measured client is `marinctl sync ENTITY/PROJECT/RUN --json` run through a thin driver
that wraps the sync's stages with timers (no code of marinctl is changed); a sampler reads
the client's process-tree RSS every 20 ms, so each stage gets its wall time and the peak
RSS reached while it ran. `--py-spy` adds a sampling profile (top functions by self and
inclusive time; py-spy must be installed in the venv).

    python bench/profile_sync.py [--steps 100000] [--py-spy] [--memory-limit 512MB]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import FakeServer, run_measured  # noqa: E402

# (label, module, attribute path) — stages wrapped in the child; nested stages overlap.
STAGES = [
    ("cli total", "marinctl.cli", "main"),
    ("sync_run", "marinctl.sync.wandb", "sync_run"),
    ("rewind check (timestamps)", "marinctl.sync.wandb", "_rewound_from"),
    ("parts: whole bulk stage", "marinctl.sync.wandb", "_sync_parts"),
    ("parts: GraphQL parquetHistory", "marinctl.sources.wandb", "WandbClient.parquet_history"),
    ("parts: download (2 threads)", "marinctl.sources.wandb", "WandbClient.download"),
    ("parts: facts (decode once; worker thread)", "marinctl.store.parts", "facts"),
    ("parts: register (+commit)", "marinctl.store.parts", "register"),
    ("tail: whole window stage", "marinctl.sync.wandb", "_sync_windows"),
    ("tail: history window GET+JSON (worker thread)", "marinctl.sources.wandb", "WandbClient.history"),
    ("tail: batch_from_rows", "marinctl.sync.wandb", "batch_from_rows"),
    ("tail: replace_range", "marinctl.store.metrics", "replace_range"),
    ("detection + alignment after sync", "marinctl.sync.derive", "after_sync"),
    ("detection: scan", "marinctl.analysis.detect.detectors", "scan"),
    ("detection: frames", "marinctl.store.history", "frame"),
    ("detection: nonfinite", "marinctl.store.history", "nonfinite"),
    ("detection: first values", "marinctl.store.history", "first_values"),
    ("detection: robust_z", "marinctl.store.rolling", "robust_z"),
    ("detection: crossings", "marinctl.store.rolling", "crossings"),
    ("detection: fingerprints (sampled)", "marinctl.store.history", "sampled"),
    ("alignment: realign", "marinctl.analysis.events.align", "realign"),
]


def child(argv: list[str]) -> None:
    """Run `marinctl sync` with stage timers; write [(label, t0, t1, thread)] to $PROFILE_STAGES."""
    import importlib
    import threading

    origin = float(os.environ["PROFILE_T0"])
    log: list[tuple[str, float, float, str]] = []
    # the parent's clock: perf_counter is per-process, so use time.time() offsets
    for label, mod, attr in STAGES:
        m = importlib.import_module(mod)
        owner, name = (m, attr) if "." not in attr else (getattr(m, attr.split(".")[0]), attr.split(".")[1])
        fn = getattr(owner, name)

        def wrap(fn=fn, label=label):
            def inner(*a, **k):
                t = time.time() - origin
                try:
                    return fn(*a, **k)
                finally:
                    log.append((label, t, time.time() - origin, threading.current_thread().name))
            return inner

        setattr(owner, name, wrap())
    import marinctl.cli

    try:
        marinctl.cli.main(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise
    finally:
        Path(os.environ["PROFILE_STAGES"]).write_text(json.dumps(log))


def summarise(stages: list, samples: list[tuple[float, float]]) -> list[tuple[str, int, float, float]]:
    """(label, calls, seconds, peak RSS MiB while in the stage) per stage, in STAGES order."""
    by = collections.defaultdict(list)
    for label, t0, t1, _ in stages:
        by[label].append((t0, t1))
    out = []
    for label, _, _ in STAGES:
        spans = by.get(label, [])
        secs = sum(t1 - t0 for t0, t1 in spans)
        peak = max((r for t, r in samples for t0, t1 in spans if t0 <= t <= t1), default=float("nan"))
        out.append((label, len(spans), secs, peak))
    return out


def top_py_spy(raw: Path, n: int = 25) -> tuple[list, list]:
    """Top frames by self and by inclusive samples from py-spy's collapsed-stack output."""
    self_c, incl_c, total = collections.Counter(), collections.Counter(), 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        c = int(count)
        total += c
        frames = stack.split(";")
        self_c[frames[-1]] += c
        for f in set(frames):
            incl_c[f] += c
    pct = lambda c: 100.0 * c / max(total, 1)  # noqa: E731
    return ([(f, pct(c)) for f, c in self_c.most_common(n)], [(f, pct(c)) for f, c in incl_c.most_common(n * 2)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--py-spy", action="store_true", help="also record a py-spy profile (a second sync)")
    ap.add_argument("--memory-limit", default=None, help="MARINCTL_DB_MEMORY for the sync (default: marinctl's)")
    ap.add_argument("--no-detect", action="store_true", help="(informational) detection still runs; listed apart")
    args = ap.parse_args()

    t = time.perf_counter()
    with FakeServer(args.steps) as fs:
        size = sum(f.stat().st_size for f in fs.files) / 2**20
        print(f"SYNTHETIC run {args.steps:,} steps; server up in {time.perf_counter() - t:.0f} s; "
              f"{len(fs.files)} export parts, {size:,.0f} MiB", flush=True)
        with tempfile.TemporaryDirectory() as home:
            stages_file = Path(home) / "stages.json"
            origin = time.time()
            env = {**os.environ, "WANDB_BASE_URL": fs.url, "MARINCTL_HOME": home,
                   "PROFILE_STAGES": str(stages_file), "PROFILE_T0": repr(origin)}
            if args.memory_limit:
                env["MARINCTL_DB_MEMORY"] = args.memory_limit
            cmd = [sys.executable, __file__, "--child", "sync", fs.target, "--json"]
            res = run_measured(cmd, env=env)
            # shift samples to the child's clock (time.time() since origin)
            shift = time.time() - origin - res["wall"]
            samples = [(t + shift, r) for t, r in res["samples"]]
            stages = json.loads(stages_file.read_text())
            report = json.loads(res["stdout"])
            db = Path(home) / "marinctl.duckdb"
            print(f"full sync: {res['wall']:.1f} s wall = {args.steps / res['wall']:,.0f} rows/s; "
                  f"peak process-tree RSS {res['peak_mib']:,.0f} MiB; store file {db.stat().st_size / 2**20:,.0f} MiB; "
                  f"rows_added {sum(r['rows_added'] for r in report['runs']):,}")
            print(f"{'stage':48} {'calls':>5} {'seconds':>8} {'% wall':>7} {'peak RSS MiB':>13}")
            for label, calls, secs, peak in summarise(stages, samples):
                print(f"{label:48} {calls:5d} {secs:8.2f} {100 * secs / res['wall']:6.1f}% {peak:13,.0f}")
            first = min((s[1] for s in stages if s[0] == "cli total"), default=0.0)
            print(f"{'interpreter start + imports (before cli.main)':48} {'':5} {first:8.2f}")

            if args.py_spy:
                spy = Path(sys.executable).parent / "py-spy"
                home2 = Path(home) / "spy"
                home2.mkdir()
                raw = Path(home) / "spy.txt"
                env2 = {**env, "MARINCTL_HOME": str(home2), "PROFILE_STAGES": str(Path(home) / "s2.json")}
                subprocess.run([str(spy), "record", "-r", "50", "--format", "raw", "-o", str(raw), "--",
                                sys.executable, __file__, "--child", "sync", fs.target, "--json"],
                               env=env2, check=True, capture_output=True, cwd=Path(__file__).parent.parent)
                selfs, incl = top_py_spy(raw)
                print("\npy-spy, self time (% of samples):")
                for f, p in selfs:
                    print(f"  {p:5.1f}%  {f}")
                print("py-spy, inclusive (% of samples):")
                for f, p in incl:
                    print(f"  {p:5.1f}%  {f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2:])
    else:
        main()
