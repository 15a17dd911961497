"""Benchmark: `explain --range A:B` against explaining every step of the span one at a time.

Store: bench_explain.py's SYNTHETIC hero-scale run (tests/fakes/synth.py: 27 layers, ~150 scalar
keys a step, ~600 norm keys every 10 steps; a QB router-bias jump at step 500 and a loss spike at
5/8 of the run), built once and cached, then scored by one full detection pass (as `sync` leaves it).

Side by side, in one process, interleaved `--repeat` times, medians reported:
- the sweep: `sweep(A, A + span − 1)`, every step, answered from one reading of the span;
- the naive sweep it replaces: `explain step N` for `--sample` steps spread over the span, its
  median time per step × the span's steps (what a script looping `explain step N` would pay);
- and each sampled step's first finding from both, which must agree (the same answer, read once).
Also `marinctl explain --range A:B --json` as a new process, beside `marinctl runs --json` (the
interpreter, CLI import and store open: the floor any command pays).

    .venv/bin/python bench/bench_explain_range.py [--steps 100000] [--span 3000] [--sample 15] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.bench_explain import RUN_ID, spike_step, working_copy  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--span", type=int, default=3000)
    ap.add_argument("--sample", type=int, default=15)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cache", default="/tmp/marinctl-bench")
    args = ap.parse_args()
    work = working_copy(Path(args.cache), args.steps, "range-work.duckdb")

    from marinctl.analysis.explain.explain import explain, sweep
    from marinctl.store import Store
    from marinctl.store.lineage import resolve_target
    from marinctl.sync.derive import detect

    store = Store(work)
    with store.transaction() as con:
        pk = con.execute("SELECT run_pk FROM runs WHERE run_id = ?", [RUN_ID]).fetchall()[0][0]
        detect(con, pk, full=True)
    spans = {"around the spike (detection settled: stored findings read)": spike_step(args.steps) - args.span // 2,
             "the last steps (the live edge: detectors re-run there)": args.steps - args.span}
    results = {}
    with store.connect() as con:
        target = resolve_target(con, None)
        for label, lo in spans.items():
            hi = lo + args.span - 1
            picks = [int(s) for s in np.linspace(lo, hi, args.sample).round()]
            t_sweep, t_step, agree = [], [], []
            for _ in range(args.repeat):
                t = time.perf_counter()
                rows = {r["step"]: r for r in sweep(con, target, lo, hi)}
                t_sweep.append(time.perf_counter() - t)
                per = []
                for n in picks:
                    t = time.perf_counter()
                    doc = explain(con, target, n)
                    per.append(time.perf_counter() - t)
                    top = doc["findings"][0] if doc["findings"] else {}
                    agree.append((top.get("cause_class"), top.get("kind")) == (rows[n]["cause_class"], rows[n]["kind"]))
                t_step.append(float(np.median(per)))
            found = sorted({(r["cause_class"], r["kind"]) for r in rows.values() if r["cause_class"]})
            results[label] = (lo, hi, float(np.median(t_sweep)), float(np.median(t_step)), agree, found)
    lo, hi = results[next(iter(spans))][:2]

    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def process(*argv: str) -> float:
        t = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "marinctl", "--db", str(work), *argv], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr
        return time.perf_counter() - t

    proc_range, proc_runs = [], []
    for i in range(args.repeat + 1):      # interleaved; the first pair warms the page cache
        a, b = process("explain", "--range", f"{lo}:{hi}", "--json"), process("runs", "--json")
        if i:
            proc_range.append(a)
            proc_runs.append(b)
    work.unlink(missing_ok=True)

    print(f"SYNTHETIC hero-scale store: {args.steps:,} steps; spans of {args.span:,} steps; "
          f"load average {os.getloadavg()[0]:.1f}; medians of {args.repeat}")
    for label, (lo_, hi_, sweep_s, step_s, agree, found) in results.items():
        naive = step_s * args.span
        print(f"{label}: steps {lo_:,}–{hi_:,}")
        print(f"  explain --range, in-process           {sweep_s:8.3f} s  ({sweep_s / args.span * 1e3:.2f} ms a step)")
        print(f"  explain step N, in-process, per step  {step_s:8.3f} s  (median of {args.sample} steps)")
        print(f"  … × {args.span:,} steps (a loop of them)  {naive:8.1f} s  → the sweep is {naive / sweep_s:,.0f}× faster")
        print(f"  sampled steps whose first finding agrees: {sum(agree)}/{len(agree)}; causes in the span: {found}")
    print(f"`explain --range {lo}:{hi} --json` as a new process {float(np.median(proc_range)):.3f} s, beside "
          f"`runs --json` {float(np.median(proc_runs)):.3f} s")


if __name__ == "__main__":
    main()
