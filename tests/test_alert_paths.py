"""The alert paths no other test walks, through the real CLI (`marinctl sync TARGET --follow`).

- Hostile text — `$(…)`, backticks, `;`, a newline, bidi controls — in a run's name and a metric's
  key reaches a real `exec=` command (the JSON on its stdin) and `notify-send` (a stand-in on PATH
  that records its argv) as data: nothing in it is executed, and no control character survives.
- A run turning crashed raises its alert, and every sink's failure path — webhook, Slack and
  Discord refusing it, a URL nothing listens on, Pushover refusing the app token, ntfy the access
  token — keeps each sink's secret (URL path, query, credentials, keys, tokens) out of stderr, the
  stored `last_error`s and everything else the store holds about alerts.

Loopback fakes only, SYNTHETIC runs; every wait is on an event (a line printed, a request seen).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.blackbox import strict_json
from tests.fakes.growing import Feed, growing_run
from tests.fakes.ntfy_server import NtfyServer
from tests.fakes.pushover_api import PushoverAPI
from tests.fakes.wandb_server import WandbServer
from tests.fakes.webhook_receiver import WebhookReceiver
from tests.follower import WAIT_S, follow, listed, marinctl


@pytest.fixture
def env(_isolated_home):
    return {**os.environ, "MARINCTL_HOME": str(_isolated_home)}


def _controls(text: str) -> list[str]:
    """Control and bidi characters left in `text`."""
    return [c for c in text if ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or 0x202a <= ord(c) <= 0x202e
            or 0x2066 <= ord(c) <= 0x2069]


def test_hostile_text_reaches_exec_and_notify_send_as_data_and_nothing_runs(env, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    shell = f"$(touch {marks}/dollar) `touch {marks}/tick`; touch {marks}/semi\ntouch {marks}/newline"
    key = f"synthetic/$(touch {marks}/key)`touch {marks}/keytick`;x\u202e\u2066"
    run = growing_run("synthetic-alerts-hostile-shell", seed=21, name=f"{shell} \u202eSYNTHETIC\u2069")
    bin_dir, argv_file, sent = tmp_path / "bin", tmp_path / "notify-send.json", tmp_path / "exec.json"
    bin_dir.mkdir()                        # a stand-in notify-send that records its argv exactly
    (bin_dir / "notify-send").write_text(f"#!{sys.executable}\nimport json, sys\n"
                                         f"open({str(argv_file)!r}, 'w').write(json.dumps(sys.argv[1:]))\n")
    (bin_dir / "notify-send").chmod(0o755)
    with WandbServer([run], verbose=False) as server:
        env.update(WANDB_BASE_URL=server.url, PATH=f"{bin_dir}:{env['PATH']}")
        feed = Feed(server, run)
        with follow(run.path, env, f"exec=cat > {sent}", "desktop") as f:
            f.synced(feed.last_step)
            nan_at = feed.last_step + 4                       # a NaN under the hostile key, three steps in
            feed.grow(8, then=lambda r, lo, hi: r.set_values(key, range(lo, hi + 1),
                                                             [float("nan") if s == nan_at else 1.0 for s in range(lo, hi + 1)]))
            f.synced(feed.last_step)
            f.said("alert (")
            f.until(lambda: argv_file.exists() and sent.exists() and sent.stat().st_size > 0, "both sinks ran")
            assert f.stop() in (0, 130), f.err[-2000:]
    assert sorted(p.name for p in marks.iterdir()) == [], "text from a run was executed"
    body = json.loads(sent.read_text())
    assert (body["kind"], body["step"]) == ("nonfinite", nan_at) and "$(touch" in body["metric"], body
    for field in ("title", "summary", "command", "run_name", "metric"):
        assert not _controls(body[field] or ""), (field, body[field])
    assert "$(touch" in body["run_name"] and "`touch" in body["run_name"] and "; touch" in body["run_name"]
    assert "$(touch" in body["title"]                      # the key, said as it is: data, never run
    argv = json.loads(argv_file.read_text())
    assert argv[:3] == ["--app-name=marinctl", "--urgency=critical", "--"] and len(argv) == 5, argv
    assert argv[3].startswith("marinctl: ") and "$(touch" in argv[3] and not _controls(argv[3] + argv[4]), argv
    assert "marinctl explain step" in argv[4]


SECRET = "synthetic-secret-5f1e0c9a"      # in every sink's URL, key or token below


def test_a_crashed_run_alerts_and_no_failing_sink_says_or_stores_its_secret(env, tmp_path):
    run = growing_run("synthetic-alerts-crash", seed=22)
    user_key = ("u" + SECRET.replace("-", "") * 2)[:30]      # a Pushover user key is 30 letters and digits
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook, \
            PushoverAPI(token="synthetic-right-app-token") as push, NtfyServer(token="tk_synthetic_right") as ntfy:
        hook.failing.add("/")
        env.update(WANDB_BASE_URL=server.url, PUSHOVER_API_URL=push.url, PUSHOVER_APP_TOKEN=f"app-{SECRET}",
                   NTFY_TOKEN=f"tk_{SECRET}")
        sinks = (f"webhook={hook.url}/hook/{SECRET}?token={SECRET}&x=1", f"slack={hook.url}/slack/T0/B0/{SECRET}",
                 f"discord={hook.url}/discord/1/{SECRET}", f"webhook=http://user:{SECRET}@127.0.0.1:9/x",
                 f"pushover={user_key}", f"ntfy={ntfy.url}/topic-{SECRET}")
        feed = Feed(server, run)
        with follow(run.path, env, *sinks) as f:
            f.synced(feed.last_step)
            f.synced(feed.grow(5))
            with server._lock:                                 # the run dies
                run.state = "crashed"
                run._touch()
            f.said("alert (")
            f.until(lambda: len(hook.posts) >= 3 and push.messages and ntfy.messages and
                    sum("not delivered" in line for line in f.lines) >= 6, "a failed try on every sink")
            assert f.stop() in (0, 130), f.err[-2000:]
    (row,) = listed(env)
    assert (row["kind"], row["cause_class"], row["severity"]) == ("crashed", "infrastructure", "high"), row
    assert row["step"] == feed.last_step and "crashed" in row["title"], row
    assert row["delivered"] is False and len(row["deliveries"]) == len(sinks), row
    errors = [d["last_error"] for d in row["deliveries"]]
    assert all(errors) and any("HTTP 500" in e for e in errors) and any("cannot connect" in e for e in errors)
    assert any("HTTP 400" in e for e in errors) and any("HTTP 403" in e for e in errors), errors   # Pushover, ntfy
    stored = [marinctl(env, "sql", f"SELECT * FROM {t}", "--json").stdout for t in ("alerts", "alert_deliveries")]
    shown = marinctl(env, "alerts").stdout
    for text, where in [(f.err, "stderr"), (json.dumps(row), "alerts --json"), (shown, "alerts"),
                        *((s, "the store") for s in stored)]:
        assert SECRET not in text and SECRET.replace("-", "")[:20] not in text, where
    assert strict_json(stored[1]) and "answered HTTP" in stored[1]     # the sql read worked: the check checked
    assert "slack (127.0.0.1:" in f.err and "pushover (127.0.0.1:" in f.err and "ntfy (127.0.0.1:" in f.err
