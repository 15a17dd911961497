"""Benchmark: false-positive rates on healthy SYNTHETIC runs, and where each runbook detector begins.

The CI test (tests/test_explain_runbook.py) syncs 12 healthy runs and three spike-size runs
through the CLI; this is the larger sweep, in-process (tests/fakes/load.py, then the sync
pipeline's detection pass, derive.detect, then `anomalies`' incidents): SYNTHETIC data only
(tests/fakes/runbook.py).

- healthy: seeds × loss-noise levels (0.5/1/2/3 × synth's 1%) × logging every step or every
  10 × three schedules (2% warm-up; 10% warm-up, two data-mixture switches and a 30% decay;
  5% warm-up and a 20% decay), 2,500 steps each: the share of runs with any incident, with a
  medium one, with a high one, and incidents per 10k steps, by severity;
- where detection begins, each on seeds × noise levels: a loss spike's size (no grad
  precursor), a throughput window's depth (500 steps), an Adam gate's extra growth per 1,000
  steps, a fork child's loss offset (its own batches), a replaying child's absolute offset —
  at the alert's bar, and below it (a throughput dip, a resume offset: lower-severity findings).

    .venv/bin/python bench/bench_fp_sweep.py [--seeds 4]
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes import runbook as R  # noqa: E402
from tests.fakes.load import load_into_store  # noqa: E402

from marinctl.analysis.explain.explain import anomalies  # noqa: E402
from marinctl.store import Store  # noqa: E402
from marinctl.store.lineage import resolve_target  # noqa: E402
from marinctl.sync import derive  # noqa: E402

NOISES = (0.5, 1.0, 2.0, 3.0)
SHAPES = {"warm-up 2%": dict(warmup=0.02), "warm-up 10%, 2 switches, decay 30%": dict(warmup=0.1, switches=(900, 1700), decay=0.3),
          "warm-up 5%, decay 20%": dict(warmup=0.05, decay=0.2)}


def incidents_of(store: Store, runs) -> dict[str, list[dict]]:
    """Each run's incidents (`anomalies`' rows) after one detection pass over it."""
    pks = load_into_store(store, runs)
    with store.transaction() as con:
        for pk in pks.values():
            derive.detect(con, pk, full=True)
    with store.connect() as con:
        return {r.run_id: anomalies(con, resolve_target(con, r.run_id)) for r in runs}


def healthy(store: Store, seeds: int) -> None:
    runs, meta = [], {}
    for seed, noise, every, (label, shape) in itertools.product(range(seeds), NOISES, (1, 10), SHAPES.items()):
        rid = f"synthetic-fp-n{noise:g}-e{every}-{len(runs)}"
        runs.append(R.healthy(rid, seed=1000 + seed, noise=noise, every=every, **shape))
        meta[rid] = (noise, every, label)
    found = incidents_of(store, runs)
    steps = sum(int(r.steps()[-1]) + 1 for r in runs)
    print(f"\nhealthy SYNTHETIC runs: {len(runs)} ({seeds} seeds × {len(NOISES)} noise levels × every 1 / 10 steps ×"
          f" {len(SHAPES)} schedules), {steps:,} steps")
    by = Counter(row["severity"] for rows in found.values() for row in rows)
    any_ = sum(1 for rows in found.values() if rows)
    med = sum(1 for rows in found.values() if any(r["severity"] in ("medium", "high") for r in rows))
    high = sum(1 for rows in found.values() if any(r["severity"] == "high" for r in rows))
    print(f"  runs with any incident {any_}/{len(runs)} ({any_ / len(runs):.1%}); with a medium or high one {med}"
          f" ({med / len(runs):.1%}); with a high one {high} ({high / len(runs):.1%})")
    print("  incidents per 10k steps: " + ", ".join(f"{k} {by[k] / steps * 1e4:.3f}" for k in ("high", "medium", "low")))
    for noise in NOISES:
        rows = [row for rid, rs in found.items() if meta[rid][0] == noise for row in rs]
        kinds = Counter(f"{r['kind']}/{r['severity']}" for r in rows)
        print(f"  noise {noise:g}%: {len(rows)} incidents" + (f" ({dict(kinds)})" if kinds else ""))


def begins(store: Store, seeds: int) -> None:
    print("\nwhere detection begins (share of runs where the injected incident is found)")
    sizes = R.SPIKES
    for noise in NOISES:
        runs = [R.spike_ladder(f"synthetic-fp-spikes-n{noise:g}-{s}", noise=noise, seed=2000 + s) for s in range(seeds)]
        found = incidents_of(store, runs)
        hits = Counter()
        for rows in found.values():
            for r in rows:
                k, off = divmod(r["start"] - R.SPIKE_FIRST, R.SPIKE_EVERY)
                if r["metric"] == "train/loss" and off == 0 and 0 <= k < len(sizes):
                    hits[sizes[k]] += 1
        print(f"  loss spike ×size, noise {noise:g}%: " + "  ".join(f"×{f:g} {hits[f] / seeds:.0%}" for f in sizes))
    # (values, make, the kind at the alert's bar, the kind explain reports below it)
    cases = {
        "throughput window, rate ×": ([0.95, 0.92, 0.9, 0.85, 0.82, 0.8, 0.78, 0.75, 0.7], lambda v, s, n: R.throughput_window(
            f"synthetic-fp-tput-{v}-{s}-{n}", ratio=v, seed=s, noise=n), "throughput_collapse", "throughput_dip"),
        "gate drift, extra growth per 1k steps +": ([0.05, 0.1, 0.15, 0.2, 0.3, 0.4], lambda v, s, n: R.gate_drift(
            f"synthetic-fp-gate-{v}-{s}-{n}", per_1k=v, seed=s, noise=n), "adam_drift", None),
        "fork child, loss offset ×1+": ([0.003, 0.005, 0.008, 0.01, 0.012, 0.015, 0.02, 0.03], lambda v, s, n: R.resume_offset(
            f"synthetic-fp-resume-{v}-{s}-{n}", rel=v, seed=20 + s, noise=n), "resume_mismatch", "resume_offset"),
        "replaying child, loss offset +": ([0.0005, 0.001, 0.0015, 0.002, 0.0025, 0.003, 0.005], lambda v, s, n: R.resume_replay(
            f"synthetic-fp-replay-{v}-{s}-{n}", offset=v, seed=3000 + s, noise=n), "resume_mismatch", "resume_offset"),
    }
    print("  (each value: share found at the alert's bar / below it, as a lower-severity finding)")
    for label, (values, make, kind, minor) in cases.items():
        for noise in (1.0, 2.0):
            rate = []
            for v in values:
                incs = [make(v, s, noise) for s in range(seeds)]
                found = incidents_of(store, [r for inc in incs for r in inc.runs])
                at = sum(any(r["kind"] == kind for r in found[inc.run_id]) for inc in incs) / seeds
                below = sum(any(r["kind"] == minor for r in found[inc.run_id]) for inc in incs) / seeds
                rate.append(f"{at:.0%}" + (f"/{below:.0%}" if minor else ""))
            print(f"  {label}, noise {noise:g}%: " + "  ".join(f"{v:g} {r}" for v, r in zip(values, rate)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=4)
    args = ap.parse_args()
    t = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="marinctl-fp-") as tmp:
        store = Store(Path(tmp) / "fp.duckdb")
        healthy(store, args.seeds)
        begins(store, args.seeds)
    print(f"\n{time.perf_counter() - t:.0f} s")


if __name__ == "__main__":
    main()
