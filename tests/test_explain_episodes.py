"""`explain` answers at every step of an episode, black-box, on labelled SYNTHETIC runs.

Each incident kind marinctl knows (a loss spike, a parameter-norm jump, an Adam-group drift, a
resume whose loss does not match its parent's, a throughput drop, a router collapse, NaN, logit
growth) is injected into a small Marin-shaped run (tests/fakes/episodes.py), served by the
loopback W&B fake and mirrored with `marinctl sync ENTITY/PROJECT`; every check reads what a
person types: `marinctl explain --range A:B --json`, `explain step N [--json]`, `anomalies
[--json]`, and, for alerts, a `sync --follow --notify webhook=…` against a run that grows while it
is followed. The store is built once for the module. Nothing here imports marinctl's analysis code.
"""

from __future__ import annotations

import os
import re
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.blackbox import MARINCTL, cli_in, home_json, interrupt, strict_json, wait_until
from tests.blackbox import explain_in as explain
from tests.fakes import episodes as E
from tests.fakes import incidents as I
from tests.fakes import synth
from tests.fakes.growing import START_STEPS, Feed, growing_run
from tests.fakes.wandb_server import WandbServer
from tests.fakes.webhook_receiver import WebhookReceiver

ROOT = Path(__file__).resolve().parent.parent
AHEAD, NEAR = 3, 30     # explain answers N with episodes up to 3 logged rows after it, or ended 30 steps before
WELL = 10               # and "well outside" an episode is that much further away


@dataclass
class World:
    home: Path
    episodes: dict[str, E.Episode]
    cache: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"World({str(self.home)!r}, {len(self.episodes)} episodes)"


