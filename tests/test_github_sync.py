"""GitHub → events: cheap re-syncs, rate-limit stop and resume, step alignment, CLI output.

Every issue, comment, commit and logbook text here is the tests' own; the hero lineage is
SYNTHETIC (two forked runs with a `_timestamp` series), built through the store API.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pyarrow as pa
import pytest

from marinctl.domain import RunInfo
from marinctl.errors import RuntimeFailure, UserError
from marinctl.sources.github import GitHubClient
from marinctl.sources.github_events import parse_spec
from marinctl.store import metrics as M
from marinctl.store.runs import refresh_last_step, upsert_run
from marinctl.sync.github import sync_github
from marinctl.sync.targets import MARIN_GITHUB

REPO = "acme/hero"
T0 = datetime(2026, 8, 20, 0, 0, tzinfo=timezone.utc)
ROOT, CHILD = "hero-synth-root", "hero-synth-child-step1k"  # SYNTHETIC run ids


def iso(dt: datetime) -> str:
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


def at_step(step: int, extra_s: float = 0.0) -> datetime:
    """Wall time of a synthetic step: 20 s/step, the child relaunched 600 s after the fork."""
    return T0 + timedelta(seconds=20 * step + (600 if step > 1000 else 0) + extra_s)


def build_lineage(store) -> None:
    """Root logs steps 0..2000, child forks at 1000 and logs 1001..3000 (SYNTHETIC)."""
    def batch(steps):
        ts = [at_step(s).timestamp() for s in steps]
        loss = [3.0 - s / 2000 for s in steps]
        return pa.table({"step": pa.array(steps * 2, pa.int64()),
                         "key": pa.array(["_timestamp"] * len(steps) + ["train/loss"] * len(steps)),
                         "value": pa.array(ts + loss, pa.float64())})
    with store.transaction() as con:
        root = upsert_run(con, RunInfo(source="wandb", run_id=ROOT, entity="e", project="p", group="moe-hero-ep",
                                       name="hero synthetic root", created_at=T0))
        child = upsert_run(con, RunInfo(source="wandb", run_id=CHILD, entity="e", project="p", group="moe-hero-ep",
                                        created_at=at_step(1001), fork_parent=ROOT, fork_step=1000))
        M.replace_range(con, root, batch(list(range(0, 2001))), 0, 2001)
        M.replace_range(con, child, batch(list(range(1001, 3001))), 1001, 3001)
        refresh_last_step(con, root)
        refresh_last_step(con, child)


@pytest.fixture
def gh(monkeypatch, github_server):
    monkeypatch.setenv("MARINCTL_GITHUB_MAX_WAIT", "2")
    return github_server()


def _events(store):
    with store.connect() as con:
        rows = con.execute("SELECT event_id, kind, step, r.run_id, fields, title FROM events e"
                           " LEFT JOIN runs r ON r.uid = e.run_uid ORDER BY time, event_id").fetchall()
    return [dict(id=r[0], kind=r[1], step=r[2], run=r[3], fields=json.loads(r[4]) if r[4] else {}, title=r[5]) for r in rows]


def test_specs_parse_and_bad_specs_are_user_errors():
    assert parse_spec("github:marin-community/marin#8435").number == 8435
    s = parse_spec("github:marin-community/marin/.agents/logbooks/7279-moe-hero-ep.md")
    assert s.path == ".agents/logbooks/7279-moe-hero-ep.md" and not s.is_dir
    assert parse_spec("github:o/r/experiments/grug/").is_dir
    assert parse_spec("github:o/r?label=hero-run").label == "hero-run"
    for bad in ("github:marin", "github:o/r", "github:o/r#x", "github:o/r/../etc", "github:/r#1"):
        with pytest.raises(UserError):
            parse_spec(bad)
    assert all(parse_spec(s) for s in MARIN_GITHUB)


def test_resync_of_unchanged_issue_downloads_nothing(gh, store):
    gh.add_issue(REPO, 1, "Hero status (synthetic)", "tracking")
    for i in range(150):
        gh.add_comment(REPO, 1, f"update {i}", created_at=iso(T0 + timedelta(minutes=i)))
    assert sync_github(store, f"github:{REPO}#1") == 151
    gh.reset_counters()
    assert sync_github(store, f"github:{REPO}#1") == 0
    assert gh.statuses() == [304, 304, 304]   # issue, comments page 1, page 2
    assert gh.body_bytes == 0
    # One new comment: only the page that changed is downloaded.
    gh.add_comment(REPO, 1, "update new", created_at=iso(T0 + timedelta(days=1)))
    gh.reset_counters()
    assert sync_github(store, f"github:{REPO}#1") == 2  # the comment, and the issue (its comment count changed)
    assert gh.statuses() == [200, 304, 200]
    ids = [e["id"] for e in _events(store)]
    assert len(ids) == len(set(ids)) == 152


def test_full_last_page_is_probed_for_growth(gh, store):
    gh.add_issue(REPO, 2, "t", "b")
    for i in range(100):
        gh.add_comment(REPO, 2, f"c{i}", created_at=iso(T0 + timedelta(minutes=i)))
    sync_github(store, f"github:{REPO}#2")
    gh.add_comment(REPO, 2, "c100", created_at=iso(T0 + timedelta(days=2)))
    sync_github(store, f"github:{REPO}#2")
    assert sum(e["kind"] == "comment" for e in _events(store)) == 101


def test_rate_limit_stop_then_resume_without_gaps_or_duplicates(gh, store, cli, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_TOKEN_must_not_leak")
    gh.add_issue(REPO, 3, "long thread", "b")
    for i in range(250):
        gh.add_comment(REPO, 3, f"note {i}", created_at=iso(T0 + timedelta(minutes=i)))
    gh.remaining = 2  # the issue and the first comments page, then the limit is spent for an hour
    gh.reset_at = int(datetime.now(timezone.utc).timestamp()) + 3600
    code, out, err = cli("sync", f"github:{REPO}#3")
    assert code == 1
    assert "rate limit" in err and "resets at" in err and "try: run the same `marinctl sync` again after" in err
    assert "Traceback" not in err
    assert sum(e["kind"] == "comment" for e in _events(store_of_cli())) == 100
    # The limit resets; the next sync resumes: 304s for what it has, then the rest.
    gh.remaining = 5000
    gh.reset_counters()
    code, out, err = cli("sync", f"github:{REPO}#3", "--json")
    assert code == 0, err
    assert json.loads(out)["events_added"] == 150
    assert gh.statuses() == [304, 304, 200, 200]
    events = _events(store_of_cli())
    bodies = sorted(int(e["title"].split()[-1]) for e in events if e["kind"] == "comment")
    assert bodies == list(range(250))  # no gaps, no duplicates
    assert set(gh.auth_headers) == {"Bearer ghp_TOKEN_must_not_leak"}
    with store_of_cli().connect() as con:  # the token is never stored
        for table in ("sync_state", "events", "runs"):
            for row in con.execute(f"SELECT * FROM {table}").fetchall():
                assert not any("TOKEN_must_not_leak" in str(v) for v in row)


def store_of_cli():
    from marinctl.store import open_store

    return open_store()


def test_short_secondary_limit_is_waited_out_during_sync(gh, store):
    gh.add_issue(REPO, 4, "t", "b")
    gh.queue_secondary(429, retry_after=1)
    with GitHubClient(max_wait=5) as client:
        assert sync_github(store, f"github:{REPO}#4", client=client) == 1
        assert client.waited == pytest.approx(1.0)


def test_label_lists_file_commits_and_logbook(gh, store):
    gh.add_issue(REPO, 10, "[Hero run] synthetic", "key facts", labels=("hero-run", "pre-training"))
    gh.add_comment(REPO, 10, "relaunched", created_at=iso(T0))
    gh.add_issue(REPO, 11, "other", "x", labels=("experiment",))
    logbook = (
        "---\ntopic: t\nauthor: rav\n---\n\n# Logbook\n\n## Scope\n\n- goal\n\n## Entry Log\n\n"
        "### 2026-08-20 00:20 UTC - Base selected\n\n- Commit Hash: `abc1234`.\n\n"
        "### 2026-08-20 06:00 UTC - Loss spike at step 1,500\n\n- Result: recovered.\n\n"
        "### 2026-08-21 - Relaunch\n\n- resumed from gs://bucket/hero/checkpoints/step-2000\n"
    )
    gh.set_file(REPO, ".agents/logbooks/hero.md", logbook)
    gh.add_commit(REPO, "d" * 40, "logbook: entries", paths=(".agents/logbooks/hero.md",), date=iso(T0))
    gh.add_commit(REPO, "e" * 40, "both", paths=(".agents/logbooks/hero.md", "exp/x.py"), date=iso(T0 + timedelta(hours=1)))

    assert sync_github(store, f"github:{REPO}?label=hero-run") == 2
    assert sync_github(store, f"github:{REPO}/.agents/logbooks/hero.md") == 2 + 3
    assert sync_github(store, f"github:{REPO}/exp/") == 1  # commit e gains a path, not a duplicate
    events = _events(store)
    kinds = sorted(e["kind"] for e in events)
    assert kinds == ["comment", "commit", "commit", "issue", "logbook", "logbook", "logbook"]
    logs = [e for e in events if e["kind"] == "logbook"]
    assert [e["title"] for e in logs] == ["Base selected", "Loss spike at step 1,500", "Relaunch"]
    both = next(e for e in events if e["id"].endswith("e" * 40))
    assert both["fields"]["paths"] == [".agents/logbooks/hero.md", "exp/"]
    with store.connect() as con:
        assert con.execute("SELECT content FROM repo_files WHERE path = '.agents/logbooks/hero.md'").fetchone()[0] == logbook
    # Unchanged file and lists: a re-sync downloads nothing.
    gh.reset_counters()
    assert sync_github(store, f"github:{REPO}/.agents/logbooks/hero.md") == 0
    assert sync_github(store, f"github:{REPO}?label=hero-run") == 0
    assert gh.body_bytes == 0 and set(gh.statuses()) == {304}


def test_events_line_up_with_the_right_steps_on_a_synthetic_hero_lineage(gh, store, cli):
    build_lineage(store)
    gh.add_issue(REPO, 20, "Hero status (synthetic)", "bot posts here", created_at=iso(T0 - timedelta(days=1)))
    status = (
        "🤖 relaunch\n\n- **HEAD SHA**: `0123abcd4567`\n- **Coordinator job**: `/rav/hero-coord-7`\n"
        f"- **W&B fork point**: `{ROOT}?_step=1000`\n- **Handoff checkpoint**: `gs://b/hero/checkpoints/step-1000`\n"
    )
    gh.add_comment(REPO, 20, status, created_at=iso(at_step(1001, 30)))
    gh.add_comment(REPO, 20, "Loss spike around step 1,500, recovering", created_at=iso(at_step(1600)))
    gh.add_comment(REPO, 20, "lr change landed at step 1.2k", created_at=iso(at_step(1300)))
    gh.add_comment(REPO, 20, "all quiet, no numbers here", created_at=iso(at_step(500, 5)))
    gh.add_comment(REPO, 20, "still quiet on the new run", created_at=iso(at_step(2500, 3)))
    gh.add_comment(REPO, 20, "resumed from gs://b/hero/checkpoints/step-2000 after a node loss",
                   created_at=iso(at_step(2600)))
    gh.add_comment(REPO, 20, f"see https://wandb.ai/e/p/runs/{ROOT} for the early curve", created_at=iso(at_step(700)))
    gh.add_comment(REPO, 20, "planning, long before launch", created_at=iso(T0 - timedelta(hours=5)))
    sync_github(store, f"github:{REPO}#20")

    by_title = {e["title"].split(": ", 1)[1]: e for e in _events(store) if e["kind"] == "comment"}
    fork = by_title["🤖 relaunch"]
    assert (fork["run"], fork["step"], fork["fields"]["align"]) == (CHILD, 1000, "fork")
    assert fork["fields"]["facts"]["status"] == {
        "sha": "0123abcd4567", "coordinator_job": "/rav/hero-coord-7",
        "fork_point": f"{ROOT}?_step=1000", "checkpoint": "gs://b/hero/checkpoints/step-1000"}
    assert fork["fields"]["facts"]["checkpoint_step"] == 1000
    spike = by_title["Loss spike around step 1,500, recovering"]
    assert (spike["run"], spike["step"], spike["fields"]["align"]) == (CHILD, 1500, "text")
    assert by_title["lr change landed at step 1.2k"]["step"] == 1200
    quiet = by_title["all quiet, no numbers here"]
    assert (quiet["run"], quiet["step"], quiet["fields"]["align"]) == (ROOT, 500, "time")
    late = by_title["still quiet on the new run"]
    assert (late["run"], late["step"]) == (CHILD, 2500)
    resumed = by_title["resumed from gs://b/hero/checkpoints/step-2000 after a node loss"]
    assert (resumed["run"], resumed["step"], resumed["fields"]["align"]) == (CHILD, 2000, "checkpoint")
    named = by_title[f"see https://wandb.ai/e/p/runs/{ROOT} for the early curve"]
    assert (named["run"], named["step"], named["fields"]["align"]) == (ROOT, 700, "time")
    early = by_title["planning, long before launch"]
    assert early["step"] is None and early["run"] is None

    db = ("--db", str(store.path))
    code, out, err = cli(*db, "events", "--around", "1500", "--window", "300", "--json")
    assert code == 0, err
    got = json.loads(out)
    assert [(e["step"], e["run"]) for e in got] == [(1200, CHILD), (1500, CHILD)]
    assert set(got[0]) >= {"time", "kind", "title", "url", "run", "step", "source"}
    code, out, _ = cli(*db, "events", "--run", ROOT, "--json")
    assert sorted(e["step"] for e in json.loads(out)) == [500, 700]
    code, out, _ = cli(*db, "events", "--run", "hero")
    assert code == 0 and "1,500" in out and "500~" in out  # time-aligned steps are marked ~


def test_events_synced_before_history_align_once_runs_arrive(gh, store):
    gh.add_issue(REPO, 21, "t", "b", created_at=iso(T0 - timedelta(days=1)))
    gh.add_comment(REPO, 21, "quiet", created_at=iso(at_step(400)))
    sync_github(store, f"github:{REPO}#21")
    assert [e["step"] for e in _events(store) if e["kind"] == "comment"] == [None]
    build_lineage(store)
    sync_github(store, f"github:{REPO}#21")  # all 304s, but alignment runs again
    assert [e["step"] for e in _events(store) if e["kind"] == "comment"] == [400]


HOSTILE = ("evil \x1b]8;;https://x.example/\x1b\\link\x1b]8;;\x1b\\ \x1b]52;c;cHduZWQ=\x07"
           "\x1b[2J\x9b31m \u202egnp.exe\u2066 [bold red]markup[/] \x1bP+q\x1b\\ end")


def test_hostile_titles_print_inert_through_the_cli(gh, store, cli):
    gh.add_issue(REPO, 30, HOSTILE, HOSTILE, user="mallory")
    gh.add_comment(REPO, 30, HOSTILE, created_at=iso(T0))
    code, _, err = cli("sync", f"github:{REPO}#30")
    assert code == 0, err
    from marinctl.store import open_store

    with open_store().transaction() as con:
        upsert_run(con, RunInfo(source="wandb", run_id="r-hostile", entity="e", project="p", name=HOSTILE, group=HOSTILE))
    for args in (("events",), ("events", "--json"), ("runs",), ("runs", "--json")):
        code, out, err = cli(*args)
        assert code == 0, err
        assert "\x1b" not in out and "\x9b" not in out and "\x07" not in out
        assert not any(c in out for c in "\u202e\u2066")
        if "--json" not in args:   # the words a person can read stay, markup shown as typed, not applied
            assert "evil link gnp.exe [bold red]markup[/] end" in out, out


def test_malformed_spec_exits_2(cli):
    code, out, err = cli("sync", "github:nope")
    assert code == 2 and "not a GitHub target" in err


def test_network_down_exits_1(cli, monkeypatch):
    monkeypatch.setenv("GITHUB_API_URL", "http://127.0.0.1:9")
    monkeypatch.setattr("marinctl.sources.github.GitHubClient._backoff", lambda self, attempt, asked=None, failure="": None)
    code, out, err = cli("sync", "github:acme/hero#1")
    assert code == 1 and "kept failing" in err


def test_runtime_failure_is_the_stop_type():
    from marinctl.sources.github import RateLimitStop

    assert issubclass(RateLimitStop, RuntimeFailure)


def test_alignment_on_the_shared_synthetic_hero_generator(gh, store):
    """The same checks on tests/fakes/synth.py's SYNTHETIC hero chain (forks at 2·seg, 3·seg, parents overrun)."""
    import numpy as np

    from tests.fakes.load import load_into_store
    from tests.fakes.synth import HERO_IDS, hero_lineage

    seg = 100
    runs = hero_lineage(steps_per_segment=seg, layers=1, experts=2, norm_every=50, eval_every=100)
    load_into_store(store, runs)
    root, mid, leaf = runs

    def time_of(run, step):
        s, v = run.series["_timestamp"]
        return datetime.fromtimestamp(float(v[np.searchsorted(s, step)]), timezone.utc)

    gh.add_issue(REPO, 40, "Hero Run / Ongoing Status (synthetic)", "-", created_at=iso(time_of(root, 0) - timedelta(days=1)))
    gh.add_comment(REPO, 40, f"🤖 relaunch\n- W&B fork point: {HERO_IDS[1]}?_step={3 * seg}\n", created_at=iso(time_of(leaf, 3 * seg + 1)))
    gh.add_comment(REPO, 40, f"router bias drift visible from step {2 * seg + 50}", created_at=iso(time_of(mid, 2 * seg + 60)))
    gh.add_comment(REPO, 40, "quiet night", created_at=iso(time_of(leaf, 3 * seg + 40) + timedelta(seconds=1)))
    gh.add_comment(REPO, 40, "quiet morning", created_at=iso(time_of(root, 50) + timedelta(seconds=1)))
    sync_github(store, f"github:{REPO}#40")
    got = {e["title"].split(": ", 1)[1]: (e["run"], e["step"], e["fields"].get("align"))
           for e in _events(store) if e["kind"] == "comment"}
    assert got["🤖 relaunch"] == (HERO_IDS[2], 3 * seg, "fork")
    assert got[f"router bias drift visible from step {2 * seg + 50}"] == (HERO_IDS[1], 2 * seg + 50, "text")
    assert got["quiet night"] == (HERO_IDS[2], 3 * seg + 40, "time")
    assert got["quiet morning"] == (HERO_IDS[0], 50, "time")


def test_min_interval_skips_the_network(gh, store):
    gh.add_issue(REPO, 50, "t", "b")
    assert sync_github(store, f"github:{REPO}#50") == 1
    gh.reset_counters()
    assert sync_github(store, f"github:{REPO}#50", min_interval=300) == 0
    assert gh.requests == []
    sync_github(store, f"github:{REPO}#50", min_interval=0)
    assert gh.statuses() == [304, 304]
