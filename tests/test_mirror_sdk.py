"""A faithful mirror: what marinctl stores and shows equals what was logged with the
real wandb SDK, under the SDK's own rules.

Runs are written offline by wandb 0.31 itself (nested dicts next to flat keys, `commit=False`,
`define_metric` step axes and summaries, summary overrides after the last log, string and
other non-numeric values, resumes into a second `.wandb` file, a writer killed with SIGKILL)
and read back only through the CLI: `sync`, `export`, `show --json`, `runs --json`,
`events --json`, `explain --json`. W&B's own Go reader (`wandb leet inspect`) is the oracle
for the summary W&B computes and for what a killed writer left in its file.
Remote runs come from the loopback W&B fake. Every run here is SYNTHETIC.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.blackbox import (
    assert_same_values, cli_json, export_rows, export_values, leet_summary, logged_values, marinctl_run,
    run_cli, sdk_env, sdk_write, wandb_files,
)

NESTED, RESUME_STEPS, RESUME_FREE = "nested-synthetic", "resume-steps-synthetic", "resume-free-synthetic"

WRITER = '''
def init(run_id, **kw):
    return wandb.init(mode="offline", dir=out, project="mirror-synthetic", id=run_id, name=run_id,
                      settings=S(), **kw)

# 1. nested dicts next to flat keys, commit=False, define_metric step axes and summaries,
#    summary overrides after the last log, strings and non-scalars next to scalars.
r = init("nested-synthetic", config={"model": {"d": 768}, "lr": 0.1})
r.define_metric("eval_step")
r.define_metric("eval/acc", step_metric="eval_step", summary="max")
r.define_metric("train/loss", summary="min")
r.define_metric("m/mean", summary="mean")
r.define_metric("m/none", summary="none")
r.define_metric("m/last", summary="last")
r.define_metric("m/first", summary="first")
r.define_metric("m/minmax", summary="min,max")
rows = []
for i in range(6):
    first = {"train": {"loss": 10.0 - i}, "train/loss": 100.0 + i, "m/mean": float(i), "m/none": float(i),
             "m/last": 7.0 - i, "m/first": 5.0 + i, "m/minmax": float((i - 2) ** 2)}
    r.log(first, step=i, commit=False)
    r.log({"partial": 2.0 * i}, step=i)
    row = {"_step": i, "train.loss": 10.0 - i, **{k: v for k, v in first.items() if k != "train"}, "partial": 2.0 * i}
    if i % 2 == 0:
        r.log({"eval/acc": 0.5 + i / 100, "eval_step": i * 10}, step=i)
        row.update({"eval/acc": 0.5 + i / 100, "eval_step": i * 10})
    rows.append(row)
import numpy as np
r.log({"hist": wandb.Histogram(np.arange(10)), "vec": [1, 2, 3], "txt": "hello", "scalar": 3.5}, step=6)
rows.append({"_step": 6, "scalar": 3.5})
r.summary["train/loss"] = 42.0          # an override after the last log of train/loss
r.summary["note"] = "a string"
r.summary["cfg"] = {"a": 1}
r.finish()
logged["nested-synthetic"] = {"rows": rows}

# 2. resume into a second .wandb file, explicit steps continuing the first file.
r = init("resume-steps-synthetic", config={"a": 1, "model": {"d": 64}})
rows = []
for i in range(10):
    r.log({"loss": 1000.0 + i}, step=i)
    rows.append({"_step": i, "loss": 1000.0 + i})
r.finish()
r = init("resume-steps-synthetic", resume="allow", config={"b": 2})
for i in range(10, 15):
    r.log({"loss": 1000.0 + i}, step=i)
    rows.append({"_step": i, "loss": 1000.0 + i})
r.finish()
logged["resume-steps-synthetic"] = {"rows": rows}

# 3. resume without explicit steps: the second file's _step starts at 0 again.
r = init("resume-free-synthetic", config={"a": 1, "model": {"d": 64}})
for i in range(10):
    r.log({"loss": 1000.0 + i})
r.finish()
r = init("resume-free-synthetic", resume="allow", config={"b": 2})
for i in range(5):
    r.log({"loss": 2000.0 + i})
r.finish()
logged["resume-free-synthetic"] = {"first": [1000.0 + i for i in range(10)], "second": [2000.0 + i for i in range(5)]}

# 4. non-finite values in the history and the summary.
r = init("nonfinite-synthetic")
for i, v in enumerate([1.0, float("nan"), float("inf"), float("-inf"), 2.0, float("inf")]):
    r.log({"x": v, "y": float(i), "z": float("nan") if i == 5 else float(i)}, step=i)
r.summary["s_nan"] = float("nan")       # the SDK itself writes this as null (W&B shows no value)
r.finish()
'''


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """The runs above, written once, synced once by a real `marinctl sync` process."""
    out = tmp_path_factory.mktemp("sdk")
    logged = sdk_write(out, WRITER)
    home = tmp_path_factory.mktemp("home")
    env = {**sdk_env(), "MARINCTL_HOME": str(home)}
    done = marinctl_run(["sync", str(out / "wandb")], env=env, timeout=180)
    assert done.returncode == 0, done.stderr
    return {"out": out, "logged": logged, "home": home, "sync_stderr": done.stderr, "sync_stdout": done.stdout,
            "files": wandb_files(out / "wandb")}


@pytest.fixture
def mc(cli, mirrored):
    """`marinctl --home <the module's store> ARGS` in-process."""
    return lambda *args: cli("--home", str(mirrored["home"]), *args)


def flatten(obj, prefix: str = "") -> dict:
    """Nested dicts joined with '.', as W&B's UI and exports name nested keys."""
    out = {}
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    else:
        out[prefix] = obj
    return out


