"""The `marin-hero` preset on call, through the real CLI: `sync PROJECT --follow --preset marin-hero`.

One follow of a SYNTHETIC project of four hero-shaped runs (tests/fakes/hero_feed.py) served by the
loopback W&B fake, with three sinks at three minimum levels — a webhook for everything, ntfy from
high up, Pushover for emergencies — on their loopback fakes (tests/fakes/ntfy_server.py,
tests/fakes/pushover_api.py, each in its API's documented request shape):

- `hero-synthetic-planted` gets, while it is followed, one planted case of every preset rule: each
  fires once, at the planted step, with its priority and the rule's name;
- `hero-synthetic-control` grows healthy beside it: nothing fires for it, built-in or preset;
- `hero-synthetic-stall` logs a step its own clock says is 1,000 s old (stalled, and slow);
- `hero-synthetic-silent` logs a step with a heartbeat 700 s old (telemetry gone).

Then: each sink got what its level takes, on its own scale (Pushover 2 with retry/expire, ntfy 5/4),
and `marinctl alerts ack ID` stops one emergency's Pushover repeats (its receipt cancelled) and no
other. Every wait is on an event: a line the follower prints after its pass.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.fakes.hero_feed import ENTITY, EVAL, PROJECT, HeroFeed, eval_loss, hero_run
from tests.fakes.ntfy_server import NtfyServer
from tests.fakes.pushover_api import PushoverAPI
from tests.fakes.wandb_server import WandbServer
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.follower import follow, listed, marinctl

APP_TOKEN, USER_KEY = "synthetic-app-token-0123456789", "usyntheticuserkey0123456789abc"
LOSS, GRAD = "train/loss", "grad/norm/total"


@pytest.fixture
def env(_isolated_home):
    return {**os.environ, "MARINCTL_HOME": str(_isolated_home)}


def _single(run, key: str, step: int, value: float) -> None:
    run.set_values(key, [step], value)


def _scaled(run, key: str, lo: int, hi: int, *, add: float = 0.0, times: float = 1.0) -> None:
    s, v = run.series[key]
    at = (s >= lo) & (s <= hi)
    run.set_values(key, s[at], v[at] * times + add)


def test_every_preset_rule_fires_once_at_its_planted_step_and_reaches_the_sinks_its_level_takes(env):
    planted, control = hero_run("hero-synthetic-planted", seed=31), hero_run("hero-synthetic-control", seed=32)
    stall = hero_run("hero-synthetic-stall", seed=33, clock_end=time.time() - 1_000)
    silent = hero_run("hero-synthetic-silent", seed=34)
    runs = [planted, control, stall, silent]
    with WandbServer(runs, verbose=False) as server, WebhookReceiver() as hook, \
            PushoverAPI(token=APP_TOKEN) as push, NtfyServer() as ntfy:
        env.update(WANDB_BASE_URL=server.url, PUSHOVER_API_URL=push.url, PUSHOVER_APP_TOKEN=APP_TOKEN)
        feed = {r.run_id: HeroFeed(server, r) for r in runs}
        sinks = (f"webhook={hook.url}/all", f"ntfy@high={ntfy.url}/synthetic-oncall", f"pushover@emergency={USER_KEY}")
        with follow(f"{ENTITY}/{PROJECT}", env, *sinks, extra=("--preset", "marin-hero")) as f:
            f.synced(planted.last_step, planted.run_id)                   # the baseline: history raises nothing

            def grow(n: int, plant=None, *, stalled: bool = False) -> int:
                """`n` steps of the planted run (with `plant`) and of the control; with `stalled`, one step
                of the stall run logged 1,000 s ago and one of the silent run whose heartbeat is 700 s old."""
                feed[control.run_id].grow(n)
                if stalled:
                    feed[stall.run_id].grow(1, lag_s=1_000)
                    feed[silent.run_id].grow(1, heartbeat_age_s=700)
                last = feed[planted.run_id].grow(n, plant=plant)
                f.synced(last, planted.run_id)
                return last

            p = grow(10) + 1                                               # single-row cases, one step each
            cases = {"hero grad norm": p + 1, "hero token drops": p + 2, "hero router entropy": p + 3,
                     "hero router bias": p + 4, "hero router bias (min)": p + 5, "hero non-finite loss": p + 6,
                     "hero eval regression": p + 10, "hero skipped steps": p + 16}

            def singles(r, lo, hi):
                _single(r, GRAD, p + 1, 3.0)
                _single(r, "moe/drop_fraction", p + 2, 0.08)
                _single(r, "train/router/routing_entropy_mean", p + 3, 5.80)
                _single(r, "train/router/bias_max", p + 4, 450.0)
                _single(r, "train/router/bias_min", p + 5, -450.0)
                _single(r, LOSS, p + 6, float("nan"))
                _single(r, EVAL, p + 10, float(eval_loss([p])[0]) + 0.05)   # worse than the eval before it
                for s in (p + 12, p + 14, p + 16):                           # the third skip in 45 rows
                    _single(r, "optim/skipped_step", s, 1.0)
            grow(20, singles, stalled=True)
            cases.update({"hero stalled": (stall.run_id, stall.last_step), "hero slow": (stall.run_id, stall.last_step),
                          "hero telemetry gone": (silent.run_id, silent.last_step)})
            for r in (stall, silent):
                f.synced(r.last_step, r.run_id)

            q = planted.last_step + 1                                      # windowed cases
            cases.update({"hero loss spike": q + 14, "hero throughput": q + 22, "hero MFU": q + 22})

            def slump(r, lo, hi):
                _scaled(r, LOSS, q, q + 14, add=0.3)                       # 15 rows: the min of 5 min, 6σ up
                for key in ("throughput/tokens_per_second", "throughput/mfu"):
                    _scaled(r, key, q, q + 29, times=0.5)                   # 23 of 45 rows: the median falls
            grow(30, slump)
            grow(20)
            j = planted.last_step + 1
            grow(20, lambda r, lo, hi: _scaled(r, LOSS, j, j + 14, add=1.5))   # a loss jump (and a spike)

            def fired(*levels: str) -> int:
                return sum(line.startswith(tuple(f"alert ({lv} " for lv in levels)) for line in list(f.lines))
            f.until(lambda: len(hook.accepted("/all")) >= fired("emergency", "high", "normal", "low") and
                    len(ntfy.accepted()) >= fired("emergency", "high") and len(push.accepted()) >= fired("emergency"),
                    "every sink's deliveries")
            assert f.stop() in (0, 130), f.err[-2000:]

        alerts = listed(env)
        by_rule: dict[str, list[tuple[str, int]]] = {}
        for a in alerts:
            if a["rule"]:
                by_rule.setdefault(a["rule"], []).append((a["run"], a["step"]))
        want = {rule: [(planted.run_id, at)] if isinstance(at, int) else [at] for rule, at in cases.items()}
        want["hero loss spike"] = [(planted.run_id, j + 14), (planted.run_id, q + 14)]   # the jump is a spike too
        want["hero loss jump"] = [(planted.run_id, j + 14)]
        assert {r: sorted(v) for r, v in by_rule.items()} == {r: sorted(v) for r, v in want.items()}, \
            "\n".join(f"{a['rule']} {a['run']} {a['step']} {a['priority']}" for a in alerts)
        assert [a for a in alerts if a["run"] == control.run_id] == [], "the healthy control raised an alert"
        priority = {a["rule"]: a["priority"] for a in alerts if a["rule"]}
        assert priority == {"hero grad norm": "high", "hero token drops": "normal", "hero router entropy": "normal",
                            "hero router bias": "normal", "hero router bias (min)": "normal",
                            "hero non-finite loss": "emergency", "hero eval regression": "normal",
                            "hero skipped steps": "high", "hero stalled": "emergency", "hero slow": "normal",
                            "hero telemetry gone": "emergency", "hero loss spike": "high", "hero throughput": "normal",
                            "hero MFU": "normal", "hero loss jump": "high"}
        nan = next(a for a in alerts if a["rule"] == "hero non-finite loss")
        assert (nan["kind"], nan["cause_class"], nan["metric"]) == ("nonfinite", "numerics", LOSS), nan

        # each sink got what its minimum level takes, on its own scale
        sent = {a["id"]: a for a in alerts}
        webhook = [p.body for p in hook.accepted("/all")]
        assert sorted(b["alert_id"] for b in webhook) == sorted(sent), "the webhook (low and up) missed some"
        emergencies = sorted(a["title"][:250] for a in alerts if a["priority"] == "emergency")
        assert sorted(m.form["title"] for m in push.accepted()) == emergencies
        assert all((m.form["priority"], m.form["retry"], m.form["expire"]) == ("2", "60", "3600")
                   and m.form["user"] == USER_KEY and m.form["token"] == APP_TOKEN for m in push.accepted())
        high_up = {a["title"][:250]: a["priority"] for a in alerts if a["priority"] in ("high", "emergency")}
        assert {m.title: m.priority for m in ntfy.accepted("synthetic-oncall")} == \
            {t: {"high": 4, "emergency": 5}[p] for t, p in high_up.items()}

        # an emergency repeats on Pushover until `alerts ack` stops it; the others go on
        assert len(push.repeating()) == 3
        done = marinctl(env, "alerts", "ack", str(nan["id"]))
        assert done.returncode == 0 and "acknowledged" in done.stdout and "1 receipt" in done.stdout, done.stderr
        acked_receipt = next(m.receipt for m in push.accepted() if m.form["title"] == nan["title"][:250])
        assert push.cancelled == [acked_receipt] and acked_receipt not in push.repeating()
        assert len(push.repeating()) == 2
    again = next(a for a in listed(env) if a["id"] == nan["id"])
    assert again["acked"] is True and not any(d["repeats"] for d in again["deliveries"]), again
