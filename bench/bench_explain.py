"""Benchmark: detection and `explain step N` on a hero-scale SYNTHETIC store.

Store: one SYNTHETIC Marin-shaped run (tests/fakes/synth.py), 400,000 steps, ~150 scalar keys
per step and ~600 norm keys every 10 steps (~85M values), with a QB router-bias jump at step
500 and a loss spike at step 250,000 (5/8 of the run at any --steps). Built once and cached (default /tmp/marinctl-bench/).

Targets: explain ≤ 1 s wall; full detection ≤ 30 s; incremental detection per
1,000 new steps ≤ 0.5 s; `marinctl explain step N --json` as a new process ≤ 0.5 s,
timed side by side with a baseline process (`marinctl runs --json` on the same store: interpreter,
CLI import and store open, nothing analysed), interleaved `--repeat` times, medians reported.
Also, so the baseline's own cost is plain: the bare interpreter (`python -c pass`), the imports
explain needs (no store), and explain on a store no detection pass has seen (no saved state).
Each process command runs once before timing (page cache, `.pyc` files: the subprocesses may
write bytecode even where the calling shell sets PYTHONDONTWRITEBYTECODE, as an installed
marinctl would have it). Printed side by side with the measured figures.

The same `explain step N --json` processes also run from a baseline tree (`--baseline
REV`, default: where this branch left main; a temporary `git worktree`, removed at the end) on
the same store, interleaved with this tree's, each tree's package first on PYTHONPATH; the
ratio this / baseline is the median of the pair-by-pair ratios.

    .venv/bin/python bench/bench_explain.py [--steps 400000] [--cache DIR] [--rebuild] [--repeat 5] [--baseline REV]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

RUN_ID = "hero-bench-synthetic"


def spike_step(steps: int) -> int:
    """Where the SYNTHETIC loss spike goes: step 250,000 of the default 400,000."""
    return steps * 5 // 8


def build(path: Path, steps: int) -> None:
    from tests.fakes import synth
    from tests.fakes.load import load_into_store

    from marinctl.store import Store

    t = time.perf_counter()
    run = synth.marin_run(RUN_ID, steps=steps, layers=27, experts=8, extra_scalar_keys=100, eval_every=3000,
                          num_train_steps=390_251, learning_rate=0.003291, adam_lr=0.000759, hidden_dim=6144)
    for i in range(27):
        key = f"params/norm/stacked_blocks.{i}.mlp.router_bias"
        s, v = run.series[key]
        run.set_values(key, s, np.where(s >= 500, 30.0, v))
    leaves = [k for k in run.series if k.startswith("params/norm/") and k != "params/norm/total"]
    s = run.series[leaves[0]][0]
    run.set_values("params/norm/total", s, np.sqrt(sum(run.series[k][1] ** 2 for k in leaves)))
    sl, vl = run.series["train/loss"]
    spike = spike_step(steps)
    run.set_values("train/loss", [spike], [vl[spike] * 1.8])
    dense = sum(1 for k, (st, _) in run.series.items() if len(st) == steps)
    print(f"generated SYNTHETIC run: {len(run.series)} keys ({dense} per step) in {time.perf_counter() - t:.1f} s")
    tmp = path.with_suffix(".building")
    tmp.unlink(missing_ok=True)
    t = time.perf_counter()
    load_into_store(Store(tmp), [run], window=20_000)
    tmp.rename(path)
    print(f"loaded into {path} in {time.perf_counter() - t:.1f} s")


def working_copy(cache: Path, steps: int, name: str, *, rebuild: bool = False) -> Path:
    """A copy (`cache/name`) of the cached SYNTHETIC store of `steps` steps, built first if missing."""
    cache.mkdir(parents=True, exist_ok=True)
    src = cache / f"hero-explain-{steps}.duckdb"
    if rebuild or not src.exists():
        build(src, steps)
    work = cache / name
    shutil.copy(src, work)
    return work


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=400_000)
    ap.add_argument("--cache", default="/tmp/marinctl-bench")
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--baseline", default=None, help="revision to compare explain with (default: merge-base with main)")
    args = ap.parse_args()
    cache = Path(args.cache)
    work = working_copy(cache, args.steps, "work.duckdb", rebuild=args.rebuild)

    from marinctl.analysis.explain.explain import explain
    from marinctl.store import Store
    from marinctl.store.lineage import resolve_target
    from marinctl.sync.derive import detect

    store = Store(work)
    with store.connect() as con:
        pk = con.execute("SELECT run_pk FROM runs WHERE run_id = ?", [RUN_ID]).fetchall()[0][0]
        rows = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
    last = args.steps - 1
    cut = last - 999
    figures = []

    # incremental: detect up to `cut`, then "sync" the last 1,000 steps and detect again
    with store.transaction() as con:
        con.execute("CREATE TABLE _held AS SELECT * FROM metrics WHERE run_pk = ? AND step >= ?", [pk, cut])
        con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= ?", [pk, cut])
    t = time.perf_counter()
    with store.transaction() as con:
        n_full = detect(con, pk, full=True)
    t_full = time.perf_counter() - t
    figures.append((f"full detection ({cut:,} steps)", t_full, 30.0, f"{n_full} anomalies"))
    with store.transaction() as con:
        con.execute("INSERT INTO metrics SELECT * FROM _held ORDER BY key_id, step")
        con.execute("DROP TABLE _held")
    t = time.perf_counter()
    with store.transaction() as con:
        n_inc = detect(con, pk)
    t_inc = time.perf_counter() - t
    figures.append(("incremental detection, 1,000 new steps", t_inc, 0.5, f"{n_inc} new"))

    for step in sorted({min(500, last), spike_step(args.steps), max(last - 10_000, 0)}):
        t = time.perf_counter()
        with store.connect() as con:
            doc = explain(con, resolve_target(con, None), step)
        dt = time.perf_counter() - t
        top = doc["findings"][0] if doc["findings"] else None
        note = f"top: {top['kind']} {top['cause_class']}" if top else "no findings"
        figures.append((f"explain step {step:,} (in-process)", dt, 1.0, note))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(MARINCTL_HOME=str(cache))
    fresh = working_copy(cache, args.steps, "fresh.duckdb")     # never detected: explain reads without saved state
    rev = args.baseline or subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True,
                                          text=True, check=True).stdout.strip()
    base_tree = Path(tempfile.mkdtemp(prefix="marinctl-explain-base-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), rev], cwd=ROOT, check=True,
                   capture_output=True)
    trees = {"this": ROOT, "base": base_tree}

    def process(*argv: str, db: Path = work, tree: str = "this") -> tuple[float, float, subprocess.CompletedProcess]:
        """(wall s, CPU s of the child, the finished process)."""
        cmd = [sys.executable, *argv] if argv[0] == "-c" else [sys.executable, "-m", "marinctl", "--db", str(db), *argv]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, env={**env, "PYTHONPATH": str(trees[tree])},
                              cwd=trees[tree], timeout=120)
        wall = time.perf_counter() - t
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done

    short = rev[:7]
    late = min(250_000, args.steps * 5 // 8)        # deep in the run (250,000 of the default 400,000)
    runs = {
        "interpreter only: `python -c pass`": ("this", ("-c", "pass")),
        "explain's imports, no store (new process)": ("this", ("-c", "import marinctl.cli, marinctl.analysis.explain.explain")),
        "baseline: `marinctl runs --json` (new process)": ("this", ("runs", "--json")),
        "`marinctl explain step 500 --json` (new process)": ("this", ("explain", "step", "500", "--json")),
        f"  the same, tree {short}": ("base", ("explain", "step", "500", "--json")),
        f"`marinctl explain step {late} --json` (new process)": ("this", ("explain", "step", str(late), "--json")),
        f"  the same, tree {short} ": ("base", ("explain", "step", str(late), "--json")),
        "the same (step 500), on a store never detected": ("this", ("explain", "step", "500", "--json")),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    proc = None
    try:
        for i in range(args.repeat + 1):   # interleaved, so load on a shared machine hits all alike; the first is warm-up
            for name, (tree, argv) in runs.items():
                dt, ct, done = process(*argv, db=fresh if "never detected" in name else work, tree=tree)
                if i:
                    times[name].append(dt)
                    cpu[name].append(ct)
                if "explain" in name and done.returncode != 0:
                    proc = done
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, capture_output=True)
        shutil.rmtree(base_tree.parent, ignore_errors=True)
    med = {name: float(np.median(t)) for name, t in times.items()}
    base = med["baseline: `marinctl runs --json` (new process)"]
    names = list(runs)
    for k, name in enumerate(names):
        note = f"median of {args.repeat}; CPU {float(np.median(cpu[name])):.3f} s"
        if "explain" in name or "never detected" in name:
            note += f"; {med[name] / base:.2f}× `runs`, +{med[name] - base:.3f} s"
        if runs[name][0] == "base":
            mine = names[k - 1]
            pairs = [a / b for a, b in zip(times[mine], times[name])]
            cpairs = [a / b for a, b in zip(cpu[mine], cpu[name])]
            note += f"; this tree / {short}: wall {float(np.median(pairs)):.2f}, CPU {float(np.median(cpairs)):.2f}"
        figures.append((name, med[name], 0.5, note))
    fresh.unlink(missing_ok=True)

    print(f"\nSYNTHETIC hero-scale store: {args.steps:,} steps, {rows:,} values; load average {os.getloadavg()[0]:.1f}\n")
    print(f"{'measure':<52} {'seconds':>8} {'target':>7} {'ratio':>6}  note")
    for name, sec, target, note in figures:
        print(f"{name:<52} {sec:8.3f} {target:7.1f} {sec / target:6.2f}  {note}")
    if proc is not None:
        print(proc.stderr)
    work.unlink(missing_ok=True)


if __name__ == "__main__":
    main()
