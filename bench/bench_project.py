"""A whole W&B project: `marinctl sync ENTITY/PROJECT` beside the SDK loop users write.

SYNTHETIC project (tests/fakes/synth.py): `--runs` short runs (`--steps` steps each, one layer,
47 keys, ~3.7k values a run), served by the W&B fake in its OWN process with `--latency` seconds
added to every request (a realistic round trip; the fake answers requests side by side). Each
measured client runs in its own process, its process tree's RSS sampled every 20 ms:

1. `marinctl sync E/P --json` into an empty home (the whole command: listing, history, writes);
2. the same command again, the project unchanged: wall time and requests (server stats);
3. the SDK loop: `for run in wandb.Api().runs(path): for row in run.scan_history(): ...`.

Runs are interleaved and reported as medians with the ratio SDK / marinctl (the machine is shared:
compare the ratios, not the seconds between runs). The client's CPU time (user + system, from the
kernel's accounting of the finished child) is reported per run. `--before DIR` also runs steps 1 and 2
with the marinctl checked out in DIR (e.g. `git archive <commit> | tar -x -C /tmp/before`), side by side.

    nice -n 10 python bench/bench_project.py [--runs 240] [--steps 200] [--latency 0.05] [--repeat 3]
    nice -n 10 python bench/bench_project.py --latency 0 --no-sdk --before /tmp/before   # local CPU per run
"""

from __future__ import annotations

import argparse
import json
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
sys.path.insert(0, str(ROOT))

from bench.harness import close_server, run_measured  # noqa: E402

ENTITY, PROJECT = "synthetic-lab", "sweep-synthetic"

_SERVE = r"""
import sys, json
sys.path.insert(0, {root!r})
from tests.fakes.synth import marin_run
from tests.fakes.wandb_server import WandbServer
runs = [marin_run(f"short-{{i:04d}}-synthetic", steps={steps}, layers=1, experts=2, norm_every=50, eval_every=50,
                  entity={entity!r}, project={project!r}, group="sweep-synthetic", seed=i) for i in range({runs})]
with WandbServer(runs, verbose=False, latency={latency}) as server:
    for r in runs:   # warm the fake's caches and parquet exports: its own costs are not the client's
        server.history.json_rows(r, 0, {steps})
        server.export_urls(r, server.exported_until_of(r))
    print(json.dumps({{"url": server.url}}), flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "stats":
            print(json.dumps({{"stats": dict(server.stats), "in_flight_max": server.in_flight_max}}), flush=True)
        elif cmd == "reset":
            server.stats.clear(); server.in_flight_max = 0
            print("{{}}", flush=True)
"""

_SDK = r"""
import json, time, wandb
api = wandb.Api(api_key="x" * 40, overrides={{"base_url": {url!r}}})
t = time.perf_counter(); runs = rows = 0
for run in api.runs({path!r}):
    runs += 1
    for row in run.scan_history():
        rows += 1
print(json.dumps([runs, rows, time.perf_counter() - t]))
wandb.teardown()
"""


class Server:
    def __init__(self, runs: int, steps: int, latency: float):
        code = _SERVE.format(root=str(ROOT), runs=runs, steps=steps, latency=latency, entity=ENTITY, project=PROJECT)
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT)
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the fake W&B server did not start")
        self.url = json.loads(line)["url"]

    def ask(self, cmd: str) -> dict:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def cpu(self) -> float:
        """CPU seconds the fake server has used so far (user + system, from /proc)."""
        with open(f"/proc/{self.proc.pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def close(self) -> None:
        close_server(self.proc)


def compiled(checkout: Path) -> None:
    """Byte-compile a checkout's marinctl first, as an install does: with PYTHONDONTWRITEBYTECODE set
    (as on this machine) every run would otherwise compile every module it imports again."""
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(checkout / "marinctl")], check=True,
                   stdout=subprocess.DEVNULL)


def marinctl(server: Server, home: Path, checkout: Path = ROOT) -> dict:
    env = {**os.environ, "MARINCTL_HOME": str(home), "WANDB_BASE_URL": server.url}
    if checkout != ROOT:
        env["PYTHONPATH"] = str(checkout)
    server.ask("reset")
    served = server.cpu()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    res = run_measured([sys.executable, "-m", "marinctl", "sync", f"{ENTITY}/{PROJECT}", "--json"], env=env,
                       cwd=checkout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    served = server.cpu() - served
    stats = server.ask("stats")
    report = json.loads(res["stdout"])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": res["wall"], "cpu": cpu, "server_cpu": served, "peak_mib": res["peak_mib"], "requests": sum(stats["stats"].values()),
            "ops": stats["stats"], "in_flight_max": stats["in_flight_max"], "runs": len(report["runs"]),
            "rows": sum(r["rows_added"] for r in report["runs"])}


