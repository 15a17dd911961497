"""Local `.wandb` reader speed: marinctl's reader vs the naive full-protobuf reader.

The input is a real transaction log written once by the real wandb SDK (offline mode) and
cached: 20k steps x 32 keys per step (30 scalar keys every step, 2 norm keys every 10
steps, Marin-shaped names, SYNTHETIC values) — ~42 MB, ~60k records, two thirds of them
summaries. Prints, side by side, history rows/s (rows = steps) for:

- naive: the obvious reader (what W&B's own `wandb/sdk/internal/datastore.py` did, gone in
  0.31) — frame every record, protobuf-parse
  every one with `wandb_internal_pb2.Record`, json.loads every value (the baseline);
- marinctl: `wandb_file.scan` (peeks record types, skips summaries) + `decode_history`
  (bulk column decode into long arrays);
- sync: `sync.local.sync_path` into a fresh DuckDB store (reader + run/summary/console +
  the metrics insert);
- re-sync of the unchanged file (should cost next to nothing).

    python bench/bench_wandb_file.py [--steps 20000] [--keys 32] [--cache DIR] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

WRITER = r'''
import math, sys, wandb
out, steps, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
names = ["train/loss", "grad/norm/total", "optim/learning_rate", "optim/adam_lr", "params/norm/total",
         "throughput/tokens_per_second", "moe/drop_fraction", "train/router/load_balancing_loss"]
names += [f"train/router/layer_{i}/entropy" for i in range(keys - 2 - len(names))]
run = wandb.init(mode="offline", dir=out, project="bench", name="synthetic-bench",
                 settings=wandb.Settings(x_disable_stats=True))
for s in range(steps):
    row = {n: math.sin(s * 1e-3 + i) + 2.0 for i, n in enumerate(names)}
    if s % 10 == 0:
        row["params/norm/stacked_blocks.0.mlp.router_bias"] = 0.5 + s * 1e-5
        row["params/norm/stacked_blocks.1.mlp.router_bias"] = 0.4 + s * 1e-5
    run.log(row, step=s)
run.finish()
wandb.teardown()
'''


def cached_file(cache: Path, steps: int, keys: int) -> Path:
    folder = cache / f"wandb_{steps}x{keys}"
    found = sorted(folder.glob("wandb/*/run-*.wandb"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    print(f"writing {steps} steps x {keys} keys with the wandb SDK into {folder} (once) ...", file=sys.stderr)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    subprocess.run([sys.executable, "-c", WRITER, str(folder), str(steps), str(keys)], check=True, env=env,
                   stdout=subprocess.DEVNULL)
    return sorted(folder.glob("wandb/*/run-*.wandb"))[0]


def naive_rows(path: Path) -> int:
    """The naive reader: full Record parse of every record, json per value."""
    from wandb.proto import wandb_internal_pb2 as pb

    header, rec, block = struct.Struct("<4sHB"), struct.Struct("<IHB"), 32768
    crc = {t: zlib.crc32(bytes([t])) for t in range(1, 5)}
    buf = path.read_bytes()
    pos, parts, n, rows = header.size, [], len(buf), 0
    while pos + rec.size <= n:
        left = block - (pos % block)
        if left < rec.size:
            pos += left
            continue
        c, ln, typ = rec.unpack_from(buf, pos)
        if typ == 0 and ln == 0:
            pos += left
            continue
        pos += rec.size
        data = buf[pos:pos + ln]
        if len(data) < ln:
            break
        if (zlib.crc32(data, crc[typ]) & 0xFFFFFFFF) != c:
            raise ValueError(pos)
        pos += ln
        if typ == 1:
            payload = data
        elif typ == 2:
            parts = [data]
            continue
        elif typ == 3:
            parts.append(data)
            continue
        else:
            parts.append(data)
            payload = b"".join(parts)
        r = pb.Record()
        r.ParseFromString(payload)
        if r.WhichOneof("record_type") == "history":
            row = {(it.key or "/".join(it.nested_key)): json.loads(it.value_json) for it in r.history.item}
            row.setdefault("_step", r.history.step.num)
            rows += 1
    return rows


def marinctl_rows(path: Path) -> int:
    from marinctl.sources import wandb_file as wf

    with open(path, "rb") as fh:
        fh.seek(wf.HEADER_SIZE)
        buf = fh.read()
    sc = wf.scan(buf, wf.HEADER_SIZE)
    cols = wf.decode_history([p for _, t, p in sc.records if t == wf.HISTORY])
    return len(cols.row_steps)


def timed(fn, repeat: int) -> tuple[float, float, object]:
    """(best wall s, best CPU s, result): CPU time is the figure that survives a busy machine."""
    samples, cpu, out = [], [], None
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        samples.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return min(samples), min(cpu), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "marinctl-bench")
    args = ap.parse_args()
    path = cached_file(args.cache, args.steps, args.keys)

    from marinctl.sources import wandb_file as wf
    from marinctl.sync import local as wl
    from marinctl.store import Store

    t = time.perf_counter()
    wf._pb()
    wf._columns()
    warm = time.perf_counter() - t

    # interleaved, so both readers see the same machine load (best of N)
    samples_n, samples_m, cpu_n, cpu_m = [], [], [], []
    for _ in range(args.repeat):
        t_n, c_n, rows_n = timed(lambda: naive_rows(path), 1)
        t_m, c_m, rows_m = timed(lambda: marinctl_rows(path), 1)
        samples_n.append(t_n)
        samples_m.append(t_m)
        cpu_n.append(c_n)
        cpu_m.append(c_m)
    best_n, med_n, cbest_n = min(samples_n), statistics.median(samples_n), min(cpu_n)
    best_m, med_m, cbest_m = min(samples_m), statistics.median(samples_m), min(cpu_m)
    assert rows_n == rows_m == args.steps, (rows_n, rows_m)

    def fresh_sync():
        with tempfile.TemporaryDirectory() as d:
            store = Store(Path(d) / "bench.duckdb")
            store.ensure_schema()
            t0 = time.perf_counter()
            res = wl.sync_path(store, path)
            t1 = time.perf_counter()
            wl.sync_path(store, path)
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1, res[0]["rows_added"]

    runs = [fresh_sync() for _ in range(args.repeat)]
    sync_s = min(r[0] for r in runs)
    resync_s = min(r[1] for r in runs)
    values = runs[0][2]

    size = path.stat().st_size
    print(f"file: {path} ({size / 1e6:.1f} MB, {args.steps} steps x {args.keys} keys, {values} values stored)")
    print(f"one-off imports (wandb protobuf classes, column types): {warm:.2f} s, not counted below")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (wall figures suffer when busy)")
    print(f"{'reader':<34}{'best s':>9}{'median s':>10}{'rows/s':>12}{'vs naive':>10}"
          f"{'CPU s':>9}{'rows/CPU-s':>12}")
    for name, best, med, cpu in [("naive (full protobuf, json/value)", best_n, med_n, cbest_n),
                                 ("marinctl reader (scan+decode)", best_m, med_m, cbest_m)]:
        print(f"{name:<34}{best:>9.3f}{med:>10.3f}{args.steps / best:>12,.0f}{best_n / best:>9.1f}x"
              f"{cpu:>9.3f}{args.steps / cpu:>12,.0f}")
    print(f"{'sync_path into DuckDB':<34}{sync_s:>9.3f}{'':>10}{args.steps / sync_s:>12,.0f}{best_n / sync_s:>9.1f}x")
    print(f"{'re-sync unchanged file':<34}{resync_s:>9.4f}")


if __name__ == "__main__":
    main()