def _evals_every_3() -> synth.SynthRun:
    """A short run that evaluates every 3 steps: dozens of evals within explain's window."""
    return synth.marin_run("synthetic-episode-evals", steps=120, layers=1, experts=2, norm_every=10, eval_every=3,
                           entity=I.ENTITY, project=I.PROJECT, group="synthetic-episodes")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    """Every SYNTHETIC episode of this module (and a run evaluating every 3 steps), synced over W&B's GraphQL."""
    episodes = E.build()
    runs = [r for e in episodes.values() for r in e.runs] + [_evals_every_3()]
    home = tmp_path_factory.mktemp("episodes-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "GITHUB_", "GH_"))}
    env.update(NETRC=str(home / "netrc-none"), WANDB_CONFIG_DIR=str(home / "wandb-config"), MARINCTL_HOME=str(home),
               PYTHONPATH=str(ROOT))
    with WandbServer(runs, verbose=False) as server:
        report = home_json(home, "sync", f"{I.ENTITY}/{I.PROJECT}", "--json", env={**env, "WANDB_BASE_URL": server.url})
    assert {r["run"] for r in report["runs"]} == {r.run_id for r in runs}
    return World(home, episodes)


def sweep(cli, world: World, run: str, lo: int, hi: int) -> dict[int, dict]:
    rows = strict_json(cli_in(cli, world, "explain", "--range", f"{lo}:{hi}", "--run", run, "--json"))
    assert [r["step"] for r in rows] == list(range(lo, hi + 1))
    for r in rows:
        assert {"step", "cause_class", "metric", "severity"} <= set(r), r
    return {r["step"]: r for r in rows}


def anomalies(cli, world: World, run: str) -> list[dict]:
    return strict_json(cli_in(cli, world, "anomalies", "--run", run, "--json"))


def brief(findings: list[dict], n: int = 4) -> list[tuple]:
    return [(f["step"], f["kind"], f["cause_class"], f.get("severity")) for f in findings[:n]]


def last_step(cli, world: World, run: str) -> int:
    rows = strict_json(cli_in(cli, world, "runs", "--json"))
    return next(r["last_step"] for r in rows if r["run"] == run)


# --- every incident kind: its cause at every step inside its episode, nothing of it well outside ----------

@pytest.mark.parametrize("name", list(E.KINDS))
def test_explain_range_names_the_cause_inside_the_episode_and_nothing_of_it_well_outside(cli, world, name):
    ep = world.episodes[name]
    rows = [r for r in anomalies(cli, world, ep.run_id) if r["kind"] in ep.kinds and r["cause_class"] == ep.cause_class]
    assert len(rows) == 1, anomalies(cli, world, ep.run_id)
    start, end = rows[0]["start"], rows[0]["end"]      # the episode as marinctl found it, against the truth
    truth_lo, truth_hi = ep.window
    assert truth_lo <= start <= truth_lo + 10 and truth_lo <= end <= max(truth_hi, start) + 10, (rows[0], ep.window)
    lo, hi = max(start - 120, 0), min(end + 120, last_step(cli, world, ep.run_id))
    answers = sweep(cli, world, ep.run_id, lo, hi)
    inside = {s: (a["cause_class"], a["kind"]) for s, a in answers.items() if start <= s <= end}
    wrong = {s: got for s, got in inside.items() if got[0] != ep.cause_class or got[1] not in ep.kinds}
    assert inside and not wrong, f"{ep}: inside {start}–{end} the first cause is not it at {sorted(wrong)[:8]}: {wrong}"
    outside = {s: a["kind"] for s, a in answers.items() if s < start - AHEAD - WELL or s > end + NEAR + WELL}
    leaked = sorted(s for s, kind in outside.items() if kind in ep.kinds)
    assert not leaked, f"{ep}: named well outside {start}–{end} at {leaked[:8]}"
    assert any(s < start for s in outside) or lo == 0, "the sweep never looked before the episode"
    # each step answered as `explain step N` answers it
    for s in sorted({start, (start + end) // 2, end}):
        top = explain(cli, world, ep.run_id, s)["findings"][0]
        assert (top["cause_class"], top["kind"], top["severity"]) == (
            answers[s]["cause_class"], answers[s]["kind"], answers[s]["severity"]), (s, answers[s], brief([top]))
        assert top["start"] <= s <= top["end"], top


def test_the_range_in_words_gives_each_stretch_once(cli, world):
    ep = world.episodes["throughput drop"]
    text = cli_in(cli, world, "explain", "--range", "1400:2100", "--every", "10", "--run", ep.run_id)
    stretches = [line.split()[0] for line in text.splitlines() if re.match(r"^\d[\d,]*(–[\d,]+)?\s\s", line)]
    assert stretches == ["1,400–1,490", "1,500–2,020", "2,030–2,100"], text
    assert "infrastructure  throughput collapse" in text and "71 steps from 1,400 to 2,100, every 10" in text, text


# --- the episode is the whole of it -------------------------------------------------------------------------

def test_a_mismatch_that_persists_past_the_runbooks_span_is_found_late_in_the_overlap(cli, world):
    ep = world.episodes["resume mismatch"]
    late = E.R.PARENT_END - 10             # 39 steps past the 200 that decide the bar (more than explain's 30 after an
    #                                        episode); the parent logged to 1,499
    assert late > E.R.COMPARED_TO
    doc = explain(cli, world, ep.run_id, late)
    top = doc["findings"][0]
    assert (top["kind"], top["cause_class"], top["severity"]) == ("resume_mismatch", "infrastructure", "high"), brief(doc["findings"])
    assert (top["start"], top["end"], top["evidence"]["decided_to"]) == (E.R.FORK + 51, E.R.PARENT_END - 1, E.R.COMPARED_TO)
    assert "the gap held to step 1,499" in cli_in(cli, world, "explain", "step", str(late), "--run", ep.run_id)


@pytest.mark.parametrize("name", ["logit growth", "drift"])
def test_an_episode_still_open_at_the_last_logged_row_is_open_in_the_answer(cli, world, name):
    ep = world.episodes[name]
    last = last_step(cli, world, ep.run_id)
    top = explain(cli, world, ep.run_id, last)["findings"][0]
    assert (top["kind"], top["open"], top["under_way"]) == (ep.kinds[0], True, True), brief([top])
    assert "still under way at the last logged step" in cli_in(cli, world, "explain", "step", str(last), "--run", ep.run_id)
    closed = explain(cli, world, world.episodes["spike"].run_id, 800)["findings"][0]
    assert closed["kind"] == "spike" and closed["open"] is False


# --- unusual is not paging ---------------------------------------------------------------------------------

def test_a_slowdown_shorter_than_the_alerts_bar_is_a_finding_of_lower_severity(cli, world):
    short, long_ = world.episodes["short slowdown"], world.episodes["throughput drop"]
    inside = (short.window[0] + short.window[1]) // 2
    top = explain(cli, world, short.run_id, inside)["findings"][0]
    assert (top["kind"], top["cause_class"], top["severity"]) == ("throughput_dip", "infrastructure", "low"), brief([top])
    bar = top["evidence"]["alert_bar"]
    assert (bar["reached"], bar["short_of"], bar["duration_s"]) == (False, ["duration"], 45 * 60), bar
    assert top["evidence"]["duration_s"] < 45 * 60 and top["evidence"]["ratio"] == pytest.approx(0.75, abs=0.02)
    collapse = explain(cli, world, long_.run_id, 1750)["findings"][0]
    assert (collapse["kind"], collapse["severity"], collapse["evidence"]["alert_bar"]["reached"]) == (
        "throughput_collapse", "medium", True)
    text = cli_in(cli, world, "explain", "step", str(inside), "--run", short.run_id)
    assert "below the alert's bar: Marin's runbook" in text and "[infrastructure · low ·" in text, text


class _Follower:
    """`marinctl sync RUN --follow --notify webhook=URL` in its own process group; its stderr read as it comes."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen(MARINCTL + args, env=env, cwd=ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=lambda: self.lines.extend(
            raw.decode(errors="replace").rstrip("\n") for raw in self.proc.stderr), daemon=True)
        self._reader.start()

    def synced(self, step: int) -> None:
        """Wait until a pass has synced `step` (its alert pass ran in the same round, before this line)."""
        needle = f"last step {step:,}"
        assert wait_until(lambda: any(needle in line for line in list(self.lines)) or self.proc.poll() is not None, 60), \
            "\n".join(self.lines)[-2000:]
        assert self.proc.poll() is None, "\n".join(self.lines)[-2000:]

    def stop(self) -> None:
        interrupt(self.proc)
        self._reader.join(timeout=5)


def test_a_slowdown_shorter_than_the_alerts_bar_raises_no_alert(tmp_path):
    run = growing_run("synthetic-alerts-episode-short-slowdown", seed=6)
    env = {**os.environ, "MARINCTL_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT)}
    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, run)
        follower = _Follower(["sync", run.path, "--follow", "--interval", "0.5", "--notify", f"webhook={hook.url}/generic"],
                             env)
        try:
            follower.synced(feed.last_step)                   # the baseline pass
            follower.synced(feed.grow(60, slowdown=True))     # half speed for 59 steps: 19 minutes, not 45
            for _ in range(3):
                follower.synced(feed.grow(40))                # back to speed: the window closes
        finally:
            follower.stop()
        posts = list(hook.posts)
    assert posts == [], [p.body for p in posts]
    home = ["--home", str(tmp_path / "home")]
    alerts = subprocess.run(MARINCTL + [*home, "alerts", "--json"], env=env, capture_output=True, text=True, timeout=60)
    assert alerts.returncode == 0 and strict_json(alerts.stdout) == [], alerts.stderr
    found = subprocess.run(MARINCTL + [*home, "anomalies", "--run", run.run_id, "--json"], env=env, capture_output=True,
                           text=True, timeout=60)
    rows = strict_json(found.stdout)
    assert [(r["kind"], r["cause_class"]) for r in rows] == [("throughput_dip", "infrastructure")], rows
    assert START_STEPS < rows[0]["start"] <= START_STEPS + 5 and rows[0]["end"] <= START_STEPS + 62, rows


# --- what happened at the step outranks a trend that began long before ----------------------------------------

def test_a_fork_that_changed_the_config_ranks_first_at_its_fork_step_over_an_older_inherited_drift(cli, world):
    ep = world.episodes["fork with a config change"]
    at = E.FORK_AT + 1
    doc = explain(cli, world, ep.run_id, at)
    top = doc["findings"][0]
    assert (top["kind"], top["cause_class"], top["step"], top["under_way"]) == ("fork", "infrastructure", at, False), \
        brief(doc["findings"])
    assert top["evidence"]["config_changes"]["added"] == {"optimizer.weight_decay.attn_gate": 0.02}, top["evidence"]
    drift = [f for f in doc["findings"][1:] if f["kind"] == "adam_drift"]
    assert drift and drift[0]["under_way"] and drift[0]["start"] <= E.DRIFT_AT + 100, brief(doc["findings"])
    assert "Already under way:" in doc["summary"] and "already drifting since step 1,5" in doc["summary"], doc["summary"]
    text = cli_in(cli, world, "explain", "step", str(at), "--run", ep.run_id)
    assert "config changed at the fork: " in text and "optimizer.weight_decay.attn_gate = 0.02 (new)" in text, text
    # the drift is not dropped: once the fork is no longer news, it is the answer again
    answers = sweep(cli, world, ep.run_id, at, at + 60)
    assert {answers[s]["kind"] for s in range(at, at + NEAR)} == {"fork"}, answers
    assert {answers[s]["kind"] for s in range(at + NEAR + 1, at + 61)} == {"adam_drift"}, answers


# --- the context: the evals around the step, not the run's first ----------------------------------------

def test_the_context_lists_the_evals_around_the_step(cli, world):
    run = "synthetic-episode-evals"
    assert explain(cli, world, run, 40)["context"]["evals"] == [33, 36, 39, 42, 45, 48]
    assert explain(cli, world, run, 39)["context"]["evals"] == [33, 36, 39, 42, 45, 48]
    text = cli_in(cli, world, "explain", "step", "40", "--run", run)
    assert "evals        at steps 33, 36, 39, 42, 45, 48\n" in text, text
    # at the run's start there is nothing before: the first evals after it
    assert explain(cli, world, run, 1)["context"]["evals"] == [0, 3, 6, 9]
