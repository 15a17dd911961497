"""Alerts as a follower gets them: `marinctl sync TARGET --follow --notify SINK`.

Every test runs the real CLI in a process group of its own that the test ends (Ctrl-C, then
SIGKILL if it lingers), against loopback fakes only: the W&B GraphQL fake serving a SYNTHETIC
run that grows while the test runs (tests/fakes/growing.py, incidents injected as
tests/fakes/incidents.py shapes them) and a webhook receiver (tests/fakes/webhook_receiver.py).
Waits are bounded; nothing here asserts how fast anything is (bench/bench_alerts.py does).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.blackbox import MARINCTL, ROOT, interrupt, strict_json
from tests.fakes.growing import Feed, growing_run
from tests.fakes.wandb_server import WandbServer
from tests.fakes.webhook_receiver import WebhookReceiver

INTERVAL = "0.5"
WAIT_S = 45.0      # the most any wait below lasts (a loaded CI machine); a healthy run takes seconds


class Follower:
    """`marinctl sync ARGS --follow` in its own process group; its stderr read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(MARINCTL + args, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    @property
    def err(self) -> str:
        return "\n".join(self.lines)

    def synced(self, step: int, timeout: float = WAIT_S) -> None:
        """Wait until a pass has synced `step` (its alert pass ran in the same round, before this line)."""
        needle = f"last step {step:,}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(needle in line for line in list(self.lines)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the follower never synced step {step}:\n{self.err[-3000:]}")

    def synced_run(self, run: str, step: int, timeout: float = WAIT_S) -> None:
        """Wait until a pass has written `run` up to `step` (a local tail's line for that run)."""
        needle = f"{run}: +"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(line.startswith(needle) and line.endswith(f"last step {step:,}") for line in list(self.lines)):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the follower never synced {run} to step {step}:\n{self.err[-3000:]}")

    def passes(self, server, n: int = 1, timeout: float = WAIT_S) -> None:
        """Wait until `n` passes that began after this call are over (its alert pass included): each
        pass starts by asking the W&B fake for the run, so the (n+1)th request after now means so."""
        start = server.stats["Run"] + server.stats["Runs"]
        deadline = time.monotonic() + timeout
        while server.stats["Run"] + server.stats["Runs"] < start + n + 1:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"the follower made no {n} passes:\n{self.err[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> int:
        """Ctrl-C to the group, as a terminal sends it; SIGKILL if it does not end."""
        if not interrupt(self.proc):
            raise AssertionError(f"the follower did not stop on Ctrl-C:\n{self.err[-2000:]}")
        self._reader.join(timeout=5)
        return self.proc.returncode

    def __enter__(self) -> "Follower":
        return self

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)


def follow(target: str, env: dict[str, str], *notify: str, interval: str = INTERVAL) -> Follower:
    args = ["sync", target, "--follow", "--interval", interval]
    for n in notify:
        args += ["--notify", n]
    return Follower(args, env)


def marinctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(MARINCTL + list(args), env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


def listed(env: dict[str, str], *args: str) -> list[dict]:
    done = marinctl(env, "alerts", "--json", *args)
    assert done.returncode == 0, done.stderr
    return strict_json(done.stdout)


@pytest.fixture
def env(_isolated_home):
    return {**os.environ, "MARINCTL_HOME": str(_isolated_home)}


def generic(hook: WebhookReceiver) -> list[dict]:
    return [p.body for p in hook.accepted("/generic")]


# --- incidents reach the receiver once ------------------------------------------------------------

def test_each_incident_reaches_the_webhook_once_with_its_cause_and_command(env):
    run = growing_run("synthetic-alerts-incidents")
    from tests.fakes import incidents as I

    I.optimizer_co_spike(run, 300)        # history before following: raises nothing
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        with follow(run.path, env, f"webhook={hook.url}/generic") as f:
            f.synced(feed.last_step)                      # the baseline pass
            f.synced(feed.grow(10))                       # healthy steps
            spike = feed.grow(10, co_spike=True)
            f.synced(feed.last_step)
            assert hook.wait_for(lambda p: len(p) >= 1, WAIT_S), f.err[-2000:]
            nan = feed.grow(10, nan_loss=True)
            f.synced(feed.last_step)
            assert hook.wait_for(lambda p: len(p) >= 2, WAIT_S), f.err[-2000:]
            for _ in range(3):                            # the episodes go on being re-scored: no repeat
                f.synced(feed.grow(6))
            assert f.stop() in (0, 130), f.err[-2000:]
    posts = generic(hook)
    by_cause = {(p["cause_class"], p["kind"]): p for p in posts}
    assert len(posts) == 2 == len(by_cause), json.dumps(posts, indent=1)[:3000]
    co = next(p for p in posts if p["cause_class"] == "optimizer")
    assert co["severity"] == "high" and spike - 2 <= co["step"] <= spike + 2, co
    assert co["command"] == f"marinctl explain step {co['step']} --run {run.run_id}"
    assert co["summary"] and f"step {co['step']:,}" in co["summary"], co
    assert co["run"] == run.run_id and co["metric"], co
    bad = next(p for p in posts if p["cause_class"] == "numerics")
    assert bad["metric"] == "train/loss" and bad["step"] == nan and bad["kind"] == "nonfinite", bad
    assert all(p["step"] > 400 for p in posts), "history logged before following raised an alert"
    rows = listed(env)
    assert [r["step"] for r in rows] == sorted((p["step"] for p in posts), reverse=True)   # newest first
    assert all(r["delivered"] for r in rows) and {r["cause_class"] for r in rows} == {"optimizer", "numerics"}
    assert set(rows[0]) >= {"run", "step", "metric", "cause_class", "severity", "title", "fired_at", "delivered"}
    assert listed(env, "--run", run.run_id) == rows
    unknown = marinctl(env, "alerts", "--run", "synthetic-alerts-no-such-run")
    assert unknown.returncode == 2 and "unknown run" in unknown.stderr and "Traceback" not in unknown.stderr


def test_a_healthy_growing_run_sends_nothing(env):
    run = growing_run("synthetic-alerts-healthy", seed=3)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        with follow(run.path, env, f"webhook={hook.url}/generic") as f:
            f.synced(feed.last_step)
            for _ in range(4):
                f.synced(feed.grow(10))
            assert f.stop() in (0, 130), f.err[-2000:]
    assert hook.posts == [] and listed(env) == []
    assert "alerts go to webhook (127.0.0.1" in f.err    # the sink was in place, and its URL path is never said


def test_a_throughput_drop_fires_once_while_it_lasts(env):
    run = growing_run("synthetic-alerts-slowdown", seed=4)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        with follow(run.path, env, f"webhook={hook.url}/generic") as f:
            f.synced(feed.last_step)
            for _ in range(4):                    # tokens/s halved, step time doubled, for ~200 steps
                f.synced(feed.grow(50, slowdown=True))
            assert hook.wait_for(lambda p: len(p) >= 1, WAIT_S), f.err[-2000:]
            f.synced(feed.grow(24, slowdown=True))
            assert f.stop() in (0, 130), f.err[-2000:]
    posts = generic(hook)
    assert len(posts) == 1, posts
    assert (posts[0]["kind"], posts[0]["cause_class"]) == ("throughput_collapse", "infrastructure"), posts[0]
    assert posts[0]["step"] > 400 and posts[0]["metric"].startswith("throughput/")


# --- retries, Ctrl-C, restarts, a second follower ----------------------------------------------------

def test_a_failing_receiver_gets_it_on_a_retry_and_no_follower_sends_it_twice(env):
    run = growing_run("synthetic-alerts-retry", seed=5)
    with WandbServer([run], verbose=False) as server, WebhookReceiver(fail_first=1) as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        sink = f"webhook={hook.url}/generic"
        # a second follower (through the run's project) takes its baseline, then is paused between passes:
        # two processes never sync one run at once (sync locks are per target), but both see the incident
        with follow(f"{run.entity}/{run.project}", env, sink, interval="3") as other:
            other.synced(feed.last_step)
            os.killpg(other.proc.pid, signal.SIGSTOP)
            try:
                with follow(run.path, env, sink) as one:
                    one.passes(server)
                    feed.grow(10, co_spike=True)
                    one.synced(feed.last_step)
                    assert hook.wait_for(lambda p: len(p) >= 2, WAIT_S), one.err[-2000:]   # refused, then retried
                    one.synced(feed.grow(6))
                    assert one.stop() in (0, 130), one.err[-2000:]
            finally:
                os.killpg(other.proc.pid, signal.SIGCONT)
            other.synced(feed.grow(6))                 # its next pass: the incident is new to it, not to the store
            other.passes(server)
            assert other.stop() in (0, 130), other.err[-2000:]
        # a follower says each alert it raises on stderr in the pass that raised it, before it sends it:
        # a duplicate POST needs one, so none said means none was on its way
        assert not [line for line in other.lines if line.startswith("alert (")], other.err[-2000:]
        assert "not delivered to webhook (127.0.0.1" in one.err and "HTTP 500" in one.err, one.err[-2000:]
        first, second = hook.posts[:2]
        assert (first.status, second.status) == (500, 200) and first.raw == second.raw
        with follow(run.path, env, sink) as again:            # Ctrl-C, then a restart while the run grows
            again.passes(server)
            for _ in range(2):
                again.synced(feed.grow(6))
            assert again.stop() in (0, 130), again.err[-1500:]
        assert not [line for line in again.lines if line.startswith("alert (")], again.err[-1500:]
    assert len(hook.posts) == 2 and len(hook.accepted()) == 1, [p.body for p in hook.posts]
    rows = listed(env)
    assert len(rows) == 1 and rows[0]["delivered"] and rows[0]["tries"] == 2, rows


def test_an_alert_no_sink_took_is_listed_undelivered_and_sent_by_the_next_follower(env):
    run = growing_run("synthetic-alerts-pending", seed=6)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        with follow(run.path, env, "webhook=http://127.0.0.1:9/refused") as f:   # nothing listens on port 9
            f.synced(feed.last_step)
            feed.grow(10, co_spike=True)
            f.synced(feed.last_step)
            deadline = time.monotonic() + WAIT_S
            while "not delivered" not in f.err and time.monotonic() < deadline:
                time.sleep(0.1)
            assert f.stop() in (0, 130), f.err[-2000:]
        assert "cannot connect to 127.0.0.1:9" in f.err, f.err[-2000:]
        rows = listed(env)
        assert len(rows) == 1 and rows[0]["delivered"] is False and rows[0]["tries"] >= 1, rows
        done = marinctl(env, "alerts")
        assert done.returncode == 0 and "no (" in done.stdout, done.stdout
        with follow(run.path, env, f"webhook={hook.url}/generic") as again:
            again.passes(server)
            assert hook.wait_for(lambda p: len(p) >= 1, WAIT_S), again.err[-2000:]
            assert again.stop() in (0, 130)
    assert len(hook.posts) == 1 and hook.posts[0].body["cause_class"] == "optimizer"
    assert listed(env)[0]["delivered"] is True


# --- the user's rules -------------------------------------------------------------------------------

RULES = '''
# SYNTHETIC rules for a SYNTHETIC run
[[rule]]
name = "probe above 5"
metric = "synthetic/threshold_probe"
kind = "threshold"
stat = "mean"
window = 3
above = 5.0

[[rule]]
name = "probe doubled"
metric = "synthetic/change_probe"
kind = "change"
stat = "mean"
window = 4
relative = 0.5
direction = "up"

[[rule]]
name = "probe outlier"
runs = ["synthetic-alerts-*"]
metric = "synthetic/zscore_probe"
kind = "zscore"
window = 20
z = 6

[[rule]]
name = "never this run"
runs = ["someone-else-*"]
metric = "synthetic/threshold_probe"
kind = "threshold"
above = 0.0
'''


def _probes(run, lo: int, hi: int, *, threshold=1.0, change=10.0, zscore_at=None) -> None:
    """SYNTHETIC probe metrics at steps lo..hi, one per rule: a level, a level, a quiet series with an outlier."""
    import numpy as np

    steps = np.arange(lo, hi + 1)
    run.set_values("synthetic/threshold_probe", steps, threshold)
    run.set_values("synthetic/change_probe", steps, change)
    z = 1.0 + 0.01 * np.sin(steps)
    if zscore_at is not None:
        z[steps == zscore_at] = 50.0
    run.set_values("synthetic/zscore_probe", steps, z)


def test_threshold_change_and_zscore_rules_each_fire_once_on_their_own_case(env):
    Path(env["MARINCTL_HOME"], "alerts.toml").write_text(RULES)
    run = growing_run("synthetic-alerts-rules", seed=7)
    _probes(run, 0, 399, threshold=9.0, zscore_at=350)     # before following: a breach already over, an outlier
    _probes(run, 390, 399)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)

        def grow(**kw) -> int:
            return feed.grow(8, then=lambda r, lo, hi: _probes(r, lo, hi, **kw))

        with follow(run.path, env, f"webhook={hook.url}/generic") as f:
            f.synced(feed.last_step)
            f.synced(grow())                                      # quiet
            f.synced(grow(threshold=9.0))                         # mean over 3 rows > 5: one episode
            f.synced(grow(threshold=9.0))                         # still above: the same episode
            f.synced(grow(change=30.0))                           # mean of 4 rows up 200% on the 4 before
            f.synced(grow(change=30.0, zscore_at=feed.last_step + 4))   # an outlier: z far above 6
            f.synced(grow(change=30.0))
            assert hook.wait_for(lambda p: len(p) >= 3, WAIT_S), f.err[-2000:]
            assert f.stop() in (0, 130), f.err[-2000:]
    posts = generic(hook)
    titles = sorted(p["title"].split(":")[0] for p in posts)
    assert titles == ["probe above 5", "probe doubled", "probe outlier"], json.dumps(posts, indent=1)[:3000]
    kinds = {p["title"].split(":")[0]: p["kind"] for p in posts}
    assert kinds == {"probe above 5": "threshold", "probe doubled": "change", "probe outlier": "zscore"}
    assert all(p["step"] > 400 and p["command"].startswith("marinctl explain step ") for p in posts)


