"""Alert pieces one layer down: episodes of a condition, the rule file, sink shapes.

The CLI tests (test_alerts_follow.py) hold the behaviour end to end; these pin the edges that
are slow or awkward to reach there: an episode primed at the baseline, a hung exec command, a
terminal's notification escape, credentials inside URLs. All data here is SYNTHETIC.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from marinctl.analysis.alerts import rules as alert_rules
from marinctl.analysis.alerts.conditions import Track, nonfinite_test, rule_test
from marinctl.errors import UserError
from marinctl.sync import sinks


def _rule(**kw) -> alert_rules.Rule:
    base = {"name": "synthetic", "metric": "synthetic/x", "kind": "threshold", "window": 2, "above": 5.0}
    return alert_rules.Rule(**{**base, **kw})


def test_rows_in_a_row_are_one_episode_and_a_later_run_of_rows_another():
    rule = _rule()
    track = Track(keep=rule.rows_needed)
    steps = np.arange(20)
    values = np.where(((steps >= 5) & (steps <= 8)) | (steps >= 14), 9.0, 1.0)
    got = track.advance(steps[:10], values[:10], rule_test(rule))
    got += track.advance(steps, values, rule_test(rule))              # rows already judged are not judged again
    assert [(e.start, e.end) for e in got] == [(6, 8), (15, 19)]       # mean of 2 rows > 5 from the 2nd row on


def test_an_episode_under_way_at_the_baseline_never_fires():
    rule = _rule()
    track = Track(keep=rule.rows_needed)
    steps, values = np.arange(10), np.full(10, 9.0)
    track.prime(steps, values, rule_test(rule))
    assert track.advance(np.arange(10, 15), np.full(5, 9.0), rule_test(rule)) == []
    assert track.advance(np.arange(15, 20), np.r_[1.0, 1.0, 9.0, 9.0, 9.0], rule_test(rule))[0].start == 18


def test_nan_rows_are_one_episode_per_run_of_rows():
    track = Track(keep=0, finite_only=False)
    steps = np.arange(10)
    values = np.array([1, math.nan, math.inf, 1, 1, math.nan, 1, 1, 1, 1], dtype=float)
    assert [e.start for e in track.advance(steps, values, nonfinite_test)] == [1, 5]


@pytest.mark.parametrize("kind, extra, series, fires_at", [
    ("change", {"relative": 0.5, "direction": "up", "window": 3}, [10.0] * 6 + [20.0] * 6, 7),
    ("change", {"absolute": 4.0, "direction": "down", "window": 3}, [10.0] * 6 + [20.0] * 6, None),
    ("zscore", {"z": 6.0, "window": 5}, [1.0, 1.1, 0.9, 1.0, 1.05, 1.0, 30.0, 1.0], 6),
    ("threshold", {"below": 0.5, "above": None, "stat": "min", "window": 3}, [1.0, 1.0, 1.0, 0.1, 1.0], 3),
])
def test_each_rule_kind_judges_its_window(kind, extra, series, fires_at):
    rule = _rule(kind=kind, **{"above": None, **extra})
    got = Track(keep=rule.rows_needed).advance(np.arange(len(series)), np.array(series), rule_test(rule))
    assert [e.start for e in got] == ([] if fires_at is None else [fires_at])


def test_a_rule_selects_runs_by_glob_over_id_name_or_uid():
    rule = _rule(runs=("hero-*", "*/ladder/*"))
    assert rule.selects({"run_id": "hero-x", "uid": "e/p/hero-x"})
    assert rule.selects({"run_id": "r1", "uid": "e/ladder/r1"})
    assert not rule.selects({"run_id": "synthetic-other", "name": "other", "uid": "e/p/synthetic-other"})


def test_liveness_settings_and_defaults():
    assert alert_rules.parse("[liveness]\nstale_after = 90\n").stale_after == 90.0
    with pytest.raises(UserError, match="stale_after"):
        alert_rules.parse("[liveness]\nstale_after = -1\n")
    rules = alert_rules.parse("[[rule]]\nname = 'z'\nmetric = 'm'\nkind = 'zscore'\n").rules
    assert rules[0].z == 3.0 and rules[0].window == 100 and rules[0].severity == "medium"


# --- sinks -------------------------------------------------------------------------------------------

HOSTILE = "synthetic\x1b]0;pwned\x07 name; \x9b2J <b>bold</b> \u202e"


def test_the_terminal_escape_carries_no_control_from_the_text():
    for term in ("xterm-256color", "foot"):
        esc = sinks.osc_notification(HOSTILE, HOSTILE, term=term)
        assert esc.startswith("\x1b]") and esc.endswith("\x07")
        inner = esc[2:-1]
        assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f or c == "\u202e" for c in inner), repr(esc)
    assert sinks.osc_notification("a;b", "c;d", term="foot") == "\x1b]777;notify;a,b;c,d\x07"


def test_credentials_in_urls_and_known_secrets_are_scrubbed():
    text = "see https://user:synthpass@host.example/x?token=synthtok&a=1 and SYNTH-SECRET-123"
    out = sinks.scrub(text, ["SYNTH-SECRET-123"])
    assert "synthpass" not in out and "synthtok" not in out and "SYNTH-SECRET-123" not in out and "a=1" in out


def test_a_hung_exec_command_is_one_failed_try_within_its_bound(tmp_path):
    marker = tmp_path / "child-alive"
    alert = {"run_id": "synthetic-x", "run_uid": "local:synthetic-x", "step": 3, "metric": "m", "cause_class": "numerics",
             "severity": "high", "title": "t", "summary": None, "command": "marinctl explain step 3 --run synthetic-x",
             "kind": "nonfinite", "episode_start": 3, "episode_end": 3, "alert_id": 1, "fired_at": None}
    err = sinks.send(sinks.Sink("exec", f"sleep 30; touch {marker}"), alert, hidden=(), timeout=0.5)
    assert err and "did not finish within 0.5 s" in err
    assert not marker.exists()    # the shell's child was killed with it, not left behind


@pytest.mark.parametrize("spec", ["desktop", "webhook=http://127.0.0.1:1/x", "slack=https://hooks.slack.example/T/B/C",
                                  "discord=https://discord.example/api/webhooks/1/x", "exec=cat > /dev/null"])
def test_every_sink_kind_parses(spec):
    assert sinks.parse(spec).kind == spec.split("=")[0]


def test_the_readme_rule_file_reads_as_written():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    block = re.search(r"```toml\n(# <home>/alerts.toml\n.*?)```", text, re.S)
    assert block, "README.md has no alerts.toml example"
    got = alert_rules.parse(block.group(1))
    assert [r.kind for r in got.rules] == ["threshold", "change", "zscore"] and got.stale_after == 600