# --- nested keys, commit=False, step axes -------------------------------------------------------------


def test_nested_dict_is_its_own_dotted_key_next_to_the_flat_one(mc, mirrored):
    got = export_values(mc, NESTED)
    steps = range(6)
    assert [got.get((s, "train.loss")) for s in steps] == [10.0 - s for s in steps]
    assert [got.get((s, "train/loss")) for s in steps] == [100.0 + s for s in steps]


def test_every_logged_scalar_comes_back_at_its_step(mc, mirrored):
    """commit=False rows merge with the next log at the same step; eval/acc keeps its own _step
    next to its define_metric step axis eval_step; non-scalars do not disturb the scalars."""
    assert_same_values(export_values(mc, NESTED), logged_values(mirrored["logged"][NESTED]["rows"]))


def test_commit_false_and_step_metric_rows_land_at_their_step(mc, mirrored):
    got = export_values(mc, NESTED)
    for s in range(6):
        assert got[(s, "partial")] == 2.0 * s and got[(s, "m/mean")] == float(s)
    assert {(s, got[(s, "eval/acc")], got[(s, "eval_step")]) for s in (0, 2, 4)} == {
        (0, 0.5, 0.0), (2, 0.52, 20.0), (4, 0.54, 40.0)}
    assert not any(k == "eval/acc" for s, k in got if s % 2)   # logged only at even steps
    assert got[(6, "scalar")] == 3.5
    texts = {k for s, k in got if s == 6} - {"scalar", "flag"}
    assert not any(k.startswith(("txt", "vec")) for k in texts), texts   # no text or list turned into numbers


def test_config_is_what_was_passed(mc):
    doc = cli_json(mc, "show", NESTED, "--json")
    assert doc["config"] == {"model": {"d": 768}, "lr": 0.1}


# --- summaries ------------------------------------------------------------------------------------------


