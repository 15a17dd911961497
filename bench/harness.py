"""Shared plumbing for the sync/store benchmarks: a fake W&B server in its OWN process,
process-tree RSS sampling, the SDK baseline and medians.

Why a separate server process: the fake holds the SYNTHETIC run in memory (~1 GB at 400k
steps) and burns CPU building JSON; run in-process it would be counted as marinctl's
RSS. Here the server lives in a child of the benchmark, and the measured client is another
child whose process tree alone is sampled.

SYNTHETIC data only (tests/fakes/synth.py): never Marin's numbers.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "marin-community/marin_moe"
RUN_ID = "hero-synthetic-bench"

_SERVE = r"""
import sys, json, time
sys.path.insert(0, {root!r})
from tests.fakes.synth import marin_run
from tests.fakes.wandb_server import WandbServer
steps, tail = {steps}, {tail}
run = marin_run({run_id!r}, steps=steps, layers=27, extra_scalar_keys=120, state="running")
# a few non-finite values, in the exported range and in the live tail, so reads are checked on them
bad = [steps // 3, steps // 3 + 1, steps - 100]
run.set_values("train/loss", bad, [float("nan"), float("inf"), float("nan")])
run.set_values("params/norm/stacked_blocks.3.mlp.router_bias", [(steps // 3) // 10 * 10], [float("-inf")])
with WandbServer([run], verbose=False, exported_until={{run.run_id: steps - tail}}) as server:
    urls = server.export_urls(run, server.exported_until_of(run))  # written once, before any client
    files = [str(server.file_path(u.split('/files/', 1)[1])) for u in urls]
    print(json.dumps({{"url": server.url, "run": run.run_id, "files": files}}), flush=True)
    for line in sys.stdin:   # serve until the benchmark closes our stdin; it may ask for new steps
        cmd = json.loads(line)
        if "extend" in cmd:
            run.extend(cmd["extend"])
            # warm: the fake recomputes summaries/historyKeys of the whole run after a change,
            # a cost W&B's real servers do not put on the client
            server.history.keys_info(run)
            server.history.json_rows(run, steps - 1, cmd["extend"] + 1)
            print("extended", flush=True)
"""


class FakeServer:
    """`with FakeServer(steps) as fs:` — fs.url, fs.run_id, fs.files (the export parts on disk)."""

    def __init__(self, steps: int, tail: int = 5_000):
        self.steps, self.tail = steps, tail
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "FakeServer":
        code = _SERVE.format(root=str(ROOT), steps=self.steps, tail=self.tail, run_id=RUN_ID)
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=ROOT)
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit("the fake W&B server did not start")
        info = json.loads(line)
        self.url, self.run_id, self.files = info["url"], info["run"], [Path(f) for f in info["files"]]
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            close_server(self.proc)

    @property
    def target(self) -> str:
        return f"{PROJECT}/{self.run_id}"


# --- process-tree RSS -----------------------------------------------------------------------

def close_server(proc: subprocess.Popen) -> None:
    """End a fake server started in its own process: its stdin closing is its signal to stop."""
    proc.stdin.close()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_mib(pid: int) -> float:
    """RSS of `pid` and all its descendants, MiB (shared pages counted per process: an upper bound)."""
    total, stack, seen = 0, [pid], set()
    while stack:
        p = stack.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss_kib(p)
        stack += _children(p)
    return total / 1024


def run_measured(cmd: list[str], env: dict | None = None, interval: float = 0.02,
                 timeout: float = 1800, cwd: Path = ROOT) -> dict:
    """Run `cmd` (in `cwd`), sampling its process tree's RSS; returns wall, peak RSS, the samples and output."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            samples.append((time.perf_counter() - t0, tree_rss_mib(proc.pid)))
            stop.wait(interval)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop.set()
        th.join()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])}... failed (rc {proc.returncode}):\n{err[-3000:]}")
    return {"wall": wall, "peak_mib": max((r for _, r in samples), default=0.0), "samples": samples,
            "stdout": out, "stderr": err}


# --- SDK baseline -----------------------------------------------------------------------------

_SDK = r"""
import time, wandb, json
api = wandb.Api(api_key="x" * 40, overrides={{"base_url": {url!r}}})
run = api.run({path!r})
t = time.perf_counter(); rows = vals = 0
for row in run.scan_history():
    rows += 1; vals += sum(1 for k, v in row.items() if k != "_step" and isinstance(v, (int, float)))
    if time.perf_counter() - t > {seconds}: break
print(json.dumps([rows, vals, time.perf_counter() - t]))
wandb.teardown()
"""


def sdk_rate(url: str, run_id: str, seconds: float, cache_dir: str) -> dict:
    """Rows/s the wandb SDK's `scan_history()` reaches within `seconds` (subprocess, 3 tries)."""
    code = _SDK.format(url=url, path=f"{PROJECT}/{run_id}", seconds=seconds)
    env = {**os.environ, "WANDB_CACHE_DIR": cache_dir, "WANDB_SILENT": "true"}
    for attempt in range(3):  # wandb-core sometimes answers "busy" while it starts on a loaded machine
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                             timeout=seconds + 300)
        if out.returncode == 0:
            rows, vals, dt = json.loads(out.stdout.strip().splitlines()[-1])
            return {"rows": rows, "values": vals, "seconds": dt, "rows_s": rows / dt}
        print(f"  SDK attempt {attempt + 1} failed: {out.stderr[-300:]}", file=sys.stderr)
    raise SystemExit("the SDK never answered")


def median_of(fn, repeat: int) -> tuple[float, list[float]]:
    xs = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        xs.append(time.perf_counter() - t)
    return statistics.median(xs), xs


def python() -> str:
    """The interpreter of this venv (benchmarks run their children under it)."""
    return sys.executable


def previous_tree(base: str, dest: Path) -> Path:
    """The previous release's `marinctl/` package (git archive of BASE), for the side-by-side runs."""
    root = ROOT
    if base == "auto":
        base = subprocess.run(["git", "merge-base", "HEAD", "main"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "archive", base, "marinctl"], cwd=root, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest
