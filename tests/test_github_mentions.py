"""The GitHub timeline puts a comment at the step its text names and forgets
comments deleted upstream.

A SYNTHETIC hero-group run (3,000 steps with `_timestamp`) comes from the W&B fake; comments on a
fake GitHub issue name steps in the ways people write them — capitalised, at the start of a
sentence, `k`/`M` suffixes with decimals, thousands separators, ranges, checkpoint paths — and
each is posted at a time that lies hundreds of steps away from the step it names. Through
`marinctl sync github:…` and `events --json`, the text must win over the time whenever it names
a step. All texts are the tests' own.
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pytest

from tests.blackbox import cli_json, run_cli, start_wandb

E, P, RUN = "synthetic-lab", "mentions-synthetic", "hero-mentions-synthetic"
REPO = "synthetic-lab/hero"

# (comment text, steps it names: any of them is right for a range)
PHRASES = [
    ("Step 1500: loss spike", {1500}),
    ("STEP 1,600 shows a blip in grad norm", {1600}),
    ("loss spiked at step 1.7k", {1700}),
    ("around step 1.25k the norms jump", {1250}),
    ("we restarted at step 0.0019M after the preemption", {1900}),
    ("saw it again at step 2,050.", {2050}),
    ("Steps 1200-1300 look odd", {1200, 1300}),
    ("steps 1,400–1,450 had slow throughput", {1400, 1450}),
    ("resumed from gs://synthetic/hero/checkpoints/step-2200", {2200}),
    ("checkpoint step-2300 saved, all good", {2300}),
    ("Step=2400 eval done", {2400}),
    ("odd at step #2500, looking", {2500}),
    ("Step 2.6k: warm-up long over", {2600}),
    ("(step 900) quick note on the router", {900}),
    ("Loss at Step 950.", {950}),
    ("step 1.05k has a tiny spike", {1050}),
    ("STEPS 700 to 800 look flat", {700, 800}),
    ("Step ~2800 looks fine", {2800}),
    ("See step 600; all good", {600}),
    ("Step 1k was odd", {1000}),
    ("Step 0.8k: first eval", {800}),
    ("Hero at step 2,999!", {2999}),
]


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def timeline(tmp_path_factory):
    """Sync the run and the issue once; returns {comment text: its event} from `events --json`."""
    from marinctl.cli import main  # the entry point, as the `cli` fixture runs it

    from tests.fakes.github_server import FakeGitHub
    from tests.fakes.synth import HERO_GROUP, marin_run

    run = marin_run(RUN, steps=3000, entity=E, project=P, group=HERO_GROUP, layers=1, experts=2, norm_every=1000,
                    eval_every=1000)
    for key in [k for k in run.series if k not in ("_timestamp", "_runtime", "train/loss")]:
        run.drop_key(key)
    steps, stamps = run.series["_timestamp"]
    at = lambda step: float(stamps[np.searchsorted(steps, step)]) + 1.0   # noqa: E731
    home = tmp_path_factory.mktemp("mentions-home")
    server = start_wandb([run])
    with FakeGitHub() as gh:
        gh.add_issue(REPO, 1, "Hero status (synthetic)", "tracking", created_at=iso(at(0) - 86400))
        for i, (text, named) in enumerate(PHRASES):
            far = (min(named) + 1000 + 37 * i) % 3000            # posted ~1000 steps away from what it names
            gh.add_comment(REPO, 1, text, created_at=iso(at(far)))
        env = {"WANDB_BASE_URL": server.url, "GITHUB_API_URL": gh.url}
        mp = pytest.MonkeyPatch()
        try:
            for k, v in env.items():
                mp.setenv(k, v)
            for args in (["sync", f"{E}/{P}/{RUN}"], ["sync", f"github:{REPO}#1"]):
                try:
                    main(["--home", str(home), *args])
                except SystemExit as exc:
                    assert not exc.code, f"marinctl {' '.join(args)} exited {exc.code}"
        finally:
            mp.undo()
            server.stop()
    return home


@pytest.fixture
def events(cli, timeline):
    items = cli_json(lambda *a: cli("--home", str(timeline), *a), "events", "--json")
    return {text: next((e for e in items if e["kind"] == "comment" and (e["title"] or "").endswith(text)), None)
            for text, _ in PHRASES}


@pytest.mark.parametrize("text,named", PHRASES, ids=[f"{i:02d}" for i in range(len(PHRASES))])
def test_text_naming_a_step_wins_over_the_time(events, text, named):
    event = events[text]
    assert event is not None, f"no event for {text!r}"
    assert event["run"] == RUN
    assert event["step"] in named, f"{text!r} placed at step {event['step']} ({event.get('align')}), names {named}"


def test_a_comment_naming_no_step_is_placed_by_its_time(cli, wandb_server, github_server):
    """The other side of the rule: no step in the text, so the time decides (and says so)."""
    from tests.fakes.synth import HERO_GROUP, marin_run

    run = marin_run(RUN, steps=400, entity=E, project=P, group=HERO_GROUP, layers=1, experts=2, norm_every=1000,
                    eval_every=1000)
    steps, stamps = run.series["_timestamp"]
    wandb_server([run])
    gh = github_server()
    gh.add_issue(REPO, 2, "t", "b", created_at=iso(float(stamps[0]) - 86400))
    gh.add_comment(REPO, 2, "all quiet tonight", created_at=iso(float(stamps[300]) + 1))
    run_cli(cli, "sync", f"{E}/{P}/{RUN}")
    run_cli(cli, "sync", f"github:{REPO}#2")
    event = next(e for e in cli_json(cli, "events", "--json") if e["kind"] == "comment")
    assert abs(event["step"] - 300) <= 1 and event.get("align") == "time"


def test_without_a_lineage_the_time_picks_the_run_and_the_text_the_step(cli, wandb_server, github_server):
    """Two runs outside the hero group, one after the other: a comment naming step 150, posted
    while the second run was logging its step 300, lands on the second run at step 150."""
    from tests.fakes.synth import marin_run

    first = marin_run("first-synthetic", steps=400, entity=E, project=P, group="other-synthetic", layers=1,
                      experts=2, norm_every=1000, eval_every=1000)
    second = marin_run("second-synthetic", steps=400, entity=E, project=P, group="other-synthetic", layers=1,
                       experts=2, norm_every=1000, eval_every=1000)
    s1, t1 = first.series["_timestamp"]
    s2, t2 = second.series["_timestamp"]
    second.set_values("_timestamp", list(s2), list(t2 - t2[0] + t1[-1] + 3600.0))   # starts an hour after the first ends
    s2, t2 = second.series["_timestamp"]
    wandb_server([first, second])
    gh = github_server()
    gh.add_issue(REPO, 4, "t (synthetic)", "b", created_at=iso(float(t1[0]) - 86400))
    gh.add_comment(REPO, 4, "Step 150 looked odd (synthetic)", created_at=iso(float(t2[300]) + 1))
    run_cli(cli, "sync", f"{E}/{P}")
    run_cli(cli, "sync", f"github:{REPO}#4")
    event = next(e for e in cli_json(cli, "events", "--json") if e["kind"] == "comment")
    assert (event["run"], event["step"], event.get("align")) == ("second-synthetic", 150, "text"), event


def test_comment_deleted_upstream_leaves_the_timeline(cli, github_server):
    gh = github_server()
    gh.add_issue(REPO, 3, "Hero status (synthetic)", "tracking")
    keep = gh.add_comment(REPO, 3, "a comment that stays", created_at="2026-09-02T00:00:00Z")
    gone = gh.add_comment(REPO, 3, "a comment deleted later", created_at="2026-09-02T01:00:00Z")
    run_cli(cli, "sync", f"github:{REPO}#3")
    titles = [e["title"] for e in cli_json(cli, "events", "--json")]
    assert any(t.endswith("a comment deleted later") for t in titles)
    gh.delete_comment(REPO, 3, gone["id"])
    run_cli(cli, "sync", f"github:{REPO}#3")
    titles = [e["title"] or "" for e in cli_json(cli, "events", "--json")]
    assert not [t for t in titles if t.endswith("a comment deleted later")], titles   # removed, not kept as deleted
    assert [t for t in titles if t.endswith(keep["body"])], titles