def test_show_summary_is_the_summary_wandb_computes(mc, mirrored):
    oracle = leet_summary(mirrored["files"][NESTED][0])["summary"]
    ours = cli_json(mc, "show", NESTED, "--json")["summary"]
    want = {k: v for k, v in flatten(oracle).items() if not k.startswith("_")}
    got = {k: v for k, v in flatten(ours).items() if not k.startswith("_")}
    assert got == want


def test_summary_override_after_last_log_wins(mc):
    summary = cli_json(mc, "show", NESTED, "--json")["summary"]
    assert flatten(summary).get("note") == "a string"          # strings are kept
    assert flatten(summary).get("cfg.a") == 1


def test_summary_set_after_the_last_log_is_not_overwritten(mc):
    assert cli_json(mc, "show", NESTED, "--json")["summary"]["train/loss"] == 42.0


def test_show_summary_is_sorted_for_people(mc):
    """`show` lists the summary sorted by key."""
    _, out, _ = run_cli(mc, "show", NESTED)
    section = out.split("\nsummary\n", 1)[1].splitlines()
    keys = [line.split()[0] for line in section if line.startswith("  ") and line.split()]
    assert keys and keys == sorted(keys), keys


# --- resume -------------------------------------------------------------------------------------------------


def test_resume_with_steps_merges_config_and_keeps_every_row(mc, mirrored):
    doc = cli_json(mc, "show", RESUME_STEPS, "--json")
    assert doc["config"] == {"a": 1, "model": {"d": 64}, "b": 2}
    assert_same_values(export_values(mc, RESUME_STEPS), logged_values(mirrored["logged"][RESUME_STEPS]["rows"]))


def test_resume_with_steps_is_one_run(mc):
    runs = [r for r in cli_json(mc, "runs", "--json") if r["run"] == RESUME_STEPS]
    assert len(runs) == 1 and runs[0]["last_step"] == 14


def _related_runs(mc, run_id: str) -> list[dict]:
    return [r for r in cli_json(mc, "runs", "--json") if r["run"] == run_id or r["run"].startswith(run_id)]


def test_resume_without_steps_keeps_both_segments_reachable(mc, mirrored):
    truth = mirrored["logged"][RESUME_FREE]
    values = []
    for run in _related_runs(mc, RESUME_FREE):
        values += [v for (s, k), v in export_values(mc, run["run"]).items() if k == "loss"]
    assert sorted(values) == sorted(truth["first"] + truth["second"])


def test_resume_without_steps_warns_at_sync(mirrored):
    said = mirrored["sync_stderr"]
    assert RESUME_FREE in said and "resum" in said.lower(), said


def test_resume_without_steps_is_an_infrastructure_event(mc):
    ids = {r["run"] for r in _related_runs(mc, RESUME_FREE)}
    events = [e for e in cli_json(mc, "events", "--json") if e.get("run") in ids
              and "resum" in json.dumps(e).lower()]
    assert [e["kind"] for e in events] == ["infrastructure"], events
    step = events[0].get("step") or 0
    doc = cli_json(mc, "explain", "step", str(step), "--run", events[0]["run"], "--json")
    assert events[0]["title"] in [e["title"] for e in doc["context"]["events"]], doc["context"]["events"]


def test_resume_without_steps_merges_config(mc):
    for run in _related_runs(mc, RESUME_FREE):
        assert cli_json(mc, "show", run["run"], "--json")["config"] == {"a": 1, "model": {"d": 64}, "b": 2}


# --- a writer killed with SIGKILL -----------------------------------------------------------------------


