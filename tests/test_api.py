"""The Python API against the CLI on the same store (the contract's "Python API").

The store is filled as a person fills it: `marinctl sync` of a SYNTHETIC hero lineage and ladder
from the loopback W&B fake (finished runs land as parquet parts, the running leaf's tail as long
rows) and an issue from the GitHub fake. Then every API read is compared with the command a
script would run instead: `history` with `export` (long, and pivoted for `wide=True`), `explain`
with `explain step N --json`, `runs`/`anomalies`/`events` with their `--json`, and each error
with the CLI's own message. Last, the API reads a `.wandb` run while `sync --follow` mirrors it
as the real wandb SDK writes it, and neither side fails.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime

import pytest

from tests.blackbox import cli_json, export_rows, marinctl_proc, marinctl_run, sdk_env, start_wandb, stderr_lines

REPO = "synthetic-lab/hero"
NAN_STEP, INF_STEP = 50, 60


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from tests.fakes.github_server import FakeGitHub
    from tests.fakes.synth import hero_lineage, ladder_runs

    home = tmp_path_factory.mktemp("api-home")
    runs = hero_lineage(150, layers=1, experts=2, norm_every=50) + ladder_runs(200, layers=1, experts=2)
    runs[0].set_values("train/loss", [250], [40.0])          # a spike: anomalies and findings are not empty
    rung1 = next(r for r in runs if "d768" in r.run_id)
    rung1.set_values("train/loss", [NAN_STEP, INF_STEP], [float("nan"), float("inf")])   # non-finite values
    server = start_wandb(runs)
    with FakeGitHub() as gh:
        gh.add_issue(REPO, 1, "Hero status (synthetic)", "tracking", created_at="2026-08-30T00:00:00Z")
        gh.add_comment(REPO, 1, "loss spike at step 250 (synthetic)", created_at="2026-09-02T00:00:00Z")
        env = {**sdk_env(), "MARINCTL_HOME": str(home), "WANDB_BASE_URL": server.url, "GITHUB_API_URL": gh.url}
        try:
            synced = marinctl_run(["sync", "marin-community/marin_moe", "--json"], env=env, timeout=300)
            github = marinctl_run(["sync", f"github:{REPO}#1", "--json"], env=env)
        finally:
            server.stop()
    assert synced.returncode == 0, synced.stderr
    assert github.returncode == 0, github.stderr
    return {"home": home, "runs": runs, "rung1": rung1.run_id, "leaf": runs[2].run_id, "fork_child": runs[1].run_id}


@pytest.fixture
def mc(cli, world):
    return lambda *args: cli("--home", str(world["home"]), *args)


@pytest.fixture
def m(world):
    import marinctl

    with marinctl.open(home=world["home"]) as mirror:
        yield mirror


def rows_of(relation) -> list[dict]:
    return relation.arrow().read_all().to_pylist()


def as_printed(value: float | None) -> str:
    from marinctl.cli.output import csv_cell

    return str(csv_cell(value))


# --- history: long rows are export's rows ----------------------------------------------------------------

@pytest.mark.parametrize("run, extra", [
    ("rung1", ()),                                   # parts only, with NaN and Infinity in them
    ("hero", ()),                                    # the stitched lineage: parts and the leaf's long tail
    ("fork_child", ("--stitched",)),                  # a fork child with its parent below the fork
    ("leaf", ("--keys", "train/loss,optim/learning_rate")),
])
def test_history_is_exports_rows(m, mc, world, run, extra):
    name = world.get(run, run)
    want = export_rows(mc, name, *extra)
    keys = extra[1].split(",") if extra[:1] == ("--keys",) else None
    got = rows_of(m.history(name, keys=keys, stitched="--stitched" in extra))
    assert len(want) > 100
    assert [(r["step"], r["key"], as_printed(r["value"])) for r in got] == want
    if run == "rung1":
        values = {(r["step"], r["key"]): r["value"] for r in got}
        assert math.isnan(values[(NAN_STEP, "train/loss")]) and values[(INF_STEP, "train/loss")] == math.inf


def test_history_df_is_a_pandas_frame_of_the_same_rows(m, mc, world):
    pd = pytest.importorskip("pandas")
    df = m.history(world["rung1"], keys=["train/loss"]).df()
    assert isinstance(df, pd.DataFrame) and list(df.columns) == ["step", "key", "value"]
    want = export_rows(mc, world["rung1"], "--keys", "train/loss")
    assert [(int(s), k, as_printed(float(v))) for s, k, v in df.itertuples(index=False)] == want


def test_wide_is_the_pivot_of_exports_rows(m, mc, world):
    keys = ["train/loss", "eval/paloma/c4_en/bpb", "optim/learning_rate"]   # eval logs every 100 steps: gaps
    long = export_rows(mc, "hero", "--keys", ",".join(keys))
    pivot: dict[int, dict[str, str]] = {}
    for step, key, value in long:
        pivot.setdefault(step, {})[key] = value
    rel = m.history("hero", keys=keys, wide=True)
    assert rel.columns == ["step", *keys]
    got = rows_of(rel)
    assert [r["step"] for r in got] == sorted(pivot)
    for r in got:
        assert {k: as_printed(r[k]) for k in keys if r[k] is not None} == pivot[r["step"]], r["step"]
    assert any(r["eval/paloma/c4_en/bpb"] is None for r in got)    # a step without a value is NULL, not NaN


def test_wide_of_every_key_has_a_column_per_exported_key(m, mc, world):
    long = export_rows(mc, world["rung1"])
    rel = m.history(world["rung1"], wide=True)
    assert rel.columns == ["step", *sorted({k for _, k, _ in long})]
    got = {r["step"]: r for r in rows_of(rel)}
    assert len(got) == len({s for s, _, _ in long})
    for step, key, value in long:
        assert as_printed(got[step][key]) == value
    assert math.isnan(got[NAN_STEP]["train/loss"])


# --- the other tables are their commands' --json ------------------------------------------------------------

def test_runs_are_runs_json(m, mc):
    want = cli_json(mc, "runs", "--json")
    got = rows_of(m.runs())
    assert len(got) == len(want) == 7
    for g, w in zip(got, want):
        for field, value in w.items():
            mine = g[field].isoformat() if isinstance(g[field], datetime) else g[field]
            if field == "heartbeat_at" and value is not None:
                assert datetime.fromisoformat(value) == g[field], field
            else:
                assert mine == value, (field, mine, value)


def test_anomalies_are_anomalies_json(m, mc, world):
    for run in (None, world["rung1"]):
        want = cli_json(mc, "anomalies", "--json", *(["--run", run] if run else []))
        got = rows_of(m.anomalies(run))
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert {k: g[k] for k in w} == w
            assert g["start"] <= g["step"] <= g["end"] and isinstance(json.loads(g["details"]), dict)
    assert any(r["step"] == 250 and r["metric"] == "train/loss" for r in rows_of(m.anomalies()))


def test_events_are_events_json(m, mc):
    want = cli_json(mc, "events", "--json")
    got = rows_of(m.events())
    assert len(got) == len(want) >= 2
    for g, w in zip(got, want):
        assert datetime.fromisoformat(w["time"]) == g["time"]
        assert {k: g[k] for k in ("kind", "title", "url", "run", "step", "source")} == \
               {k: w[k] for k in ("kind", "title", "url", "run", "step", "source")}
    hero = cli_json(mc, "events", "--run", "hero", "--json")
    assert [(r["event_id"], r["step"]) for r in rows_of(m.events("hero"))] == [(w["event_id"], w["step"]) for w in hero]


@pytest.mark.parametrize("args", [(250,), (55, "rung1"), (250, None, "train/loss"), (40, None, "params/norm/total")])
def test_explain_is_explain_json(m, mc, args):
    step, run, metric = (*args, None, None)[:3]
    argv = ["explain", "step", str(step), "--json"] + (["--run", run] if run else []) + (["--metric", metric] if metric else [])
    want = cli_json(mc, *argv)
    got = m.explain(step, run=run, metric=metric)
    assert got == want
    if args == (250,):
        assert any(f["metric"] == "train/loss" for f in got["findings"])


# --- errors: the CLI's classes and messages ------------------------------------------------------------------

@pytest.mark.parametrize("call, argv, kind", [
    (lambda m: m.history("no-such-run"), ["export", "no-such-run"], "UnknownRun"),
    (lambda m: m.history("hero", keys=["no/such/key"]), ["export", "hero", "--keys", "no/such/key"], "UnknownMetric"),
    (lambda m: m.explain(10 ** 9), ["explain", "step", str(10 ** 9)], "UnknownStep"),
    (lambda m: m.explain(250, metric="no/such/key"), ["explain", "step", "250", "--metric", "no/such/key"], "UnknownMetric"),
    (lambda m: m.anomalies("rung9"), ["anomalies", "--run", "rung9"], "UnknownRun"),
    (lambda m: m.explain(-5), ["explain", "step", "-5"], "UserError"),
])
def test_errors_are_the_clis_classes_with_its_messages(m, mc, call, argv, kind):
    import marinctl

    code, _, err = mc(*argv)
    assert code == 2
    with pytest.raises(marinctl.MarinctlError) as caught:
        call(m)
    exc = caught.value
    assert isinstance(exc, getattr(marinctl, kind)) and isinstance(exc, marinctl.UserError) and exc.exit_code == 2
    lines = stderr_lines(err)
    assert lines[0] == f"marinctl: error: {exc.message}"
    if kind != "UserError":            # a Python argument checked by the API itself hints at Python
        assert exc.hint and lines[1] == "  try: " + re.sub(r"^try:?\s*", "", exc.hint)


def test_a_home_without_a_store_is_named(tmp_path):
    import marinctl

    with pytest.raises(marinctl.NoStore, match=str(tmp_path / "empty")):
        marinctl.open(home=tmp_path / "empty")
    assert not (tmp_path / "empty").exists()                       # reading makes nothing


def test_public_names_are_stable_and_the_clis_own():
    import marinctl
    from marinctl import errors

    assert set(marinctl.__all__) >= {"open", "Mirror", "MarinctlError", "UserError", "RuntimeFailure",
                                     "UnknownRun", "UnknownMetric", "UnknownStep", "__version__"}
    for name in marinctl.__all__:
        assert getattr(marinctl, name) is not None and name in dir(marinctl)
    assert marinctl.UnknownRun is errors.UnknownRun and issubclass(marinctl.UnknownRun, marinctl.UserError)
    assert issubclass(marinctl.StoreLocked, marinctl.RuntimeFailure)
    with pytest.raises(AttributeError):
        marinctl.no_such_name


# --- reading while `sync --follow` writes ----------------------------------------------------------------------

WRITER = textwrap.dedent(r'''
    import os, sys, time
    import wandb
    out, steps, chunk, gate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    run = wandb.init(mode="offline", dir=out, project="synthetic-api-live", id="synthetic-api-live",
                     settings=wandb.Settings(x_disable_stats=True, console="off", x_transaction_log_flush_interval=0.1))
    for s in range(steps):
        if s and s % chunk == 0:        # paused until the reader has seen every step so far
            while not os.path.exists(os.path.join(gate, f"go-{s}")):
                time.sleep(0.01)
        run.log({"train/loss": 5.0 - s * 0.001, "grad/norm/total": 1.0 + s % 7}, step=s)
    run.finish()
    from repro.wandb_log import teardown  # bounded: wandb's own can wait for ever
    teardown()
''')


def test_reads_while_sync_follow_writes(tmp_path):
    import marinctl

    steps, chunk = 400, 100          # the writer pauses after each chunk until the API has read it
    out, gate = tmp_path / "live", tmp_path / "gate"
    out.mkdir()
    gate.mkdir()
    home = tmp_path / "home-live"
    env = {**sdk_env(), "MARINCTL_HOME": str(home)}
    with (tmp_path / "writer.err").open("wb") as err:     # a file: wandb-core keeps a pipe open after the writer
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(steps), str(chunk), str(gate)], env=sdk_env(),
                                  stdout=subprocess.DEVNULL, stderr=err)
    follow = None
    seen: list[int] = []
    try:
        deadline = time.monotonic() + 90
        while not list(out.glob("wandb/*/*.wandb")) and time.monotonic() < deadline:
            assert writer.poll() is None, (tmp_path / "writer.err").read_text()
            time.sleep(0.1)
        follow = marinctl_proc(["sync", str(out / "wandb"), "--follow", "--interval", "0.2"], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        errors = []
        threading.Thread(target=lambda: errors.extend(iter(follow.stderr.readline, b"")), daemon=True).start()
        while not (home / "marinctl.duckdb").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        m = marinctl.open(home=home)
        while time.monotonic() < deadline:                 # read, as fast as a loop can, until the last step lands
            try:
                n = m.history("synthetic-api-live", keys=["train/loss"]).aggregate("count(*)").fetchall()[0][0]
            except (marinctl.UnknownRun, marinctl.UnknownMetric):   # the follower has not stored it yet
                n = 0
            seen.append(n)
            if n == steps:
                break
            if n and (n + 1) % chunk == 0:                 # a paused writer's last row waits for the next step
                (gate / f"go-{n + 1}").touch()             # seen: the writer goes on
        assert writer.wait(timeout=60) == 0, (tmp_path / "writer.err").read_text()
        assert seen[-1] == steps, f"the API read {seen[-1]} of {steps} steps"
        assert {99, 199, 299} <= set(seen), sorted(set(seen))         # it read while the follower wrote
        assert seen == sorted(seen)                                   # a snapshot never goes back
        assert follow.poll() is None, b"".join(errors).decode()       # the follower went on writing
        follow.send_signal(signal.SIGINT)
        assert follow.wait(timeout=30) in (0, 130)
        text = b"".join(errors).decode(errors="replace")
        assert "locked" not in text and "error" not in text.lower(), text
        assert [r["step"] for r in rows_of(m.history("synthetic-api-live", keys=["train/loss"]))] == list(range(steps))
    finally:
        for proc in (follow, writer):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)


# --- the README's notebook session -------------------------------------------------------------------------------

def test_the_readme_session_runs(world, monkeypatch, capsys):
    """The ```python block under README's "From Python" runs as written on the synced store."""
    from tests.blackbox import ROOT

    pytest.importorskip("pandas")
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^### From Python.*?\n```python\n(.*?)^```", text, re.S | re.M)
    assert block, "README.md has no ```python block under '### From Python'"
    monkeypatch.setenv("MARINCTL_HOME", str(world["home"]))
    scope: dict = {}
    exec(compile(block.group(1), "README.md", "exec"), scope)
    assert len(scope["h"]) > 100 and list(scope["h"].columns) == ["step", "train/loss", "optim/learning_rate"]
    assert any(f["metric"] == "train/loss" for f in scope["doc"]["findings"])
    assert "unknown run 'no-such-run': it is not in the store" in capsys.readouterr().out