@pytest.mark.parametrize("text, says", [
    ("[[rule]]\nname = 'x'\nmetric = 'train/loss'\nkind = 'treshold'\nabove = 1\n", "kind must be one of threshold"),
    ("[[rule]]\nmetric = 'train/loss'\nkind = 'threshold'\nabove = 1\n", "needs a name"),
    ("[[rule]]\nname = 'x'\nmetric = 'train/loss'\nkind = 'change'\n", "needs one positive relative"),
    ("[[rule]]\nname = 'x'\nmetric = 'train/loss'\nkind = 'threshold'\nabove = 1\nwindw = 3\n", "unknown setting 'windw'"),
    ("[[rule]\nname = 'x'\n", "not valid TOML"),
])
def test_a_bad_rule_file_is_exit_2_naming_the_problem_before_anything_syncs(env, text, says):
    Path(env["MARINCTL_HOME"], "alerts.toml").write_text(text)
    env["WANDB_BASE_URL"] = "http://127.0.0.1:9"     # nothing there: a sync that started would fail otherwise
    done = marinctl(env, "sync", "synthetic-lab/alerts/synthetic-alerts-none", "--follow", "--interval", "1")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 2 and says in lines[0] and "alerts.toml" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("args, says", [
    (["--notify", "webhook=http://127.0.0.1:9/x"], "add --follow"),
    (["--follow", "--notify", "pager=http://x"], "unknown --notify sink 'pager'"),
    (["--follow", "--notify", "slack=not-a-url"], "needs an http(s) URL"),
    (["--follow", "--notify", "exec="], "needs a COMMAND"),
])
def test_a_bad_notify_is_exit_2_naming_it(env, args, says):
    done = marinctl(env, "sync", "synthetic-lab/alerts/synthetic-alerts-none", *args)
    assert done.returncode == 2 and says in done.stderr and "Traceback" not in done.stderr, done.stderr


