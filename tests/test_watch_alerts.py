"""Alerts in `watch`: watch follows, so its sync passes raise alerts as `sync --follow` does.

A SYNTHETIC run grows on the loopback W&B fake while watch follows it (tests/fakes/growing.py,
incidents shaped by tests/fakes/incidents.py): what it logged before watch started raises
nothing; an optimizer co-spike that arrives while watching shows as one notification naming its
cause class and `marinctl explain step N --run RUN`, one ⚑ on the loss chart, and one POST on a
loopback webhook (tests/fakes/webhook_receiver.py). An alert another follower stored is said
too, with a hostile run name inert. `watch --notify` takes the SINKs `sync` takes, and `--preset` and
`--digest` too, with the same exit-2 errors, through the real CLI. Waits are bounded; nothing asserts how fast.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from tests.blackbox import MARINCTL, ROOT, interrupt
from tests.fakes import incidents as I
from tests.fakes.growing import Feed, growing_run
from tests.fakes.wandb_server import WandbServer
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.watch_pilot import run_test, settle, wait_for_text

WAIT_S = 45.0
MARK = "⚑"


def watch_app(store_path, target: str, *notify: str, interval: float = 1.0):
    """`marinctl watch TARGET --interval S --notify SINK…` as an App for Pilot."""
    from marinctl.cli.notify import sinks_of
    from marinctl.store import Store
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions

    app = WatchApp(WatchOptions(target, interval, sinks=sinks_of(list(notify), follow=True, tui=True)),
                   store=Store(store_path))
    # every notification the app posts is kept: a toast leaves the screen after its timeout, and a
    # loaded machine may take longer than that to make the passes a test waits for
    app.said, notify = [], app.notify

    def kept(message, *args, **kwargs):
        app.said.append(str(message))
        return notify(message, *args, **kwargs)

    app.notify = kept
    return app


def header_step(step: int) -> str:
    return f"step {step:,} / "


def toasts(text: str) -> list[str]:
    return re.findall(r"marinctl explain step \d+ --run \S+", text)


def said(app) -> list[str]:
    """The alerts the app has notified since it started (each toast's command line)."""
    return [t for message in app.said for t in toasts(message)]


def charts(text: str) -> str:
    """The screen without its readout line (which names markers near the cursor)."""
    return "\n".join(line for line in text.splitlines() if "▏step" not in line)


@pytest.mark.asyncio
async def test_an_incident_while_watching_is_one_toast_one_mark_one_post(tmp_path, monkeypatch):
    run = growing_run("synthetic-alerts-watch")
    I.optimizer_co_spike(run, 300)                # logged before watch started: raises nothing
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        feed = Feed(server, run)
        app = watch_app(tmp_path / "watch.duckdb", run.path, f"webhook={hook.url}/generic")
        async with run_test(app) as pilot:
            await wait_for_text(pilot, header_step(feed.last_step), timeout=WAIT_S)     # the baseline pass
            # a pass's new alerts are said before the view it wrote is read: once the header shows
            # a step, every alert of the pass that synced it has been notified
            text = await wait_for_text(pilot, header_step(feed.grow(10)), timeout=WAIT_S)   # healthy steps
            assert said(app) == [] and MARK not in charts(text), text
            assert hook.posts == []

            spike = feed.grow(10, co_spike=True)
            toast = await wait_for_text(pilot, "marinctl explain step", timeout=WAIT_S)
            assert hook.wait_for(lambda posts: len(posts) >= 1, WAIT_S)
            await wait_for_text(pilot, header_step(feed.grow(6)), timeout=WAIT_S)     # re-scored: no second alert
            text = await wait_for_text(pilot, header_step(feed.grow(6)), timeout=WAIT_S)

    commands = said(app)
    assert len(commands) == 1, app.said
    step = int(commands[0].split()[3])
    assert spike - 2 <= step <= spike + 2 and commands[0] == f"marinctl explain step {step} --run {run.run_id}"
    assert "optimizer · high · train/loss" in toast                  # the cause class, on the toast
    assert charts(text).count(MARK) == 1, text                       # on the loss chart, once
    posts = hook.accepted("/generic")
    assert len(posts) == 1, [p.body for p in posts]
    assert posts[0].body["command"] == commands[0] and posts[0].body["cause_class"] == "optimizer"


@pytest.mark.asyncio
async def test_a_sync_follow_beside_watch_sends_nothing_twice(tmp_path, monkeypatch):
    """`sync ENTITY/PROJECT --follow` in another process and watch on the run both follow it (their sync
    locks differ): the incident is sent once in all, and said once on watch's screen."""
    run = growing_run("synthetic-alerts-beside", seed=7)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        env = {**os.environ, "MARINCTL_HOME": str(tmp_path)}
        feed = Feed(server, run)
        err = tmp_path / "sync-follow.err"           # a file, not a pipe: nothing reads it while both run
        with err.open("wb") as sink:
            other = subprocess.Popen(MARINCTL + ["--debug", "sync", f"{run.entity}/{run.project}", "--follow", "--interval", "0.5",
                                                 "--notify", f"webhook={hook.url}/sync"], env=env, cwd=ROOT,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink,
                                     start_new_session=True)
        try:
            # the same sink as the follower's: delivery is per sink, and this one takes it once in all
            app = watch_app(tmp_path / "marinctl.duckdb", run.path, f"webhook={hook.url}/sync")
            async with run_test(app) as pilot:
                await wait_for_text(pilot, header_step(feed.last_step), timeout=WAIT_S)
                await wait_for_text(pilot, header_step(feed.grow(6)), timeout=WAIT_S)
                feed.grow(10, co_spike=True)
                try:
                    await wait_for_text(pilot, "marinctl explain step", timeout=WAIT_S)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}\n--- sync --follow said:\n{err.read_text()[-3000:]}") from None
                assert hook.wait_for(lambda posts: len(posts) >= 1, WAIT_S)
                for _ in range(2):                      # both go on following: no second POST, no second toast
                    await wait_for_text(pilot, header_step(feed.grow(6)), timeout=WAIT_S)
        finally:
            interrupt(other)
    assert len(said(app)) == 1, app.said
    assert len(hook.accepted()) == 1, [(p.path, p.body) for p in hook.posts]


