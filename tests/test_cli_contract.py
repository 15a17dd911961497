"""What scripts read from marinctl (the CLI contract).

Every `--json` shape is checked against the contract's field lists (shared/cli-contract.md,
copied below: fields may be added, never renamed or dropped) on a store filled the way a
person fills it — `sync` of a SYNTHETIC hero lineage and ladder from the W&B fake and an issue
from the GitHub fake. Also: `repro --json` gives `run` as the id string other commands take
(plus `run_dir`); `export` and `sync --follow` say on stderr what they wrote; `mix` either
reads the synced mixture file or says it fell back to the published table.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from tests.blackbox import cli_json, env_with, marinctl_proc, marinctl_run, run_cli, sdk_env, sdk_write, sync_served

# The contract's minimum fields (shared/cli-contract.md, "Commands" and "explain step N --json").
SYNC = {"runs", "events_added"}
SYNC_RUN = {"run", "rows_added", "first_step", "last_step"}
RUNS = {"run", "entity", "project", "name", "group", "state", "last_step", "heartbeat_at", "source", "fork_parent", "fork_step"}
SHOW = {"run", "config", "summary", "lineage"}
LINEAGE = {"run", "from_step", "to_step"}
EVENT = {"time", "kind", "title", "url", "run", "step", "source"}
MIX = {"phases", "active"}
PHASE = {"name", "start_step", "end_step", "weights"}
ANOMALY = {"run", "step", "start", "end", "metric", "kind", "score", "cause_class"}
EXPLAIN = {"run", "step", "findings", "context"}
FINDING = {"metric", "kind", "step", "cause_class", "confidence", "attribution", "explanation", "evidence"}
CONTEXT = {"lr_phase", "data_phase", "events"}
LADDER = {"fit", "predictions", "rungs"}
FIT = {"L_inf", "A", "alpha"}
PREDICTION = {"compute", "loss"}
REPRO = {"rung", "proxy", "true", "run", "run_dir"}
CAUSES = {"optimizer", "adam_state", "data_batch", "numerics", "logit_growth", "init_shape", "moe_routing",
          "heuristic_parameter", "infrastructure", "config", "none"}
REPO = "synthetic-lab/hero"


def has(obj, fields, what):
    assert isinstance(obj, dict), f"{what}: not an object: {obj!r}"[:300]
    missing = fields - set(obj)
    assert not missing, f"{what} lacks {sorted(missing)}: has {sorted(obj)}"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from tests.fakes.github_server import FakeGitHub
    from tests.fakes.synth import hero_lineage, ladder_runs

    home = tmp_path_factory.mktemp("contract-home")
    runs = hero_lineage(150, layers=1, experts=2, norm_every=50) + ladder_runs(200, layers=1, experts=2)
    runs[0].set_values("train/loss", [250], [40.0])        # one spike, so anomalies and findings are not empty
    with FakeGitHub() as gh:
        gh.add_issue(REPO, 1, "Hero status (synthetic)", "tracking", created_at="2026-08-30T00:00:00Z")
        gh.add_comment(REPO, 1, "loss spike at step 250 (synthetic)", created_at="2026-09-02T00:00:00Z")
        env = {**sdk_env(), "MARINCTL_HOME": str(home), "GITHUB_API_URL": gh.url}
        wandb_sync = sync_served(runs, "marin-community/marin_moe", "--json", env=env)
        github_sync = marinctl_run(["sync", f"github:{REPO}#1", "--json"], env=env)
    assert wandb_sync.returncode == 0, wandb_sync.stderr
    assert github_sync.returncode == 0, github_sync.stderr
    return {"home": home, "sync": json.loads(wandb_sync.stdout), "github_sync": json.loads(github_sync.stdout),
            "runs": runs}


@pytest.fixture
def mc(cli, world):
    return lambda *args: cli("--home", str(world["home"]), *args)


def test_sync_json(world):
    assert {r["run"] for r in world["sync"]["runs"]} == {r.run_id for r in world["runs"]}
    for doc in (world["sync"], world["github_sync"]):
        has(doc, SYNC, "sync --json")
        for r in doc["runs"]:
            has(r, SYNC_RUN, "sync --json runs[]")
            assert isinstance(r["run"], str)
    assert world["github_sync"]["events_added"] >= 2


def test_runs_json(mc, world):
    items = cli_json(mc, "runs", "--json")
    assert {i["run"] for i in items} == {r.run_id for r in world["runs"]}
    for item in items:
        has(item, RUNS, "runs --json[]")


def test_show_json(mc):
    doc = cli_json(mc, "show", "hero", "--json")
    has(doc, SHOW, "show --json")
    assert isinstance(doc["run"], str) and isinstance(doc["config"], dict) and isinstance(doc["summary"], dict)
    assert len(doc["lineage"]) == 3
    for seg in doc["lineage"]:
        has(seg, LINEAGE, "show --json lineage[]")


def test_events_json(mc):
    items = cli_json(mc, "events", "--json")
    assert items
    for item in items:
        has(item, EVENT, "events --json[]")


def test_mix_json(mc):
    doc = cli_json(mc, "mix", "--json")
    has(doc, MIX, "mix --json")
    assert len(doc["phases"]) == 3, doc["phases"]     # the hero's three data phases
    for phase in doc["phases"]:
        has(phase, PHASE, "mix --json phases[]")


def test_anomalies_json(mc):
    items = cli_json(mc, "anomalies", "--json")
    assert items, "the synthetic spike at step 250 was not detected"
    for item in items:
        has(item, ANOMALY, "anomalies --json[]")
        assert item["cause_class"] in CAUSES


def test_explain_json(mc):
    doc = cli_json(mc, "explain", "step", "250", "--json")
    has(doc, EXPLAIN, "explain --json")
    has(doc["context"], CONTEXT, "explain --json context")
    assert isinstance(doc["run"], str) and doc["step"] == 250 and doc["findings"]
    for f in doc["findings"]:
        has(f, FINDING, "explain --json findings[]")
        assert f["cause_class"] in CAUSES
        for a in f["attribution"]:
            has(a, {"name", "share"}, "explain --json attribution[]")


def test_ladder_json(mc):
    doc = cli_json(mc, "ladder", "--json")
    has(doc, LADDER, "ladder --json")
    has(doc["fit"], FIT, "ladder --json fit")
    assert doc["predictions"], "no prediction for the hero"
    for p in doc["predictions"]:
        has(p, PREDICTION, "ladder --json predictions[]")


def test_sql_json_rows_are_objects(mc):
    rows = cli_json(mc, "sql", "SELECT run, max(step) AS last FROM history GROUP BY run ORDER BY run", "--json")
    assert rows and all(set(r) == {"run", "last"} for r in rows)


def test_sql_help_names_every_table_the_store_holds(mc):
    """The tables in `sql --help` are read from the migrations: every one a store holds, no other."""
    stored = {r["name"] for r in cli_json(mc, "sql", "SHOW TABLES", "--json")} - {"history"}
    _, out, _ = run_cli(mc, "sql", "--help")
    listed = re.search(r"tables: ([^;]*);", " ".join(out.split())).group(1).split(", ")
    assert set(listed) == stored and len(listed) == len(stored), (listed, stored)


def test_run_ids_from_json_are_accepted_by_other_commands(mc):
    """`run` in every shape is an id other commands take (the reason `repro --json`'s matters)."""
    ids = {i["run"] for i in cli_json(mc, "runs", "--json")}
    ids |= {i["run"] for i in cli_json(mc, "anomalies", "--json")}
    ids.add(cli_json(mc, "show", "hero", "--json")["run"])
    for run in sorted(ids):
        run_cli(mc, "show", run, "--json")


def test_repro_dry_run_json(mc):
    doc = cli_json(mc, "repro", "rung1", "--dry-run", "--json")
    has(doc, REPRO - {"run", "run_dir"}, "repro --dry-run --json")
    assert doc["run"] is None and doc["run_dir"] is None, doc   # a dry run trains nothing, so names no run


@pytest.mark.slow
def test_repro_json_run_is_the_id_string(cli, tmp_path):
    """A real (tiny) CPU repro run on the user's own text; costs one proxy training step."""
    text = " ".join(f"The synthetic sentence number {i} says that tests write their own words." for i in range(6000))
    data = tmp_path / "mine.txt"
    data.write_text(text)
    code, out, err = cli("repro", "rung1", "--cpu", "--steps", "1", "--data", str(data), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert isinstance(doc["run"], str), f"run is {type(doc['run']).__name__}: {doc['run']!r}"[:300]
    has(doc, REPRO, "repro --json")
    assert doc["run"] in doc["run_dir"]
    run_cli(cli, "show", doc["run"], "--json")
    run_cli(cli, "export", doc["run"])


# --- saying what was written ---------------------------------------------------------------


def test_export_says_on_stderr_what_it_wrote(mc, tmp_path):
    code, out, err = mc("export", "ladder-d768")
    rows = len(out.splitlines()) - 1
    assert code == 0 and rows > 0
    assert re.search(rf"\b{rows:,}\b|\b{rows}\b", err), f"stderr does not say {rows} rows were written: {err!r}"
    dest = tmp_path / "out.csv"
    code, out, err = mc("export", "ladder-d768", "--out", str(dest))
    assert code == 0 and out == "" and dest.exists()
    assert str(dest) in err or dest.name in err, err


def test_sync_follow_of_a_local_run_says_what_it_wrote(tmp_path):
    sdk_write(tmp_path / "runs", '''
run = wandb.init(mode="offline", dir=out, project="follow-synthetic", id="follow-synthetic", settings=S())
for s in range(25):
    run.log({"loss": 3.0 - 0.01 * s}, step=s)
run.finish()
''')
    err = _follow(["sync", str(tmp_path / "runs" / "wandb"), "--follow"], env_with(MARINCTL_HOME=str(tmp_path / "h")),
                  "follow-synthetic")
    assert "follow-synthetic" in err and re.search(r"\b\d+ rows?\b|\+\d+", err), err


def test_sync_follow_of_a_wandb_run_says_on_stderr_what_it_wrote(tmp_path, wandb_server):
    from tests.fakes.synth import marin_run

    run = marin_run("follow-remote-synthetic", steps=60, layers=1, experts=2, norm_every=100, eval_every=100)
    server = wandb_server([run])
    err = _follow(["sync", f"{run.entity}/{run.project}/{run.run_id}", "--follow", "--interval", "1"],
                  env_with(MARINCTL_HOME=str(tmp_path / "h"), WANDB_BASE_URL=server.url), run.run_id)
    assert re.search(rf"{re.escape(run.run_id)}: \+[\d,]+ rows", err), err


def _follow(args, env, needle, timeout=60.0) -> str:
    """Run `marinctl ARGS` until a stderr line names `needle` with the rows it wrote, then Ctrl-C; its stderr.

    stderr is read as it comes (a thread), so Ctrl-C lands after a round has said what it wrote,
    however slow the machine is; a round that never says so fails the caller's checks."""
    import threading

    proc = marinctl_proc(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, b"")), daemon=True)
    reader.start()
    said = re.compile(rf"{re.escape(needle)}.*\brows?\b")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if any(said.search(line.decode(errors="replace")) for line in list(lines)):
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise AssertionError("sync --follow did not stop on Ctrl-C")
    reader.join(timeout=10)
    err = b"".join(lines).decode(errors="replace")
    assert proc.returncode in (0, 130), err[-500:]
    return err


