"""On call, one layer down: the preset as shipped and as the README shows it, the rule file's new
settings and their mistakes, sinks' minimum levels. The follow itself is tests/test_oncall_*.py's."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from marinctl.analysis.alerts import presets
from marinctl.analysis.alerts import priority as P
from marinctl.analysis.alerts import rules as R
from marinctl.errors import UserError
from marinctl.sync import sinks

README = Path(__file__).resolve().parent.parent / "README.md"


def _readme_table() -> list[list[str]]:
    text = README.read_text()
    head = "| rule | key | threshold | priority | source in Marin's monitor |"
    assert head in text, "README.md has no marin-hero table"
    lines = text.split(head, 1)[1].strip().splitlines()[1:]
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip("|").split("|")])
    return rows


def test_the_readme_table_is_the_preset_as_shipped():
    rules = presets.rules("marin-hero").rules
    rows = _readme_table()
    assert [r[0] for r in rows] == [r.name for r in rules]
    for row, rule in zip(rows, rules):
        name, key, threshold, level, source = row
        assert key == (f"`{rule.metric}`" if rule.metric else "(the run)"), name
        assert level == rule.priority, name
        fire = re.search(r'fire\("(\w+)"\)', rule.source).group(1)
        assert f'fire("{fire}")' in source and rule.source.split(":")[0] in source, name
        bars = [v for v in (rule.above, rule.below, rule.after, rule.absolute if rule.absolute else None, rule.z)
                if v is not None]
        for bar in bars:
            shown = {2e6: "2e6", -400.0: "−400"}.get(bar, f"{bar:g}")
            assert shown in threshold or f"{bar:.1f}" in threshold or f"{int(bar)}" in threshold, (name, bar, threshold)


def test_show_prints_the_preset_file_and_it_reads_back_as_its_rules(cli):
    code, out, err = cli("alerts", "--preset", "marin-hero", "--show")
    assert code == 0 and err == "" and out == presets.text("marin-hero")
    assert R.parse(out).rules == presets.rules("marin-hero").rules
    assert len(presets.rules("marin-hero").rules) == 15


def test_a_rule_file_naming_the_preset_adds_its_rules_and_a_clash_is_exit_2():
    got = R.parse('preset = "marin-hero"\n[[rule]]\nname = "mine"\nmetric = "m"\nkind = "threshold"\nabove = 1\n')
    assert [r.name for r in got.rules][:1] == ["mine"] and len(got.rules) == 16 and got.presets == ("marin-hero",)
    with pytest.raises(UserError, match="also a rule of preset"):
        R.parse('preset = "marin-hero"\n[[rule]]\nname = "hero slow"\nmetric = "m"\nkind = "threshold"\nabove = 1\n')
    with pytest.raises(UserError, match="no alert preset named 'nope'"):
        R.parse('preset = "nope"\n')


@pytest.mark.parametrize("text, says", [
    ("kind = 'silent'\n", "needs after = SECONDS"),
    ("kind = 'stalled'\nafter = 60\nmetric = 'train/loss'\n", "watches the run, not a metric"),
    ("kind = 'nonfinite'\nmetric = 'm'\nwindow = 3\n", "window does not apply to a nonfinite rule"),
    ("kind = 'change'\nmetric = 'm'\nabsolute = 0\n", "absolute = 0 only with direction up or down"),
    ("kind = 'threshold'\nmetric = 'm'\nabove = 1\npriority = 'urgent'\n", "priority must be one of"),
    ("kind = 'zscore'\nmetric = 'm'\nmin_rise = -1\n", "min_rise not negative"),
    ("kind = 'threshold'\nmetric = 'm'\nabove = 1\ncause_class = 'gremlins'\n", "cause_class must be one of"),
])
def test_new_rule_settings_are_checked(text, says):
    with pytest.raises(UserError, match=re.escape(says)):
        R.parse(f"[[rule]]\nname = 'x'\n{text}")


def test_priority_and_severity_each_give_the_other():
    (a, b, c) = R.parse("[[rule]]\nname = 'a'\nmetric = 'm'\nkind = 'nonfinite'\npriority = 'emergency'\n"
                        "[[rule]]\nname = 'b'\nmetric = 'm'\nkind = 'nonfinite'\nseverity = 'low'\n"
                        "[[rule]]\nname = 'c'\nmetric = 'm'\nkind = 'nonfinite'\n").rules
    assert (a.severity, b.priority, c.priority, c.severity) == ("high", "low", "normal", "medium")
    assert P.of({"priority": None, "severity": "medium"}) == "normal"      # an alert fired before priorities


def test_a_sink_takes_its_level_and_up():
    slack = sinks.parse("slack@high=https://hooks.slack.example/T/B/C")
    assert [slack.takes({"priority": p}) for p in P.LEVELS] == [False, False, True, True]
    assert sinks.parse("desktop").min_level == "low" and sinks.parse("exec@normal=cat").min_level == "normal"
    assert sinks.parse("slack@high=https://x.example/a").id == sinks.parse("slack=https://x.example/a").id