KILLED = textwrap.dedent('''
    import sys, time, wandb
    out = sys.argv[1]
    run = wandb.init(mode="offline", dir=out, project="mirror-synthetic", id="killed-synthetic",
                     settings=wandb.Settings(x_disable_stats=True, console="off", silent=True,
                                             x_transaction_log_flush_interval=0.2))
    for i in range(100000):
        run.log({"loss": 5.0 - i * 1e-3, "step_copy": float(i)}, step=i)
        if i % 10 == 0:
            open(out + "/progress", "w").write(str(i))
        time.sleep(0.005)
''')


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_writer_killed_mid_run_every_flushed_row_is_stored(tmp_path, cli):
    out = tmp_path / "killed"
    out.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", KILLED, str(out)], env=sdk_env(), cwd=out,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        progress = out / "progress"
        deadline = time.time() + 60
        while time.time() < deadline and int((progress.read_text() if progress.exists() else "") or 0) < 60:
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)         # the training process dies; its wandb-core notices
        proc.wait(timeout=10)
        deadline = time.time() + 10               # and ends after flushing what it was handed
        while time.time() < deadline and _group_alive(proc.pid):
            time.sleep(0.05)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # whatever of the group is left (wandb-core)
        except ProcessLookupError:
            pass
    path = wandb_files(out / "wandb")["killed-synthetic"][0]
    exe = Path(sys.executable).with_name("wandb")
    dump = subprocess.run([str(exe), "leet", "inspect", "--json", str(path)], capture_output=True, text=True,
                          timeout=60, env=sdk_env())
    oracle = {}
    for line in dump.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "history":
            item = rec["history"]["item"]
            oracle[(int(item["_step"]), "loss")] = float(item["loss"])
            oracle[(int(item["_step"]), "step_copy")] = float(item["step_copy"])
    assert len(oracle) >= 2 * 40, "the killed writer flushed too little to test"
    run_cli(cli, "sync", str(path))
    assert_same_values(export_values(cli, "killed-synthetic"), oracle)
    state = next(r for r in cli_json(cli, "runs", "--json") if r["run"] == "killed-synthetic")["state"]
    assert state != "finished"                     # a killed run is not reported as finished


# --- non-finite values ------------------------------------------------------------------------------------

@pytest.fixture
def nonfinite_home(mirrored):
    return mirrored["home"]


def test_export_csv_spells_out_nonfinite_values(cli, nonfinite_home):
    rows = export_rows(lambda *a: cli("--home", str(nonfinite_home), *a), "nonfinite-synthetic", "--keys", "x")
    assert [float(v) if v not in ("NaN", "Infinity", "-Infinity") else v for _, _, v in rows] == [
        1.0, "NaN", "Infinity", "-Infinity", 2.0, "Infinity"]


def test_sql_json_spells_out_nonfinite_values_and_keeps_null_for_no_value(cli, nonfinite_home):
    doc = cli_json(lambda *a: cli("--home", str(nonfinite_home), *a), "sql",
                   "SELECT step, value, NULL AS nothing FROM history WHERE run = 'nonfinite-synthetic' AND key = 'x' ORDER BY step",
                   "--json")
    assert [r["value"] for r in doc] == [1.0, "NaN", "Infinity", "-Infinity", 2.0, "Infinity"]
    assert all(r["nothing"] is None for r in doc)


def test_sql_csv_spells_out_nonfinite_values(cli, nonfinite_home):
    _, out, _ = run_cli(lambda *a: cli("--home", str(nonfinite_home), *a), "sql",
                        "SELECT value FROM history WHERE run = 'nonfinite-synthetic' AND key = 'x' ORDER BY step", "--csv")
    assert out.split()[1:] == ["1.0", "NaN", "Infinity", "-Infinity", "2.0", "Infinity"]


def test_show_json_spells_out_nonfinite_summary(cli, nonfinite_home):
    """Non-finite summaries come from the last logged values (x: inf, z: NaN). A NaN set through
    `run.summary` is written by wandb 0.31 itself as `null` (value_json "null" in the file), so
    W&B shows no value for it (`wandb leet inspect --summary` has no s_nan), and neither do we."""
    summary = cli_json(lambda *a: cli("--home", str(nonfinite_home), *a), "show", "nonfinite-synthetic", "--json")["summary"]
    assert summary["x"] == "Infinity" and summary["z"] == "NaN"
    assert summary.get("s_nan") is None