HOSTILE = "[red]boom[/red]\x1b[31m\x1b]52;c;ZXZpbA==\x07\u202eSYNTHETIC"    # no space: one word on screen


@pytest.mark.asyncio
async def test_an_alert_another_follower_stored_is_said_inert(store):
    """A `sync --follow` beside watch stores an alert of the run on screen: watch says it, as text."""
    from marinctl.store import alerts as alerts_store
    from tests.fakes.load import load_into_store
    from tests.fakes.synth import marin_run

    run = marin_run("synthetic-alerts-hostile", steps=120, layers=1, experts=2, norm_every=10, eval_every=50,
                    entity="synthetic-lab", project="alerts", group="synthetic-alerts")
    run.display_name = HOSTILE
    load_into_store(store, [run])
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions

    app = WatchApp(WatchOptions(None, 30.0, autosync=False), store=store)
    async with run_test(app) as pilot:
        text = await settle(pilot)
        assert MARK not in charts(text) and toasts(text) == []
        with store.transaction() as con:
            alerts_store.insert(con, {
                "run_uid": run_uid(con, run.run_id), "cause": "optimizer", "episode_start": 100, "episode_end": 102,
                "step": 101, "metric": "train/loss", "kind": "co_spike", "cause_class": "optimizer",
                "severity": "high", "title": f"An optimizer co-spike at step 101 on {HOSTILE}", "summary": "",
                "command": f"marinctl explain step 101 --run {run.run_id}", "details": {}})
        text = await wait_for_text(pilot, "marinctl explain step 101", timeout=WAIT_S)
    assert "[red]boom[/red]SYNTHETIC" in text                      # the markup shown as written
    assert "\x1b" not in text and "\u202e" not in text and "ZXZpbA" not in text
    assert charts(text).count(MARK) == 1, text


def run_uid(con, run_id: str) -> str:
    from marinctl.store.runs import resolve_run

    return resolve_run(con, run_id)["uid"]


@pytest.mark.parametrize("args, said, hint", [
    (["--notify", "pager"], "unknown --notify sink 'pager'", "--notify"),
    (["--notify", "webhook="], "--notify webhook= needs a URL", "--notify"),
    (["--notify", "slack=ftp://hooks.example/x"], "needs an http(s) URL", "--notify"),
    (["--notify", "desktop=yes"], "--notify desktop takes no value", "--notify"),
    (["--preset", "marin-villain"], "marin-villain", "--preset"),
    (["--digest", "5x"], "--digest takes a duration", "marinctl watch hero --digest 10m"),
    (["--digest", "0s"], "--digest takes a duration", "marinctl watch hero --digest 10m"),
])
def test_watch_alert_options_say_what_is_wrong(args, said, hint, _isolated_home):
    env = {**os.environ, "MARINCTL_HOME": str(_isolated_home)}
    done = subprocess.run(MARINCTL + ["watch", *args], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert said in lines[0] and len(lines) <= 2 and "Traceback" not in done.stderr, done.stderr
    assert hint in lines[-1], done.stderr                            # the next thing to type


def test_a_bad_rule_file_is_said_before_watch_opens(_isolated_home):
    """watch raises the user's rules too: a broken `<home>/alerts.toml` is bad input, as for `sync --follow`."""
    (_isolated_home / "alerts.toml").write_text("[[rule]]\nname = 'x'\nmetric = 'train/loss'\nkind = 'nope'\n")
    env = {**os.environ, "MARINCTL_HOME": str(_isolated_home)}
    done = subprocess.run(MARINCTL + ["watch"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 2 and "alerts.toml" in done.stderr and "Traceback" not in done.stderr, done.stderr
