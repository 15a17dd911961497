"""The digest, through the real CLI: `sync PROJECT --follow --digest 2s --notify ntfy=URL`.

A SYNTHETIC project of two hero-shaped runs on the loopback W&B fake (tests/fakes/hero_feed.py):
one that grows at its own pace (~20 s a step on its clock), with a NaN logged once (one alert),
and one that never moves. Every 2 s the follower tells one line per run on stderr and sends it to
ntfy at low priority (2): the digest after the growth has the run's step, its steps/s and ETA as
its own `_timestamp` gives them, its loss against the trend through its last 200 losses, and the
one alert since the last digest — each figure recomputed here from what the fake serves; a later
digest names both runs silent, and for how long. Digests are never early: over the follower's
whole life (bounded by the test's own clock around it) there are at most one per 2 s. The
interval is 2 s, not minutes, and the test waits on the lines themselves.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from marinctl import numbers as N
from tests.fakes.hero_feed import ENTITY, PROJECT, TOTAL_STEPS, HeroFeed, hero_run
from tests.fakes.ntfy_server import NtfyServer
from tests.fakes.wandb_server import WandbServer
from tests.follower import follow

LOSS = "train/loss"


@pytest.fixture
def env(_isolated_home):
    return {**os.environ, "MARINCTL_HOME": str(_isolated_home)}


def _expected(run) -> str:
    """The digest line of `run` as the fake serves it (pace: the median of its last 200 steps)."""
    s, t = run.series["_timestamp"]
    last = int(s[-1])
    keep = s >= last - 200
    pace = float(np.median(np.diff(t[keep]) / np.diff(s[keep])))
    ls, lv = run.series[LOSS]
    ok = np.isfinite(lv) & (ls >= last - 1000)
    ls, lv = ls[ok][-200:], lv[ok][-200:]
    from scipy.stats import theilslopes

    slope, icept, _, _ = theilslopes(lv, ls.astype(float))
    trend = icept + slope * ls[-1]
    return (f"{run.run_id}: step {N.count(last)} of {N.count(TOTAL_STEPS)} · {N.sig(1 / pace, 3)} steps/s · "
            f"ETA {N.duration((TOTAL_STEPS - last - 1) * pace)} · loss {N.fixed(lv[-1], 3)} (trend {N.fixed(trend, 3)}, "
            f"{N.percent(lv[-1] / trend - 1, 1, signed=True)}) · 1 alert since the last digest")


def test_the_digest_says_each_runs_figures_on_time_and_names_a_silent_run(env):
    live, still = hero_run("hero-synthetic-digest-live", seed=51), hero_run("hero-synthetic-digest-still", seed=52)
    with WandbServer([live, still], verbose=False) as server, NtfyServer() as ntfy:
        env["WANDB_BASE_URL"] = server.url
        feed = HeroFeed(server, live)
        born = time.monotonic()
        with follow(f"{ENTITY}/{PROJECT}", env, f"ntfy={ntfy.url}/oncall-topic-7f3a",
                    extra=("--digest", "2s")) as f:
            f.synced(live.last_step, live.run_id)
            nan_at = live.last_step + 3
            last = feed.grow(20, own_pace=True, plant=lambda r, lo, hi: r.set_values(LOSS, [nan_at], float("nan")))
            f.synced(last, live.run_id)
            f.said("alert (")
            want = _expected(live)
            f.said(want)                                           # the digest after the growth, figures right
            said = len(f.lines)
            f.until(lambda: any("silent" in ln and live.run_id in ln for ln in f.lines[said:]), "the live run silent")
            assert f.stop() in (0, 130), f.err[-2000:]
        lived = time.monotonic() - born
    digests = [(at, line) for at, line in zip(f.seen_at, f.lines) if line.startswith("digest: ")]
    by_run = {r.run_id: [line for _, line in digests if f": {r.run_id}: " in line] for r in (live, still)}
    assert f"digest: {want}" in by_run[live.run_id]
    silent = [line for line in by_run[still.run_id] if "silent — no new step for" in line]
    assert silent and all(f"(last step {N.count(still.last_step)})" in line for line in silent), by_run[still.run_id]
    assert all("0 alerts since the last digest" in line for line in by_run[still.run_id])
    rounds = len(by_run[still.run_id])                       # one line per run each round
    assert 2 <= rounds <= lived / 2.0, (rounds, lived)
    sent = [m for m in ntfy.accepted("oncall-topic-7f3a") if m.title.startswith("digest ")]
    assert sent and {m.priority for m in sent} == {2}, [(m.title, m.priority) for m in ntfy.messages]
    assert any(m.message.startswith(want) for m in sent), [m.message for m in sent]
