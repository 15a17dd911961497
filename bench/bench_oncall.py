"""On-call latency: from the step that triggers an alert being served to the alert's first delivery.

SYNTHETIC data: a hero-shaped run (tests/fakes/hero_feed.py) on the loopback W&B fake that logs a
few steps every second, as a live run does, and then three planted cases in one growth: a NaN loss
(the `marin-hero` preset's emergency), a grad norm of 3 (high) and a token drop fraction of 0.08
(normal). The real CLI follows it in its own process group, `sync RUN --follow --interval 2`, two
ways, side by side (alternating, ROUNDS of each):

- on call: `--preset marin-hero --notify ntfy=URL --notify pushover@emergency=KEY`, to the
  loopback fakes of ntfy and Pushover (tests/fakes/);
- baseline: the built-in alerts only, `--notify webhook=URL` (what following cost before on call):
  the NaN is a built-in alert too.

Per alert: served = the fake first answered a HistoryPage window holding the step (polled every
10 ms, bench_alerts.py's `Served`); first delivery = the first sink that accepted it (ntfy, Pushover
or the webhook receiver's clock). Target: served → first delivery ≤ 5 s, the median of
the follows.

    nice -n 10 python bench/bench_oncall.py [--rounds 5] [--interval 2]
"""

from __future__ import annotations

import argparse
import os
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
sys.path.insert(0, str(ROOT / "bench"))

from bench_alerts import Served  # noqa: E402
from tests.blackbox import interrupt  # noqa: E402
from tests.fakes.hero_feed import HeroFeed, hero_run  # noqa: E402
from tests.fakes.ntfy_server import NtfyServer  # noqa: E402
from tests.fakes.pushover_api import PushoverAPI  # noqa: E402
from tests.fakes.wandb_server import WandbServer  # noqa: E402
from tests.fakes.webhook_receiver import WebhookReceiver  # noqa: E402

APP_TOKEN, USER_KEY = "synthetic-bench-app-token", "usyntheticbenchuserkey01234567"
CASES = {"hero non-finite loss": ("train/loss", float("nan")), "hero grad norm": ("grad/norm/total", 3.0),
         "hero token drops": ("moe/drop_fraction", 0.08)}


def one_follow(args, oncall: bool, n: int) -> dict[str, float]:
    """{case: served → first delivery, in s} for one follow (the baseline: the NaN only)."""
    home = Path(tempfile.mkdtemp(prefix="synthetic-bench-oncall-"))
    run = hero_run(f"hero-synthetic-bench-{'oncall' if oncall else 'plain'}-{n}", seed=60 + n)
    out: dict[str, float] = {}
    try:
        with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook, NtfyServer() as ntfy, \
                PushoverAPI(token=APP_TOKEN) as push:
            feed, served = HeroFeed(server, run), Served(server)
            env = {**os.environ, "MARINCTL_HOME": str(home), "WANDB_BASE_URL": server.url,
                   "PUSHOVER_API_URL": push.url, "PUSHOVER_APP_TOKEN": APP_TOKEN}
            cmd = [sys.executable, "-m", "marinctl", "sync", run.path, "--follow", "--interval", str(args.interval)]
            cmd += (["--preset", "marin-hero", "--notify", f"ntfy={ntfy.url}/bench-topic",
                     "--notify", f"pushover@emergency={USER_KEY}"] if oncall else ["--notify", f"webhook={hook.url}/b"])
            proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, start_new_session=True)
            lines: list[str] = []
            threading.Thread(target=lambda: [lines.append(raw.decode(errors="replace")) for raw in proc.stderr],
                             daemon=True).start()
            try:
                _wait(lambda: any(f"last step {feed.last_step:,}" in ln for ln in lines), 60)
                for _ in range(3):                                  # a live run: a few steps every second
                    feed.grow(3)
                    time.sleep(1.0)
                first = feed.last_step + 1
                at = {case: first + i for i, case in enumerate(CASES)}
                feed.grow(6, plant=lambda r, lo, hi: [r.set_values(k, [at[c]], v) for c, (k, v) in CASES.items()])
                want = len(CASES) if oncall else 1
                t_end = time.monotonic() + 30
                while time.monotonic() < t_end and len(_firsts(hook, ntfy, push)) < want:
                    time.sleep(1.0)
                    feed.grow(3)
            finally:
                interrupt(proc)
                served.stop()
            firsts = _firsts(hook, ntfy, push)
            for case, step in at.items():
                got = firsts.get(case if oncall else ("nan" if case == "hero non-finite loss" else None))
                if got is not None and served.at.get(step) is not None:
                    out[case] = got - served.at[step]
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return out


def _firsts(hook, ntfy, push) -> dict[str, float]:
    """When each alert was first accepted by any sink, by preset rule (or 'nan' for the built-in NaN alert)."""
    seen: dict[str, float] = {}

    def note(title: str, at: float) -> None:
        key = next((c for c in CASES if title.startswith(f"{c}:")), "nan" if "became NaN" in title else None)
        if key is not None:
            seen[key] = min(seen.get(key, at), at)
    for m in ntfy.accepted():
        note(m.title or "", m.at)
    for m in push.accepted():
        note(m.form.get("title", ""), m.at)
    for p in hook.accepted():
        note((p.body or {}).get("title", ""), p.at)
    return seen


def _wait(cond, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not cond():
        time.sleep(0.05)


def _fmt(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.2f} s · max {max(xs):.2f} s · n={len(xs)}" if xs else "—"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--interval", type=float, default=2.0)
    args = ap.parse_args()
    oncall: dict[str, list[float]] = {c: [] for c in CASES}
    plain: list[float] = []
    for n in range(args.rounds):                       # side by side: each round one follow of each
        for case, dt in one_follow(args, True, n).items():
            oncall[case].append(dt)
        plain += list(one_follow(args, False, n).values())
    print(f"SYNTHETIC hero-shaped run, sync --follow --interval {args.interval:g}, {args.rounds} follows each")
    print(f"  baseline (built-in, --notify webhook) NaN loss: served → first delivery {_fmt(plain)}")
    for case, xs in oncall.items():
        print(f"  on call (--preset marin-hero, ntfy, pushover) {case}: served → first delivery {_fmt(xs)}"
              "   (target ≤ 5 s)")
    if plain and oncall["hero non-finite loss"]:
        ratio = statistics.median(oncall["hero non-finite loss"]) / statistics.median(plain)
        print(f"  ratio on call / baseline (NaN loss, medians): {ratio:.2f}")


if __name__ == "__main__":
    main()