# --- liveness ---------------------------------------------------------------------------------------

def test_a_run_going_stale_fires_once(env):
    Path(env["MARINCTL_HOME"], "alerts.toml").write_text("[liveness]\nstale_after = 4  # SYNTHETIC: seconds\n")
    run = growing_run("synthetic-alerts-stale", seed=8)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        beating = threading.Event()

        def heart() -> None:                                   # a live run's heartbeat, between its steps
            while not beating.wait(0.2):
                feed.beat()

        with follow(run.path, env, f"webhook={hook.url}/generic") as f:
            threading.Thread(target=heart, daemon=True).start()
            try:
                f.synced(feed.last_step)
                for _ in range(3):
                    f.synced(feed.grow(5))
            finally:
                beating.set()                                   # …and then nothing: no step, no heartbeat
            last = feed.last_step
            assert hook.wait_for(lambda p: len(p) >= 1, WAIT_S), f.err[-2000:]
            f.passes(server, 3)                                 # more passes while it stays stale
            assert f.stop() in (0, 130), f.err[-2000:]
    posts = generic(hook)
    assert len(posts) == 1, posts
    assert posts[0]["kind"] == "stale" and posts[0]["cause_class"] == "infrastructure" and posts[0]["step"] == last
    assert "stale" in posts[0]["title"] and run.run_id in posts[0]["title"]