# --- the mixture file (PR #9162's mixture) ----------------------------------------------------


def test_mix_reads_the_synced_mixture_file(cli, github_server):
    """The file in one of the shapes mix reads (stages with their start steps) is what mix shows; a
    file it cannot read falls back and says so (tests/test_mix.py)."""
    path = "experiments/grug/moe_hero_ep/harrier_mix_2026_08_18.json"
    doc = {"name": "harrier (synthetic stand-in)", "stages": [          # stages with their start steps
        {"start_step": 0, "weights": {"web": 0.6, "code": 0.4}},
        {"start_step": 108000, "weights": {"web": 0.5, "code": 0.5}},
        {"start_step": 312192, "weights": {"web": 0.3, "code": 0.7}}]}
    gh = github_server()
    gh.set_file("marin-community/marin", path, json.dumps(doc))
    gh.add_commit("marin-community/marin", "b" * 40, "mix (synthetic)", paths=(path,), date="2026-09-01T00:00:00Z")
    run_cli(cli, "sync", f"github:marin-community/marin/{path}")
    code, out, err = cli("mix", "--json")
    assert code == 0, err
    mix = json.loads(out)
    assert mix["source"] == "file", mix
    assert [p["start_step"] for p in mix["phases"]] == [0, 108000, 312192]
    assert mix["phases"][2]["weights"] == pytest.approx({"web": 0.3, "code": 0.7})
