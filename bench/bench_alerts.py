"""Alert latency: from a step appearing on W&B to its webhook POST, `sync --follow --interval 2`.

SYNTHETIC data: a small Marin-shaped run on the loopback W&B fake (tests/fakes/growing.py) that
logs a few steps every second, as a live run does, with an optimizer co-spike (grad norm ×15,
loss ×2.5 one step later: tests/fakes/incidents.py) every --gap seconds. The real CLI follows
it in its own process group with `--notify webhook=URL` to a loopback receiver.

Per incident, three clocks:
- available: the loss-spike step was added to the fake's run (a follower could first see it);
- served:    the fake first answered a HistoryPage window holding that step;
- POST:      the receiver got the alert about it.
Side by side, the baseline is a follow without alerts: from `available` to the stderr line
saying the step was synced — what following cost before alerts. Run it from a checkout of the
code before them (`--baseline-root DIR`, e.g. `git archive main | tar -x -C DIR`); by default
this checkout without --notify (which still runs the alert pass). The ratio says what alerts
add on top of the poll. Target: served → POST ≤ 5 s at --interval 2.

    nice -n 10 python bench/bench_alerts.py [--incidents 5] [--gap 6] [--interval 2] [--baseline-root DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.blackbox import interrupt  # noqa: E402
from tests.fakes.growing import Feed, growing_run  # noqa: E402
from tests.fakes.wandb_server import WandbServer  # noqa: E402
from tests.fakes.webhook_receiver import WebhookReceiver  # noqa: E402


class Served:
    """When the fake first answered a HistoryPage window holding each step (polled every 10 ms)."""

    def __init__(self, server: WandbServer):
        self.server, self.at, self._seen = server, {}, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            reqs = self.server.requests[self._seen:]
            self._seen += len(reqs)
            now = time.time()
            for op, var in reqs:
                if op == "HistoryPage":
                    for s in range(int(var["minStep"]), int(var["maxStep"])):
                        self.at.setdefault(s, now)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


def one_mode(args, notify: bool, root: Path = ROOT) -> list[dict]:
    home = Path(tempfile.mkdtemp(prefix="synthetic-bench-alerts-"))
    run = growing_run(f"synthetic-alerts-bench-{'notify' if notify else 'plain'}")
    out: list[dict] = []
    try:
        with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
            feed, served = Feed(server, run), Served(server)
            env = {**os.environ, "MARINCTL_HOME": str(home), "WANDB_BASE_URL": server.url}
            cmd = [sys.executable, "-m", "marinctl", "sync", run.path, "--follow", "--interval", str(args.interval)]
            if notify:
                cmd += ["--notify", f"webhook={hook.url}/bench"]
            proc = subprocess.Popen(cmd, env=env, cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
            lines: list[tuple[float, str]] = []
            threading.Thread(target=lambda: [lines.append((time.time(), raw.decode(errors="replace")))
                                             for raw in proc.stderr], daemon=True).start()
            try:
                _wait(lambda: any(f"last step {feed.last_step:,}" in l for _, l in lines), 60)
                spikes = []
                for i in range(args.incidents):
                    t_end = time.monotonic() + args.gap
                    spikes.append(feed.grow(8, co_spike=True))
                    while time.monotonic() < t_end:          # a live run: a few steps every second
                        time.sleep(1.0)
                        feed.grow(3)
                _wait(lambda: len(hook.posts) >= len(spikes) if notify else
                      any(_synced(l, feed.last_step) for _, l in lines), 30)
            finally:
                interrupt(proc)
                served.stop()
            posts = {p.body["step"]: p.at for p in hook.posts if p.body}
            for s in spikes:
                synced = next((t for t, l in lines if _synced(l, s)), None)
                post = next((t for step, t in posts.items() if abs(step - s) <= 2), None)
                out.append({"step": s, "available": feed.available_at[s], "served": served.at.get(s),
                            "synced": synced, "post": post})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return out


def _synced(line: str, step: int) -> bool:
    m = re.search(r"last step ([\d,]+)", line)
    return bool(m) and int(m.group(1).replace(",", "")) >= step


def _wait(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.05)


def _fmt(xs: list[float]) -> str:
    xs = [x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"median {statistics.median(xs):.2f} s · max {max(xs):.2f} s · n={len(xs)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--incidents", type=int, default=5)
    ap.add_argument("--gap", type=float, default=6.0, help="seconds between incidents")
    ap.add_argument("--interval", type=float, default=2.0)
    ap.add_argument("--baseline-root", type=Path, default=ROOT, help="checkout the baseline follow runs from")
    args = ap.parse_args()
    plain = one_mode(args, notify=False, root=args.baseline_root.resolve())
    alerts = one_mode(args, notify=True)
    base = [r["synced"] - r["available"] for r in plain if r["synced"]]
    avail = [r["post"] - r["available"] for r in alerts if r["post"]]
    served = [r["post"] - r["served"] for r in alerts if r["post"] and r["served"]]
    missed = sum(1 for r in alerts if not r["post"])
    print(f"SYNTHETIC run, sync --follow --interval {args.interval:g}, {args.incidents} optimizer co-spikes")
    where = "this checkout, no --notify" if args.baseline_root.resolve() == ROOT else f"{args.baseline_root}"
    print(f"  baseline ({where}) available → synced line : {_fmt(base)}")
    print(f"  alerts (--notify)       available → webhook POST: {_fmt(avail)}")
    print(f"  alerts (--notify)       served    → webhook POST: {_fmt(served)}   (target ≤ 5 s)")
    if base and avail:
        print(f"  ratio alerts/baseline (medians, from available): {statistics.median(avail) / statistics.median(base):.2f}")
    if missed:
        print(f"  {missed} incident(s) got no POST")


if __name__ == "__main__":
    main()
