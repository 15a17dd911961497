"""Benchmark: shell completion on hero-scale SYNTHETIC stores (target: a TAB answers within 100 ms).

Two stores, SYNTHETIC (tests/fakes/synth.py), built once and cached (default /tmp/marinctl-bench/);
the timings read copies:
- `synced`: what `sync marin` leaves — a hero fork lineage at hero scale (forks at 200k and 300k,
  ~430k steps, 27 layers: 745 keys) and four ladder runs, each run's history kept as parquet
  parts (50k steps a file) but its last 5,000 steps, which are long rows (tests/fakes/load.py);
- `long`: bench_explain.py's store — one 400k-step run, 81.6M values, every value a long row
  (how local runs are stored): the worst case for a run's key list.

Measured, interleaved `--repeat` times (medians; each command once first, for the page cache):
- new processes, as the shell runs them (the installed entry point, typer's bash protocol):
  completing RUN (`show <TAB>`), KEY (`plot <TAB>`: every key; `plot train/<TAB>`) and
  `export hero --keys train/loss,<TAB>`, beside the baseline — the same protocol completing a
  command name (`marinctl sh<TAB>`: the CLI's own start, no store) — and `python -c pass`. What a
  TAB costs beyond the CLI's start is the difference to the baseline; wall time and the
  children's CPU time (this machine is shared: CPU time is the steadier figure).
- in-process, imports done: the completion functions alone (open read-only, read, close).

    .venv/bin/python bench/bench_complete.py [--layout synced|long|both] [--cache DIR] [--repeat 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ENTRY = Path(sys.executable).with_name("marinctl")


def line_env(line: str, home: Path) -> dict[str, str]:
    words = line.split()
    cword = len(words) if line.endswith(" ") else len(words) - 1
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(MARINCTL_HOME=str(home), _MARINCTL_COMPLETE="complete_bash", COMP_WORDS=line, COMP_CWORD=str(cword))
    return env


def build_synced(path: Path) -> None:
    from tests.fakes.load import load_as_parts
    from tests.fakes.synth import hero_lineage, ladder_runs

    from marinctl.store import Store

    t = time.perf_counter()
    runs = hero_lineage(100_000, layers=27, experts=8, extra_scalar_keys=120) + ladder_runs(2000, layers=4)
    work = path.parent / "hero-synced-export"
    work.mkdir(exist_ok=True)
    tmp = path.with_suffix(".building")
    load_as_parts(Store(tmp), runs, work, tail=5000, per_file=50_000)
    tmp.rename(path)
    print(f"built {path} in {time.perf_counter() - t:.0f} s")


def store_for(layout: str, cache: Path) -> Path:
    if layout == "long":
        src = cache / "hero-explain-400000.duckdb"
        if not src.exists():
            import bench_explain

            bench_explain.build(src, 400_000)
        return src
    src = cache / "hero-synced.duckdb"
    if not src.exists():
        build_synced(src)
    return src


def child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def bench(layout: str, cache: Path, repeat: int) -> None:
    src = store_for(layout, cache)
    home = cache / f"complete-home-{layout}"
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir()
    shutil.copy(src, home / "marinctl.duckdb")
    if src.with_suffix(".history").exists():         # the parts, where the store's copy looks for them
        shutil.copytree(src.with_suffix(".history"), home / "marinctl.history")

    from marinctl.store import Store

    with Store(home / "marinctl.duckdb").connect() as con:
        rows = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
        nkeys = con.execute("SELECT count(*) FROM metric_keys").fetchall()[0][0]
        nparts = con.execute("SELECT count(*) FROM history_parts").fetchall()[0][0]
        nruns = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
    print(f"\n== {layout}: {nruns} runs, {nparts} parquet parts, {rows:,} long rows, {nkeys} keys (SYNTHETIC, {src.name})")

    cases = {
        "baseline: `marinctl sh<TAB>` (command names, no store)": "marinctl sh",
        "`marinctl show <TAB>` (run ids + aliases)": "marinctl show ",
        "`marinctl plot <TAB>` (every key of the hero)": "marinctl plot ",
        "`marinctl plot train/<TAB>`": "marinctl plot train/",
        "`marinctl export hero --keys train/loss,<TAB>`": "marinctl export hero --keys train/loss,",
    }
    names = ["interpreter only: `python -c pass`", *cases]
    wall: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    answers: dict[str, int] = {}
    for i in range(repeat + 1):                      # interleaved; the first round is warm-up
        for name in names:
            line = cases.get(name)
            cmd, env = ([str(ENTRY)], line_env(line, home)) if line else ([sys.executable, "-c", "pass"], None)
            c0, t = child_cpu(), time.perf_counter()
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
            dt, dc = time.perf_counter() - t, child_cpu() - c0
            assert done.returncode == 0, done.stderr
            answers[name] = len([x for x in done.stdout.splitlines() if x]) if line else ""
            if i:
                wall[name].append(dt)
                cpu[name].append(dc)

    from marinctl.cli import complete

    def ctx(run=None):
        return SimpleNamespace(find_root=lambda: SimpleNamespace(params={"home": str(home), "db": None}),
                               params={"run": run})

    calls = {
        "runs(ctx, '')": lambda: complete.runs(ctx(), ""),
        "keys(ctx, '') — every key of the hero": lambda: complete.keys(ctx(), ""),
        "keys(ctx, 'train/')": lambda: complete.keys(ctx(), "train/"),
        "key_list(ctx, 'train/loss,') for RUN hero": lambda: complete.key_list(ctx("hero"), "train/loss,"),
    }
    inproc: dict[str, list[float]] = {name: [] for name in calls}
    inproc_cpu: dict[str, list[float]] = {name: [] for name in calls}
    for fn in calls.values():
        fn()
    for _ in range(repeat):
        for name, fn in calls.items():
            c0, t = time.process_time(), time.perf_counter()
            fn()
            inproc[name].append(time.perf_counter() - t)
            inproc_cpu[name].append(time.process_time() - c0)

    med = statistics.median
    base_w, base_c = med(wall[names[1]]), med(cpu[names[1]])
    print(f"new processes, median of {repeat} (load average {os.getloadavg()[0]:.1f}):")
    print(f"  {'':56} {'wall':>7} {'+ over base':>11} {'CPU':>7} {'+ over base':>11} {'answers':>8}")
    for name in names:
        w, c = med(wall[name]), med(cpu[name])
        extra = name in cases and not name.startswith("baseline")
        print(f"  {name:56} {w * 1000:5.0f}ms {f'{(w - base_w) * 1000:+.0f}ms' if extra else '':>11}"
              f" {c * 1000:5.0f}ms {f'{(c - base_c) * 1000:+.0f}ms' if extra else '':>11} {answers[name]:>8}")
    print(f"in-process, imports done, median of {repeat}:        wall      CPU")
    for name in calls:
        print(f"  {name:48} {med(inproc[name]) * 1000:6.1f}ms {med(inproc_cpu[name]) * 1000:6.1f}ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layout", choices=["synced", "long", "both"], default="both")
    ap.add_argument("--cache", default="/tmp/marinctl-bench")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    if not ENTRY.exists():
        raise SystemExit(f"no {ENTRY}: install marinctl into this venv (pip install -e .)")
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    for layout in (["synced", "long"] if args.layout == "both" else [args.layout]):
        bench(layout, cache, args.repeat)
    print("\ntarget: what a TAB adds to the CLI's start ≤ 100 ms")


if __name__ == "__main__":
    main()