def test_every_json_output_is_strict_json(cli, nonfinite_home):
    """Whatever the values, `--json` output parses without bare NaN/Infinity tokens."""
    mc = lambda *a: cli("--home", str(nonfinite_home), *a)  # noqa: E731
    for args in (("show", "nonfinite-synthetic", "--json"), ("runs", "--json"),
                 ("anomalies", "--run", "nonfinite-synthetic", "--json"),
                 ("explain", "step", "2", "--run", "nonfinite-synthetic", "--json"),
                 ("sql", "SELECT * FROM history", "--json")):
        cli_json(mc, *args)


def test_remote_nonfinite_values_survive_the_mirror(cli, wandb_server):
    from tests.fakes.synth import marin_run

    run = marin_run("synthetic-nonfinite", steps=40, layers=1, experts=2, norm_every=100, eval_every=100)
    run.set_values("train/loss", [10, 11, 12], [float("nan"), float("inf"), float("-inf")])
    wandb_server([run])
    run_cli(cli, "sync", "marin-community/marin_moe/synthetic-nonfinite")
    rows = {(s, k): v for s, k, v in export_rows(cli, "synthetic-nonfinite") if k == "train/loss"}
    assert [rows[(s, "train/loss")] for s in (10, 11, 12)] == ["NaN", "Infinity", "-Infinity"]


# --- remote runs: nested keys and summaries -----------------------------------------------------------------


@pytest.fixture
def remote_nested(cli, wandb_server):
    from tests.fakes.synth import marin_run

    run = marin_run("synthetic-nested-remote", steps=30, layers=1, experts=2, norm_every=100, eval_every=100)
    run.set_values("train.loss", list(range(30)), [1000.0 + s for s in range(30)])   # a nested dict, as W&B serves it
    run.summary["train/loss"] = 42.0          # set after the last log: W&B keeps it
    run.summary["note"] = "a string"
    run.summary["train"] = {"loss": 1029.0}
    wandb_server([run])
    run_cli(cli, "sync", "marin-community/marin_moe/synthetic-nested-remote")
    return run


def test_remote_dotted_and_slashed_keys_stay_apart(cli, remote_nested):
    got = export_values(cli, "synthetic-nested-remote")
    truth = {(s, k): v for s, k, v in remote_nested.long_rows() if not k.startswith("_")}
    assert_same_values(got, truth)


def test_remote_summary_is_the_runs_own_summary(cli, remote_nested):
    summary = cli_json(cli, "show", "synthetic-nested-remote", "--json")["summary"]
    assert summary["train/loss"] == 42.0 and summary["note"] == "a string"
    assert flatten(summary)["train.loss"] == 1029.0


INTERRUPTED = textwrap.dedent('''
    import sys, wandb
    out = sys.argv[1]
    run = wandb.init(mode="offline", dir=out, project="mirror-synthetic", id="interrupted-synthetic",
                     settings=wandb.Settings(x_disable_stats=True, console="off", silent=True))
    for i in range(20):
        run.log({"loss": 5.0 - i * 1e-2}, step=i)
    run.finish(exit_code=255)      # what the SDK's hook (and repro/demo on Ctrl-C) records for an interrupted run
''')


def test_an_interrupted_run_is_killed_not_finished(tmp_path, cli):
    """A run stopped by Ctrl-C carries exit code 255 in its exit record; W&B shows it as
    killed, so marinctl does too (and never as finished or failed)."""
    out = tmp_path / "interrupted"
    out.mkdir()
    subprocess.run([sys.executable, "-c", INTERRUPTED, str(out)], env=sdk_env(), cwd=out, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    run_cli(cli, "sync", str(out / "wandb"))
    state = next(r for r in cli_json(cli, "runs", "--json") if r["run"] == "interrupted-synthetic")["state"]
    assert state == "killed"