# --- hostile text, secrets ----------------------------------------------------------------------------

HOSTILE = ("<!channel> @here @everyone *boom* <https://evil.example/x|click me> & `tick` [mask](https://evil.example)"
           " \x1b]0;pwned\x07 \u202eSYNTHETIC")
SECRET = "synthetic-secret-0123456789abcdef"


def test_a_hostile_run_name_arrives_inert_in_slack_and_discord_and_no_secret_in_any_body(env, tmp_path):
    run = growing_run("synthetic-alerts-hostile", seed=9, name=HOSTILE + " " + SECRET)
    bin_dir, shown = tmp_path / "bin", tmp_path / "notify-send.args"
    bin_dir.mkdir()                              # a stand-in notify-send: records its arguments, one per line
    (bin_dir / "notify-send").write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {shown}\n')
    (bin_dir / "notify-send").chmod(0o755)
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env.update(WANDB_BASE_URL=server.url, WANDB_API_KEY=SECRET, PATH=f"{bin_dir}:{env['PATH']}")
        feed = Feed(server, run)
        slack_url = f"{hook.url}/slack/T0SYNTH/B0SYNTH/synthetichooksecretXYZ"
        with follow(run.path, env, f"slack={slack_url}", f"discord={hook.url}/discord/1/synthdiscordsecret",
                    f"webhook={hook.url}/generic", "desktop") as f:
            f.synced(feed.last_step)
            feed.grow(10, co_spike=True)
            f.synced(feed.last_step)
            assert hook.wait_for(lambda p: len(p) >= 3, WAIT_S), f.err[-2000:]
            deadline = time.monotonic() + WAIT_S
            while not shown.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert f.stop() in (0, 130), f.err[-2000:]
    args = shown.read_text().splitlines()
    assert args[:3] == ["--app-name=marinctl", "--urgency=critical", "--"] and args[3].startswith("marinctl: "), args
    assert SECRET not in shown.read_text() and "marinctl explain step" in args[4], args
    for p in hook.posts:
        raw = p.raw.decode()
        assert SECRET not in raw and "synthetichooksecretXYZ" not in raw and "synthdiscordsecret" not in raw, p.path
        assert not any(c in s for s in _strings(p.body) for c in "\x1b\x07\u202e"), p.path    # no escape, no bidi
    assert "synthetichooksecretXYZ" not in f.err and SECRET not in f.err
    text = next(p for p in hook.posts if p.path.startswith("/slack")).body["text"]
    assert "<!channel>" not in text and "&lt;!channel&gt;" in text
    assert "<https://evil" not in text and "https://evil" not in text      # no link can form
    assert "@here" not in text and "@everyone" not in text                  # no mention can form
    assert "`tick`" not in text and "(https://evil" not in text
    assert "[redacted]" in text
    discord = next(p for p in hook.posts if p.path.startswith("/discord")).body
    assert discord["allowed_mentions"] == {"parse": []}
    assert "https://evil" not in discord["content"] and "`tick`" not in discord["content"]
    generic_body = next(p for p in hook.posts if p.path.startswith("/generic")).body
    assert set(generic_body) >= {"run", "step", "metric", "cause_class", "severity", "title", "summary", "command"}
    assert generic_body["run_name"].startswith("<!channel> @here")           # JSON is JSON: the name, inert, as it is


def _strings(obj) -> list[str]:
    if isinstance(obj, str):
        return [obj]
    if isinstance(obj, dict):
        return [s for v in obj.values() for s in _strings(v)]
    if isinstance(obj, list):
        return [s for v in obj for s in _strings(v)]
    return []


# --- a local run, tailed ------------------------------------------------------------------------------

def _write_local(out: Path, run_id: str, *, nan_at: int, steps: int = 60) -> None:
    from tests.blackbox import sdk_write

    sdk_write(out, f'''
run = wandb.init(mode="offline", dir=out, project="synthetic-alerts", id="{run_id}", name="{run_id} (synthetic)",
                 settings=S(x_transaction_log_flush_interval=0.5))
for s in range({steps}):
    run.log({{"train/loss": float("nan") if s == {nan_at} else 3.0 - 0.01 * s, "grad/norm/total": 1.0}}, step=s)
    time.sleep(0.01)
run.finish()
''')


def test_a_tailed_local_run_alerts_through_an_exec_sink(env, tmp_path):
    import shlex

    runs, sent = tmp_path / "runs", tmp_path / "sent.jsonl"
    _write_local(runs, "synthetic-alerts-local-before", nan_at=7)           # a NaN logged before following
    sink = f"exec=cat >> {shlex.quote(str(sent))}; echo >> {shlex.quote(str(sent))}"
    with Follower(["sync", str(runs / "wandb"), "--follow", "--notify", sink], env) as f:
        f.synced(59)                                                         # the tail caught the first run up
        _write_local(runs, "synthetic-alerts-local-live", nan_at=40)        # a run that starts while followed
        deadline = time.monotonic() + WAIT_S
        while not (sent.exists() and sent.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.1)
        f.synced_run("synthetic-alerts-local-live", 59)                    # the live run's last window, tailed
        assert f.stop() in (0, 130), f.err[-2000:]
    # every alert a pass raised is said on stderr before it is sent, and what was not sent is counted
    assert [line for line in f.lines if line.startswith("alert (")] == [next(
        line for line in f.lines if line.startswith("alert ("))], f.err[-2000:]
    assert "deliveries not done" not in f.err, f.err[-2000:]
    bodies = [json.loads(line) for line in sent.read_text().splitlines() if line.strip()]
    assert len(bodies) == 1, bodies
    (b,) = bodies
    assert (b["run"], b["metric"], b["step"], b["cause_class"], b["kind"]) == \
        ("synthetic-alerts-local-live", "train/loss", 40, "numerics", "nonfinite"), b
    assert b["command"] == "marinctl explain step 40 --run synthetic-alerts-local-live"
    assert [r["run"] for r in listed(env)] == ["synthetic-alerts-local-live"]
