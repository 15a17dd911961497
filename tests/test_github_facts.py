"""What marinctl reads out of GitHub prose (the tests' own sentences in Marin's style)."""

from __future__ import annotations

import pytest

from marinctl.analysis.events.facts import extract_facts, parse_count
from marinctl.sources.github_events import logbook_events


@pytest.mark.parametrize("raw,value", [("54k", 54_000), ("1.5k", 1_500), ("81,716", 81_716), ("81716", 81_716), ("108K", 108_000)])
def test_parse_count(raw, value):
    assert parse_count(raw) == value


@pytest.mark.parametrize("text,steps", [
    ("loss spike at step 54k", [54_000]),
    ("Loss ~1.23 at step 81,716.", [81_716]),
    ("step=81716 and steps 100", [81_716, 100]),
    ("at step ~3000, then step: 3100", [3_000, 3_100]),
    ("new run hero-wd-gate-router-p02-step54k", None),        # a run id, not a step mention
    ("gs://b/checkpoints/step-81716", None),                    # a checkpoint, reported separately
    ("stepped up the lr at 5", None),
])
def test_step_mentions(text, steps):
    assert extract_facts(text).get("steps") == steps


def test_fork_from_checkpoint_urls_and_known_runs():
    text = ('Launched hero-ragged_a2a-ep-step81k with fork_from="hero-wd-gate-router-p02-step54k?_step=81716", '
            "resumed from `gs://marin/hero/checkpoints/step-81716`; see "
            "https://wandb.ai/marin-community/marin_moe/runs/hero-ragged_a2a-ep-step81k")
    facts = extract_facts(text, ["hero-wd-gate-router-p02-step54k", "hero-ragged_a2a-ep-step81k", "hero-12d8b6f0-dee637"])
    assert facts["fork_parent"] == "hero-wd-gate-router-p02-step54k" and facts["fork_step"] == 81_716
    assert facts["checkpoint_step"] == 81_716 and facts["checkpoint"] == "gs://marin/hero/checkpoints/step-81716"
    assert facts["resumed"] is True
    assert facts["runs"] == ["hero-ragged_a2a-ep-step81k", "hero-wd-gate-router-p02-step54k"]  # child first, parent last


def test_status_bot_table_rows():
    text = ("| field | value |\n|---|---|\n| HEAD SHA | `9f8e7d6c5b4a` |\n| Coordinator job | /rav/hero-coord |\n"
            "| W&B fork point | hero-a?_step=120 |\n| Handoff checkpoint | s3://b/step-120 |\n")
    facts = extract_facts(text)
    assert facts["status"]["sha"] == "9f8e7d6c5b4a"
    assert facts["status"]["coordinator_job"] == "/rav/hero-coord"
    assert (facts["fork_parent"], facts["fork_step"], facts["checkpoint_step"]) == ("hero-a", 120, 120)


def test_logbook_entries_have_stable_ids_and_utc_times():
    text = ("## Entry Log\n\n### 2026-08-01 20:39 UTC - Base selected\n\n- a\n\n"
            "### 2026-08-01 22:32 UTC - Wait unchanged\n\n- b\n\n### 2026-08-01 22:32 UTC - Wait unchanged\n\n- c\n"
            "## Other section\n\nnot part of the last entry\n")
    first = list(logbook_events("o/r", "l.md", text, "https://github.com/o/r/blob/main/l.md"))
    again = list(logbook_events("o/r", "l.md", text + "\n### 2026-08-02 01:00 UTC - Later\n", None))
    assert [e.event_id for e in first] == [e.event_id for e in again][:3]
    assert len({e.event_id for e in first}) == 3
    assert first[0].time.isoformat() == "2026-08-01T20:39:00+00:00"
    assert first[2].body == "- c"
    assert first[0].url.endswith("#2026-08-01-2039-utc---base-selected")
