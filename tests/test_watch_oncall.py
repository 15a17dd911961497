"""On call in `watch`: `watch RUN --preset marin-hero --digest 2s --notify ntfy=URL`.

A SYNTHETIC hero-shaped run (tests/fakes/hero_feed.py) grows on the loopback W&B fake while watch
follows it (Pilot, the app built from the options the CLI builds). History before watch started
raises nothing; a grad norm of 3 planted after it fires the preset's `hero grad norm` rule once: a
toast that leads with its priority, and one ntfy message at high (4) on the loopback ntfy fake
(tests/fakes/ntfy_server.py). Every 2 s of following, a digest: a toast titled "digest" naming the
run's step, and the same line sent to ntfy at low (2) (the options' bad input: test_watch_alerts.py).
Waits are on the screen or on the fake's messages, bounded; nothing asserts how fast.
"""

from __future__ import annotations

import pytest

from marinctl import numbers as N
from tests.fakes.hero_feed import ENTITY, PROJECT, HeroFeed, hero_run
from tests.fakes.ntfy_server import NtfyServer
from tests.fakes.wandb_server import WandbServer
from tests.watch_pilot import run_test, until, wait_for_text

WAIT_S = 45.0
TOPIC = "synthetic-watch-oncall-5d1e"


def oncall_watch(store_path, target: str, *notify: str, preset: str, digest: str):
    """The app `marinctl watch TARGET --interval 1 --preset P --digest D --notify SINK…` runs."""
    from marinctl.cli.notify import digest_of, rules_of, sinks_of
    from marinctl.store import Store
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions

    options = WatchOptions(target, 1.0, sinks=sinks_of(list(notify), follow=True, tui=True),
                           rules=rules_of(follow=True, preset=preset), digest_s=digest_of(digest, follow=True))
    app = WatchApp(options, store=Store(store_path))
    app.said, notify_ = [], app.notify            # every notification kept: a toast leaves after its timeout

    def kept(message, *args, **kwargs):
        app.said.append((kwargs.get("title"), str(message)))
        return notify_(message, *args, **kwargs)

    app.notify = kept
    return app


@pytest.mark.asyncio
async def test_a_preset_rule_and_the_digest_reach_the_screen_and_the_phone(tmp_path, monkeypatch, _isolated_home):
    run = hero_run("hero-synthetic-watch-oncall", seed=61)
    with WandbServer([run], verbose=False) as server, NtfyServer() as ntfy:
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        feed = HeroFeed(server, run)
        app = oncall_watch(tmp_path / "watch.duckdb", f"{ENTITY}/{PROJECT}/{run.run_id}",
                           f"ntfy={ntfy.url}/{TOPIC}", preset="marin-hero", digest="2s")
        async with run_test(app) as pilot:
            await wait_for_text(pilot, f"step {N.count(feed.last_step)} / ", timeout=WAIT_S)    # the baseline pass
            spike = feed.last_step + 3
            last = feed.grow(6, plant=lambda r, lo, hi: r.set_values("grad/norm/total", [spike], 3.0))
            await wait_for_text(pilot, f"step {N.count(last)} / ", timeout=WAIT_S)
            await until(pilot, lambda _: any(m.priority == 4 for m in ntfy.accepted(TOPIC)), "the page", WAIT_S)
            await until(pilot, lambda _: any(title == "digest" and f"step {N.count(last)} of" in text
                                             for title, text in app.said), "a digest after the growth", WAIT_S)
            feed.grow(4)                                  # a later pass re-reads the spike: no second alert
            await until(pilot, lambda _: sum(title == "digest" for title, _t in app.said) >= 2, "digests", WAIT_S)
            # each digest is said on screen as it is sent: one the phone got is one the screen showed
            await until(pilot, lambda _: set(lines_of(phone_digests(ntfy))) & set(lines_of(shown_digests(app))),
                        "a digest on the phone that the screen showed", WAIT_S)

    alerts = [text for title, text in app.said if title != "digest"]
    command = f"marinctl explain step {spike} --run {run.run_id}"
    assert len(alerts) == 1 and alerts[0].startswith("high · ") and command in alerts[0], app.said
    pages = [m for m in ntfy.accepted(TOPIC) if m.priority == 4]
    assert len(pages) == 1 and "hero grad norm" in (pages[0].title or "") + pages[0].message, pages
    digests = phone_digests(ntfy)
    assert digests and {m.priority for m in digests} == {2}, [(m.title, m.priority) for m in ntfy.accepted(TOPIC)]
    assert any(line.startswith(f"{run.run_id}: step ") for line in lines_of(shown_digests(app))), app.said


def phone_digests(ntfy) -> list:
    return [m for m in ntfy.accepted(TOPIC) if (m.title or "").startswith("digest ")]


def shown_digests(app) -> list[str]:
    return [text for title, text in app.said if title == "digest"]


def lines_of(digests) -> list[str]:
    """Each digest's first line (its run's figures), from ntfy messages or screen texts."""
    return [(d if isinstance(d, str) else d.message).splitlines()[0] for d in digests]