def sdk(server: Server, work: Path) -> dict:
    cache = work / "wandb-cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "WANDB_CACHE_DIR": str(cache), "WANDB_SILENT": "true", "WANDB_CONFIG_DIR": str(work / "cfg")}
    for attempt in range(3):   # wandb-core now and then hangs at start-up on a loaded machine: try again
        server.ask("reset")
        t0 = time.perf_counter()
        try:
            out = subprocess.run([sys.executable, "-c", _SDK.format(url=server.url, path=f"{ENTITY}/{PROJECT}")],
                                 capture_output=True, text=True, env=env, timeout=600, start_new_session=True)
        except subprocess.TimeoutExpired:
            print(f"  SDK attempt {attempt + 1} hung; trying again", file=sys.stderr)
            continue
        wall = time.perf_counter() - t0
        if out.returncode == 0:
            break
        print(f"  SDK attempt {attempt + 1} failed: {out.stderr[-300:]}", file=sys.stderr)
    else:
        raise SystemExit("the SDK loop never finished")
    runs, rows, inner = json.loads(out.stdout.strip().splitlines()[-1])
    stats = server.ask("stats")
    return {"wall": wall, "loop_s": inner, "runs": runs, "rows": rows, "requests": sum(stats["stats"].values())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=240)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-sdk", action="store_true", help="skip the SDK loop (marinctl's figures only)")
    ap.add_argument("--before", type=Path, help="a checkout of the code to compare with (run side by side)")
    args = ap.parse_args()

    for checkout in (ROOT, args.before):
        if checkout is not None:
            compiled(checkout)
    server = Server(args.runs, args.steps, args.latency)
    work = Path(tempfile.mkdtemp(prefix="bench-project-"))
    first, again, base, old_first, old_again = [], [], [], [], []
    try:
        for i in range(args.repeat):
            if args.before:
                old_home = work / f"before-{i}"
                old_first.append(marinctl(server, old_home, args.before))
                old_again.append(marinctl(server, old_home, args.before))
                shutil.rmtree(old_home, ignore_errors=True)
            home = work / f"home-{i}"
            first.append(marinctl(server, home))
            again.append(marinctl(server, home))
            if not args.no_sdk:
                base.append(sdk(server, work))
            print(f"round {i + 1}: sync {first[-1]['wall']:.2f} s ({first[-1]['requests']} requests, "
                  f"{first[-1]['peak_mib']:.0f} MiB), re-sync {again[-1]['wall']:.2f} s ({again[-1]['requests']} requests)"
                  + (f", SDK loop {base[-1]['wall']:.1f} s ({base[-1]['requests']} requests)" if base else ""),
                  file=sys.stderr)
            shutil.rmtree(home, ignore_errors=True)
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)

    med = lambda xs, k: statistics.median(x[k] for x in xs)  # noqa: E731
    pages = -(-args.runs // 100)
    print(f"SYNTHETIC project: {args.runs} runs x {args.steps} steps ({first[0]['rows']:,} values), "
          f"{args.latency * 1000:.0f} ms added to every request; medians of {args.repeat}; "
          f"load average {os.getloadavg()[0]:.1f} at the end")
    def line(label: str, xs: list[dict]) -> str:
        return (f"  {label:33s}{med(xs, 'wall'):7.2f} s   {int(med(xs, 'requests'))} requests, CPU "
                f"{med(xs, 'cpu'):.2f} s ({1000 * med(xs, 'cpu') / args.runs:.1f} ms/run; the fake server's "
                f"{med(xs, 'server_cpu'):.2f} s), "
                f"peak RSS {max(x['peak_mib'] for x in xs):.0f} MiB")

    print(line("marinctl sync E/P (empty home)", first) + f"; at most {int(med(first, 'in_flight_max'))} requests at once")
    print(line("marinctl sync E/P (unchanged)", again) + f"; listing pages {pages}, bound pages + 2 = {pages + 2}")
    if old_first:
        print(line("before: sync E/P (empty home)", old_first))
        print(line("before: sync E/P (unchanged)", old_again))
        print(f"  ratio before / now: empty {med(old_first, 'wall') / med(first, 'wall'):.1f}x wall, "
              f"{med(old_first, 'cpu') / med(first, 'cpu'):.1f}x CPU; unchanged "
              f"{med(old_again, 'wall') / med(again, 'wall'):.1f}x wall")
    if base:
        print(f"  SDK loop (api.runs + scan_history) {med(base, 'wall'):5.1f} s   {int(med(base, 'requests'))} requests "
              f"({base[0]['rows']:,} rows)")
        print(f"  ratio SDK loop / marinctl sync:  {med(base, 'wall') / med(first, 'wall'):.1f}x")


if __name__ == "__main__":
    main()
