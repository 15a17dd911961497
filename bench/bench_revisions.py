"""Benchmark: the same user commands on this checkout and on an older revision, side by side.

Why: a redesign (the house of rooms) must not make anything slower. This runs the commands a
person runs — `sync` of a local `.wandb` file into a fresh home, then `explain step N --json` and
`runs --json` on what it stored — once with this checkout's code and once with REV's (a
temporary `git worktree`, removed at the end), alternating A B A B so a shared machine's load
hits both alike. Both sides use this interpreter and its installed packages; each side's own
`marinctl` package comes first on PYTHONPATH. Printed per command: median wall and CPU seconds
(the child's own rusage) of each side and the median of the pair-by-pair ratios (this / REV).

Data: a SYNTHETIC run written by the real wandb SDK (bench_wandb_file.py's writer, cached).

    .venv/bin/python bench/bench_revisions.py [--base 581e0e7] [--this REV] [--steps 20000] [--keys 32] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from bench_wandb_file import cached_file  # noqa: E402


def timed(cmd: list[str], tree: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one child process run from `tree` with its package first on the path."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed in {tree} (exit {done.returncode}): {done.stderr.strip()[-400:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", default="581e0e7", help="the older revision (default: the code before the house of rooms)")
    ap.add_argument("--this", default=None, help="a revision to stand for this checkout (default: the working tree)")
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--keys", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "marinctl-bench")
    args = ap.parse_args()

    wandb_file = cached_file(args.cache, args.steps, args.keys)
    scratch = Path(tempfile.mkdtemp(prefix="marinctl-revs-"))
    base_tree = scratch / "base"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(base_tree), args.base],
                   check=True, capture_output=True)
    this_tree = ROOT
    if args.this:
        this_tree = scratch / "this"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(this_tree), args.this],
                       check=True, capture_output=True)
    sides = {"this": this_tree, args.base: base_tree}
    step = str(args.steps // 2)
    py = [sys.executable, "-m", "marinctl"]
    try:
        results: dict[str, dict[str, list[tuple[float, float]]]] = {}
        for r in range(args.repeat + 1):                      # round 0 warms caches and is not counted
            for name, tree in sides.items():
                home = scratch / f"home-{name}"
                shutil.rmtree(home, ignore_errors=True)
                cmds = {"sync FILE (fresh home)": py + ["--home", str(home), "sync", str(wandb_file)],
                        f"explain step {step} --json": py + ["--home", str(home), "explain", "step", step, "--json"],
                        "runs --json": py + ["--home", str(home), "runs", "--json"]}
                for label, cmd in cmds.items():
                    got = timed(cmd, tree)
                    if r:
                        results.setdefault(label, {}).setdefault(name, []).append(got)
        print(f"\nSYNTHETIC {args.steps:,} steps x {args.keys} keys (wandb SDK); {args.this or 'this checkout'} vs {args.base}; "
              f"{args.repeat} alternating rounds; load average {os.getloadavg()[0]:.1f}\n")
        print(f"{'command':34} {'this wall':>10} {'base wall':>10} {'this cpu':>9} {'base cpu':>9} "
              f"{'cpu ratio':>10} {'wall ratio':>10}")
        for label, by in results.items():
            a, b = by["this"], by[args.base]
            cpu_ratio = statistics.median(x[1] / y[1] for x, y in zip(a, b))
            wall_ratio = statistics.median(x[0] / y[0] for x, y in zip(a, b))
            med = lambda xs, i: statistics.median(x[i] for x in xs)  # noqa: E731
            print(f"{label:34} {med(a, 0):10.3f} {med(b, 0):10.3f} {med(a, 1):9.3f} {med(b, 1):9.3f} "
                  f"{cpu_ratio:10.2f} {wall_ratio:10.2f}")
        print("\nratio = this / base, median of pair-by-pair ratios (< 1: this checkout is faster)")
    finally:
        for tree in {base_tree, this_tree} - {ROOT}:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
