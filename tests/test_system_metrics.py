"""System metrics W&B records beside the history: mirrored, and drawn in the `m` pane.

- Local: a real wandb SDK run written offline WITH its system monitor on (sampling every 0.1 s,
  the smallest interval the SDK allows) is synced through the CLI; what the store holds is
  compared with the stats records as W&B's own reader decodes them (`wandb leet inspect --json`,
  the Go reader wandb 0.31 ships: its Python `datastore` reader is gone from the wheel), keys
  spelled as W&B's server spells them (`system.` + the file's key). A file read again, or read
  while it grows, adds no sample twice. Pilot presses `m` and the samples are on screen, also
  while the run is still being written (watch's live local follow).
- Remote: the fake W&B server's `events` stream (real shape; checked against the wandb SDK's
  `run.history(stream="system")`) synced through the CLI equals what the SDK reads, is shown
  by `m`, and a sync killed before or at the events request (asked after the history) resumes
  to the same set.
All runs are SYNTHETIC.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from repro.wandb_log import teardown as teardown_wandb  # wandb.teardown() that cannot wait for ever
from tests.blackbox import env_with, marinctl_proc, marinctl_run, run_cli, sdk_env, sdk_write, wandb_files
from tests.watch_pilot import open_watch, run_test, wait_for_text

E, P = "synthetic-lab", "system-synthetic"
SAMPLES_SQL = ("SELECT k.key, s.time, s.value FROM system_samples s JOIN system_keys k USING (key_id)"
               " JOIN runs r USING (run_pk) WHERE r.run_id = '{run}' ORDER BY 1, 2")
PLACEMENT = "x: the step at each sample's time"
TOKEN = "ghp_SYNTHETIC0not0a0real0token"

WRITER = '''
    run = wandb.init(project="system-synthetic", name="stats-synthetic", tags=["synthetic"],
                     settings=wandb.Settings(console="off", silent=True, x_stats_sampling_interval=0.1))
    for i in range(20):
        run.log({"train/loss": 1.0 / (i + 1)})
        time.sleep(0.1)
    run.finish()
    logged["run_id"] = run.id
'''


@pytest.fixture(scope="module")
def stats_run(tmp_path_factory) -> tuple[str, Path]:
    """(run id, its .wandb file): a 2-second SDK run with the system monitor sampling every 0.1 s,
    started in a git checkout whose remote was cloned with a (SYNTHETIC) token in its URL."""
    out = tmp_path_factory.mktemp("stats-run")
    git = ["git", "-C", str(out), "-c", "user.name=synthetic", "-c", "user.email=synthetic@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "remote", "add", "origin", f"https://{TOKEN}@example.invalid/lab/synthetic.git"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "synthetic"], check=True)
    logged = sdk_write(out, WRITER)
    files = wandb_files(out)[logged["run_id"]]
    assert len(files) == 1
    return logged["run_id"], files[0]


@pytest.fixture(scope="module")
def stats_home(stats_run, tmp_path_factory) -> Path:
    """A data home `marinctl sync` filled with the stats run once, for the tests that only read it."""
    home = tmp_path_factory.mktemp("stats-home")
    done = marinctl_run(["sync", str(stats_run[1])], env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return home


def _epoch(text: str) -> float:
    """RFC 3339 with nanoseconds (Go's format) to unix seconds, without losing the digits datetime drops."""
    head, _, frac = text.rstrip("Z").partition(".")
    whole = datetime.fromisoformat(head).replace(tzinfo=timezone.utc).timestamp()
    return whole + (float("0." + frac) if frac else 0.0)


def wandb_read_stats(path: Path) -> list[tuple[str, float, float]]:
    """The file's stats records as W&B's own reader decodes them, keys as W&B's server names them."""
    exe = Path(sys.executable).with_name("wandb")
    proc = subprocess.run([str(exe), "leet", "inspect", "--json", str(path)], capture_output=True, text=True,
                          timeout=60, env=sdk_env())
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") != "stats":
            continue
        t = _epoch(rec["stats"]["timestamp"])
        for key, value in rec["stats"]["item"].items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out.append(("system." + key, t, float(value)))
    return sorted(out)


def stored_samples(cli, run: str, *home: str) -> list[tuple[str, float, float]]:
    code, out, err = cli(*home, "sql", SAMPLES_SQL.format(run=run), "--json")
    assert code == 0, err
    return [(r["key"], float(r["time"]), float(r["value"])) for r in json.loads(out)]


def assert_same_samples(got, want) -> None:
    assert len(got) == len(set(got)), "a sample was stored twice"
    assert len(got) == len(want), (len(got), len(want))
    for (k1, t1, v1), (k2, t2, v2) in zip(sorted(got), sorted(want)):
        assert k1 == k2 and abs(t1 - t2) < 1e-6 and v1 == v2, ((k1, t1, v1), (k2, t2, v2))


# --- local .wandb files -------------------------------------------------------------------------------


def test_local_stats_records_are_stored_as_wandb_reads_them(stats_run, stats_home, cli):
    run_id, path = stats_run
    want = wandb_read_stats(path)
    keys = {k for k, _, _ in want}
    assert {"system.cpu", "system.memory_percent"} <= keys and len({t for _, t, _ in want}) >= 5, keys
    assert_same_samples(stored_samples(cli, run_id, "--home", str(stats_home)), want)
    # history stays what was logged: the samples are not history keys
    code, out, err = cli("--home", str(stats_home), "sql", "SELECT key FROM metric_keys ORDER BY 1", "--json")
    assert code == 0 and not [r["key"] for r in json.loads(out) if r["key"].startswith("system")], out


def test_a_file_read_again_or_while_it_grows_adds_no_sample_twice(stats_run, cli, tmp_path):
    """A file written in two goes (a sync between them, as `sync --follow` reads a live run), then
    replaced by a copy of itself (read again from its first byte), holds each sample once."""
    run_id, path = stats_run
    data = path.read_bytes()
    live = tmp_path / "wandb" / path.parent.name / path.name
    live.parent.mkdir(parents=True)
    live.write_bytes(data[: len(data) // 2 + 5])          # cut mid-record, as a writer leaves it
    run_cli(cli, "sync", str(live))
    half = stored_samples(cli, run_id)
    assert 0 < len(half) < len(wandb_read_stats(path))
    with open(live, "ab") as fh:
        fh.write(data[len(data) // 2 + 5:])
    run_cli(cli, "sync", str(live))
    assert_same_samples(stored_samples(cli, run_id), wandb_read_stats(path))
    copy = live.with_name("copy.tmp")
    copy.write_bytes(data)
    os.replace(copy, live)                                 # a new file: read from the start
    run_cli(cli, "sync", str(live))
    assert_same_samples(stored_samples(cli, run_id), wandb_read_stats(path))


@pytest.mark.asyncio
async def test_m_shows_the_stats_a_local_run_recorded(stats_run, cli, tmp_path):
    run_id, path = stats_run
    run_cli(cli, "sync", str(path))
    app = open_watch(tmp_path / "home" / "marinctl.duckdb", run_id)
    async with run_test(app) as pilot:
        await wait_for_text(pilot, "train/loss")
        await pilot.press("m")
        text = await wait_for_text(pilot, "system.cpu", "system.memory_percent", PLACEMENT)
        assert "no system metrics stored" not in text


def wandb_read_environment(path: Path) -> dict:
    """The file's environment records as W&B's own reader decodes them, merged in file order
    (less the writer's id and the user's e-mail, which marinctl does not keep)."""
    exe = Path(sys.executable).with_name("wandb")
    proc = subprocess.run([str(exe), "leet", "inspect", "--json", str(path)], capture_output=True, text=True,
                          timeout=60, env=sdk_env())
    assert proc.returncode == 0, proc.stderr
    env: dict = {}
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "environment":
            env.update(rec["environment"])
    return {k: v for k, v in env.items() if k not in ("writer_id", "email")}


def test_local_environment_records_are_stored_as_wandb_reads_them(stats_run, stats_home, cli):
    """LEET's environment sidebar, kept: os, python, host, program, CPU, memory, disk … as W&B reads them."""
    run_id, path = stats_run
    want = wandb_read_environment(path)
    assert {"os", "python", "host", "cpu_count", "memory", "git"} <= set(want), want
    # the SDK writes the git remote without the token it was cloned with; nothing of it is stored
    assert want["git"]["remote_url"] == "https://example.invalid/lab/synthetic.git", want["git"]
    code, out, err = cli("--home", str(stats_home), "sql", f"SELECT environment FROM runs WHERE run_id = '{run_id}'",
                         "--json")
    assert code == 0, err
    assert json.loads(json.loads(out)[0]["environment"]) == want
    assert TOKEN not in out


@pytest.mark.asyncio
async def test_i_shows_the_environment_a_local_run_ran_in_and_search_finds_it(stats_run, cli, tmp_path):
    run_id, path = stats_run
    want = wandb_read_environment(path)
    run_cli(cli, "sync", str(path))
    app = open_watch(tmp_path / "home" / "marinctl.duckdb", run_id)
    async with run_test(app) as pilot:
        await wait_for_text(pilot, "train/loss")
        await pilot.press("i")
        text = await wait_for_text(pilot, "Environment (", "Config (")
        # the SDK run has no config; its environment's rows follow (how many fit above the fold
        # depends on how long this machine's CPU name and the test's paths are)
        assert "Config (0)" in text and int(re.search(r"Environment \((\d+)\)", text).group(1)) > 5, text
        await pilot.click("#pane-search")
        await pilot.press(*"cpython")
        text = await wait_for_text(pilot, "Environment (1 of ")
        assert want["python"] in text and "cpu_count" not in text
        assert "Config (0)" in text and "(0 of 0)" not in text      # nothing stored is not "0 of 0" found
        await pilot.press(*["backspace"] * len("cpython"), *"memory.total")
        text = await wait_for_text(pilot, "Environment (1 of ")
        gib = int(want["memory"]["total"]) / 2**30                  # W&B records bytes, as text
        assert f"{gib:.1f} GiB" in text and want["memory"]["total"] not in text


LIVE_WRITER = textwrap.dedent(r'''
    import os, sys, time
    import wandb
    out = sys.argv[1]
    run = wandb.init(mode="offline", dir=out, project="system-synthetic", name="live-stats-synthetic",
                     settings=wandb.Settings(console="off", silent=True, x_stats_sampling_interval=0.1,
                                             x_transaction_log_flush_interval=0.1))
    for s in range(30):
        run.log({"train/loss": 5.0 - s * 0.01}, step=s, commit=True)
        time.sleep(0.05)
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(out, "stop")) and time.time() < deadline:
        time.sleep(0.05)
    run.finish()
    from repro.wandb_log import teardown  # bounded: wandb's own can wait for ever
    teardown()
''')


@pytest.mark.asyncio
async def test_m_shows_stats_of_a_run_still_being_written(store, tmp_path):
    """watch following a `.wandb` dir (its live local follow) draws the samples while the run writes."""
    out = tmp_path / "live"
    out.mkdir()
    err_file = tmp_path / "writer.err"      # a file: a pipe stays open in wandb-core after the writer ends
    with err_file.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", LIVE_WRITER, str(out)], env=sdk_env(),
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 90
        while not list(out.glob("wandb/*/*.wandb")) and time.monotonic() < deadline:
            assert proc.poll() is None, err_file.read_text()
            time.sleep(0.1)
        app = open_watch(store.path, str(out / "wandb"), autosync=True)
        async with run_test(app) as pilot:
            await wait_for_text(pilot, "▏step 29", timeout=60)
            await pilot.press("m")
            text = await wait_for_text(pilot, "system.cpu", PLACEMENT, timeout=30)
            assert proc.poll() is None and "finished" not in text   # still being written
    finally:
        (out / "stop").touch()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


# --- W&B's events stream ------------------------------------------------------------------------------


def _remote_run(run_id: str):
    from tests.fakes.synth import marin_run

    return marin_run(run_id, steps=400, entity=E, project=P, state="finished", layers=1, experts=2,
                     norm_every=1000, eval_every=1000)


def sdk_system_rows(url: str, path: str) -> list[tuple[str, float, float]]:
    """What the wandb SDK reads as the run's system metrics (`history(stream="system")`)."""
    wandb = pytest.importorskip("wandb")
    try:
        api = wandb.Api(api_key="x" * 40, overrides={"base_url": url})
        rows = api.run(path).history(stream="system", pandas=False)
    finally:
        teardown_wandb()
    return sorted((k, float(r["_timestamp"]), float(v)) for r in rows for k, v in r.items() if k.startswith("system."))


@pytest.fixture
def remote(wandb_server):
    run = _remote_run("events-synthetic")
    return wandb_server([run], exported_until={run.run_id: 0}), run


@pytest.mark.asyncio
async def test_remote_system_metrics_equal_what_the_sdk_reads_and_m_shows_them(remote, cli, tmp_path):
    server, run = remote
    want = sdk_system_rows(server.url, f"{E}/{P}/{run.run_id}")
    assert len(want) > 100 and {"system.gpu.0.gpu", "system.cpu"} <= {k for k, _, _ in want}
    run_cli(cli, "sync", f"{E}/{P}/{run.run_id}")
    assert server.stats["RunSystemEvents"] == 1 and not server.unknown   # the schema answered both clients
    assert_same_samples(stored_samples(cli, run.run_id), want)
    run_cli(cli, "sync", f"{E}/{P}/{run.run_id}")              # unchanged: not asked again
    assert server.stats["RunSystemEvents"] == 1
    last_gpu = max((t, v) for k, t, v in want if k == "system.gpu.0.gpu")[1]
    app = open_watch(tmp_path / "home" / "marinctl.duckdb", run.run_id)
    async with run_test(app) as pilot:
        await wait_for_text(pilot, "train/loss")
        await pilot.press("m")
        text = await wait_for_text(pilot, "system.gpu.0.gpu", PLACEMENT)
        assert f"{last_gpu:.4g}" in text, last_gpu            # the newest sample, under the cursor at the end


@pytest.mark.parametrize("xmode", ["step", "wall"])
def test_each_sample_sits_at_the_step_the_run_was_at_when_it_was_taken(remote, cli, tmp_path, xmode):
    """The placement the pane states: a sample's x is the step its time falls at on the run's own
    logged (_step, _timestamp) — in wall mode, its hours since the run's first step — so the cursor
    lines up with the main charts. Checked on buckets holding one sample (exactly that sample)."""
    import numpy as np

    from marinctl.views.watch_view import ViewParams, build_view
    from marinctl.store import Store

    server, run = remote
    want = sdk_system_rows(server.url, f"{E}/{P}/{run.run_id}")
    run_cli(cli, "sync", f"{E}/{P}/{run.run_id}")
    steps, times = run.series["_timestamp"]
    view = build_view(Store(tmp_path / "home" / "marinctl.duckdb"),
                      ViewParams(ref=run.run_id, system=True, xmode=xmode, buckets=4000))
    panel = next(p for p in view.system_panels if p.key == "system.cpu")
    taken = {t: v for k, t, v in want if k == "system.cpu" and times[0] <= t <= times[-1]}
    at_step = {round(float(np.interp(t, times, steps)), 6): v for t, v in taken.items()}
    single = panel.count == 1
    assert single.sum() > 50
    for step, x, value in zip(panel.step_hi[single], panel.x[single], panel.last[single]):
        assert at_step[round(float(step), 6)] == value
        t = float(np.interp(step, steps, times))
        expect = (t - times[0]) / 3600.0 if xmode == "wall" else step
        assert abs(x - expect) < 1e-6, (x, expect)


def test_a_running_remote_run_gets_its_latest_sample_set(remote, cli):
    """A run that moved is asked again, and its stored set is replaced by W&B's latest one."""
    server, run = remote
    run.state = "running"
    run_cli(cli, "sync", f"{E}/{P}/{run.run_id}")
    run.extend(600)
    run_cli(cli, "sync", f"{E}/{P}/{run.run_id}")
    assert server.stats["RunSystemEvents"] == 2
    assert_same_samples(stored_samples(cli, run.run_id), sdk_system_rows(server.url, f"{E}/{P}/{run.run_id}"))


@pytest.mark.parametrize("op", ["HistoryPage", "RunSystemEvents"])
def test_a_sync_killed_before_or_at_the_events_request_resumes_to_the_same_set(tmp_path, cli, wandb_server, op):
    run = _remote_run("events-kill-synthetic")
    fired = threading.Event()
    pid: list[int] = []

    def kill_at(name, n):
        if name == op and n == 0 and pid and not fired.is_set():
            fired.set()
            os.kill(pid[0], signal.SIGKILL)

    server = wandb_server([run], exported_until={run.run_id: 0}, on_request=kill_at)
    home = tmp_path / "killed"
    proc = marinctl_proc(["sync", f"{E}/{P}/{run.run_id}"], env=env_with(MARINCTL_HOME=str(home)),
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pid.append(proc.pid)
    _, err = proc.communicate(timeout=120)
    assert fired.is_set() and proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    run_cli(cli, "--home", str(home), "sync", f"{E}/{P}/{run.run_id}")
    got = stored_samples(cli, run.run_id, "--home", str(home))
    assert_same_samples(got, sdk_system_rows(server.url, f"{E}/{P}/{run.run_id}"))


def test_a_gpu_node_s_environment_reads_one_row_per_gpu_field_with_sizes_in_binary_units():
    """What W&B records on a GPU node (a SYNTHETIC record in its shape: sizes as text, GPUs as a list)."""
    from marinctl.views.run_panes import environment_rows

    env = {"gpu_count": 2, "gpu_type": "NVIDIA H100 80GB HBM3", "memory": {"total": "2164392570880"},
           "gpu_nvidia": [{"name": "NVIDIA H100 80GB HBM3", "memory_total": "85520809984", "cuda_cores": 16896},
                          {"name": "NVIDIA H100 80GB HBM3", "memory_total": "85520809984", "cuda_cores": 16896}],
           "args": ["--config", "synthetic.yaml"]}
    rows = dict(environment_rows(env))
    assert rows["gpu_nvidia.1.memory_total"] == "79.6 GiB" and rows["gpu_nvidia.0.cuda_cores"] == "16896"
    assert rows["memory.total"] == "2.0 TiB" and rows["args"] == '["--config", "synthetic.yaml"]'
