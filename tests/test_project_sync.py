"""`marinctl sync ENTITY/PROJECT` at project scale, through the CLI against the loopback W&B fake.

- every run of a SYNTHETIC project of many short runs lands exactly (export = what the run logged),
  in a handful of aliased requests, never more at once than the client's concurrency;
- a re-sync of the unchanged project costs at most one request per listing page plus two (running
  runs that did not move included: W&B's listing says they did not);
- a finished run whose metadata changed is written without a history request; a run that logged
  more is fetched from its last stored step only; `--where` fetches only the matching runs;
- a sync SIGKILLed mid-project resumes with nothing lost or doubled;
- 429s during a project sync end complete, and every thread waits out the server's word;
- on a terminal, progress says runs done of total, rows and rate.
All runs are SYNTHETIC.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from datetime import timedelta

import pytest

from tests.blackbox import (cli_json, env_with, export_rows, marinctl_proc, marinctl_run, run_cli, start_wandb)
from tests.fakes.sweep import ENTITY, short_runs
from tests.fakes.wandb_history import system_events

P = "project-synthetic"
KEYS = ("train/loss", "optim/learning_rate", "grad/norm/total", "eval/paloma/macro_loss", "throughput/total_tokens")
HISTORY_OPS = ("RunsHistoryBatch", "HistoryPage", "RunParquetHistory", "RunTimestamps", "RunSystemEvents")


def _truth(run) -> list[tuple[int, str, float]]:
    return sorted(run.long_rows())


def _exported(cli, run_id: str) -> list[tuple[int, str, float]]:
    return sorted((s, k, float(v)) for s, k, v in export_rows(cli, run_id))


def _history_requests(server, since: int) -> list[tuple[str, dict]]:
    return [(op, v) for op, v in server.requests[since:] if op in HISTORY_OPS]


@pytest.fixture
def project(monkeypatch):
    """120 short finished runs and 6 running ones (two listing pages of 100)."""
    runs = short_runs(120, project=P, steps=30, keys=KEYS) + short_runs(6, project=P, steps=30, keys=KEYS,
                                                                     state="running", prefix="live")
    server = start_wandb(runs)
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    monkeypatch.setenv("MARINCTL_WANDB_CONCURRENCY", "3")
    yield server, runs
    server.stop()


def test_project_lands_whole_in_a_few_aliased_requests(cli, project):
    server, runs = project
    report = cli_json(cli, "sync", f"{ENTITY}/{P}", "--json")
    assert sorted(r["run"] for r in report["runs"]) == sorted(r.run_id for r in runs)
    assert sum(r["rows_added"] for r in report["runs"]) == sum(len(r.long_rows()) for r in runs)
    for run in runs[::25] + runs[-2:]:
        assert _exported(cli, run.run_id) == _truth(run), run.run_id
    ops = [op for op, _ in server.requests]
    assert ops.count("Runs") == 2                        # the listing: two pages
    assert 1 <= ops.count("RunsHistoryBatch") <= 10      # 126 runs' history, batched
    assert not set(ops) & {"HistoryPage", "RunParquetHistory", "RunSystemEvents", "RunTimestamps"}
    assert 2 <= server.in_flight_max <= 3                # side by side, within MARINCTL_WANDB_CONCURRENCY
    dupes = cli_json(cli, "sql", "SELECT run_pk, key_id, step FROM metrics GROUP BY ALL HAVING count(*) > 1", "--json")
    assert dupes == []


def test_resync_of_an_unchanged_project_is_its_listing(cli, project):
    server, runs = project
    run_cli(cli, "sync", f"{ENTITY}/{P}")
    before = len(server.requests)
    report = cli_json(cli, "sync", f"{ENTITY}/{P}", "--json")
    asked = [op for op, _ in server.requests[before:]]
    pages = 2
    assert len(asked) <= pages + 2, asked                # running runs that did not move cost nothing either
    assert asked.count("Runs") == pages
    assert all(r["rows_added"] == 0 for r in report["runs"]) and len(report["runs"]) == len(runs)


def test_only_moved_runs_are_asked_again(cli, project):
    server, runs = project
    run_cli(cli, "sync", f"{ENTITY}/{P}")
    finished, live = runs[7], runs[-1]
    finished.tags = finished.tags + ["relabelled"]       # metadata moved, history did not
    last = cli_json(cli, "show", live.run_id, "--json")["last_step"]
    live.extend(45)                                      # a running run logged 15 more steps
    before = len(server.requests)
    report = cli_json(cli, "sync", f"{ENTITY}/{P}", "--json")
    fetched = _history_requests(server, before)
    names = {v[k] for _, v in fetched for k in v if k.startswith("n")}
    assert names == {live.run_id}, names                 # the relabelled finished run is not asked again
    lows = [v[k] for _, v in fetched for k in v if k.startswith("lo")]
    assert lows and min(lows) == last + 1
    assert {r["run"]: r["rows_added"] for r in report["runs"]}[live.run_id] > 0
    assert _exported(cli, live.run_id) == _truth(live)
    assert [r["run"] for r in cli_json(cli, "runs", "--where", "tag:relabelled", "--json")] == [finished.run_id]


def _system_truth(run) -> list[tuple[str, float, float]]:
    """The system samples the fake serves for `run` (W&B's `events`, 500 samples), as stored rows."""
    rows = [json.loads(r) for r in system_events(run, 500)]
    return sorted((k, float(r["_timestamp"]), float(v)) for r in rows for k, v in r.items() if k.startswith("system."))


def _system_stored(cli, run_id: str) -> list[tuple[str, float, float]]:
    got = cli_json(cli, "sql", "SELECT k.key, s.time, s.value FROM system_samples s JOIN system_keys k USING (key_id)"
                   f" JOIN runs r USING (run_pk) WHERE r.run_id = '{run_id}'", "--json")
    return sorted((g["key"], float(g["time"]), float(g["value"])) for g in got)


def test_system_metrics_come_with_a_small_projects_batched_history(cli, monkeypatch):
    """A small project's runs (the hero lineage and ladder are a handful) carry the system charts a
    run synced alone does, in the same requests; a run whose history is here but whose set moved (a
    heartbeat) asks for the set alone, once."""
    runs = short_runs(10, project=P, steps=30, keys=KEYS) + short_runs(2, project=P, steps=30, keys=KEYS,
                                                                   state="running", prefix="live")
    server = start_wandb(runs)
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    try:
        report = cli_json(cli, "sync", f"{ENTITY}/{P}", "--json")
        assert len(report["runs"]) == len(runs)
        for run in runs:
            truth = _system_truth(run)
            assert truth, run.run_id                     # the fake serves samples for every run
            assert _system_stored(cli, run.run_id) == truth, run.run_id
        assert "RunSystemEvents" not in [op for op, _ in server.requests]   # no request per run
        finished = runs[3]
        finished.heartbeat_at = finished.heartbeat_at + timedelta(minutes=5)   # moved: W&B may hold new samples
        before = len(server.requests)
        run_cli(cli, "sync", f"{ENTITY}/{P}")
        fetched = _history_requests(server, before)
        assert {v[k] for _, v in fetched for k in v if k.startswith("n")} == {finished.run_id}
        assert [v[k] for _, v in fetched for k in v if k[0] == "e" and k[1:].isdigit()] == [500]
        assert _system_stored(cli, finished.run_id) == _system_truth(finished)
        before = len(server.requests)
        run_cli(cli, "sync", f"{ENTITY}/{P}")
        assert _history_requests(server, before) == []   # fetched for this heartbeat: not asked again
    finally:
        server.stop()


def test_a_sweep_leaves_system_metrics_to_each_runs_own_sync_and_says_so(cli, project):
    server, runs = project
    code, _, err = cli("sync", f"{ENTITY}/{P}")
    assert code == 0, err
    assert f"system metrics (GPU, CPU, memory) left for {len(runs)} runs of {ENTITY}/{P}" in err
    assert _system_stored(cli, runs[5].run_id) == []
    run_cli(cli, "sync", f"{ENTITY}/{P}/{runs[5].run_id}")    # the run's own sync brings them
    assert _system_stored(cli, runs[5].run_id) == _system_truth(runs[5])


def test_a_run_synced_by_another_process_meanwhile_is_not_written_twice(cli, monkeypatch):
    """`sync E/P/RUN` (or a watch keeping RUN in sync) lands the run while a project sync of E/P has
    its batch in flight: the project writes none of those steps again, and a run whose lock another
    process holds is left to it."""
    runs = short_runs(3, project=P, steps=30, keys=KEYS, state="running", prefix="live")
    alone = runs[1]
    done: list[subprocess.CompletedProcess] = []

    def meanwhile(op: str, n: int) -> None:
        if op == "RunsHistoryBatch" and n == 0:   # the project's batch is asked: another process syncs one run
            done.append(marinctl_run(["sync", f"{ENTITY}/{P}/{alone.run_id}"], env=env_with(WANDB_BASE_URL=server.url)))

    server = start_wandb(runs, on_request=meanwhile)
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    try:
        run_cli(cli, "sync", f"{ENTITY}/{P}")
        assert done and done[0].returncode == 0, done[0].stderr if done else "the other sync never ran"
        dupes = cli_json(cli, "sql", "SELECT run_pk, key_id, step FROM metrics GROUP BY ALL HAVING count(*) > 1", "--json")
        assert dupes == []
        for run in runs:
            assert _exported(cli, run.run_id) == _truth(run), run.run_id
        for run in runs:                                      # 15 more steps, while one run's lock is held
            run.extend(45)
        from marinctl import paths
        from marinctl.store import open_store
        from marinctl.store.synclock import acquire

        with acquire(open_store(), f"{ENTITY}/{P}/{alone.run_id}", owner="a SYNTHETIC follower"):
            run_cli(cli, "sync", f"{ENTITY}/{P}")
            assert _exported(cli, alone.run_id) != _truth(alone)      # left to the lock's holder
            assert _exported(cli, runs[0].run_id) == _truth(runs[0])
        run_cli(cli, "sync", f"{ENTITY}/{P}")
        assert _exported(cli, alone.run_id) == _truth(alone)
    finally:
        server.stop()


def test_where_fetches_only_the_matching_runs(cli, project):
    server, runs = project
    report = cli_json(cli, "sync", f"{ENTITY}/{P}", "--where", "state:running", "--json")
    assert sorted(r["run"] for r in report["runs"]) == sorted(r.run_id for r in runs if r.state == "running")
    names = {v[k] for _, v in _history_requests(server, 0) for k in v if k.startswith("n")}
    assert names == {r.run_id for r in runs if r.state == "running"}
    assert {r["run"] for r in cli_json(cli, "runs", "--json")} == names


def test_sync_where_names_a_bad_term_before_any_request(cli, project):
    server, _ = project
    code, out, err = cli("sync", f"{ENTITY}/{P}", "--where", "state:running lr>=1e-3")
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 2 and "lr>=1e-3" in lines[0] and "unknown field" in lines[0], err
    assert server.requests == []


# --- killed mid-project ------------------------------------------------------------------------------

def test_a_project_sync_killed_mid_way_resumes_with_nothing_lost_or_doubled(cli, tmp_path, monkeypatch):
    runs = short_runs(60, project=P, steps=40, keys=KEYS)
    fired: list[int] = []
    target: dict[str, int] = {}

    def kill_at_seventh_batch(op, n):
        if op == "RunsHistoryBatch" and n == 6 and target.get("pid") and not fired:
            fired.append(n)
            threading.Timer(0.1, os.kill, (target["pid"], signal.SIGKILL)).start()

    server = start_wandb(runs, on_request=kill_at_seventh_batch)
    home = tmp_path / "home"
    env = env_with(MARINCTL_HOME=str(home), WANDB_BASE_URL=server.url, MARINCTL_WANDB_CONCURRENCY="2")
    try:
        # small requests, so the kill lands with some units committed and others not
        proc = marinctl_proc(["sync", f"{ENTITY}/{P}"], env={**env, "MARINCTL_PROJECT_BATCH_VALUES": "3000"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        target["pid"] = proc.pid
        _, err = proc.communicate(timeout=120)
        assert fired and proc.returncode == -signal.SIGKILL, (proc.returncode, err.decode()[-2000:])
        mc = lambda *a: cli("--home", str(home), *a)      # noqa: E731
        partial = cli_json(mc, "runs", "--json")
        assert 0 < len(partial) < len(runs)              # some units landed, some did not
        monkeypatch.setenv("WANDB_BASE_URL", server.url)
        run_cli(mc, "sync", f"{ENTITY}/{P}")
    finally:
        server.stop()
    assert len(cli_json(mc, "runs", "--json")) == len(runs)
    for run in runs:
        assert _exported(mc, run.run_id) == _truth(run), run.run_id
    assert cli_json(mc, "sql", "SELECT run_pk, key_id, step FROM metrics GROUP BY ALL HAVING count(*) > 1", "--json") == []


# --- rate limits ---------------------------------------------------------------------------------------

def test_429s_during_a_project_sync_end_complete_and_hold_every_thread(cli, monkeypatch):
    """Every thread waits out a 429's Retry-After, not only the one that met it. Checked on the
    client's own events, not on arrival times at the server (a request sent before the 429 may
    arrive late on a loaded machine): each request passes the W&B client's pacer, and every pass
    through it that began after the 429's hold was set ended at the hold's end or later."""
    from marinctl.sources import http
    from tests.fakes.wandb_server import Faults

    gates: list[tuple[float, float]] = []        # (entered, left) the pacer, per request
    holds: list[tuple[float, float]] = []        # (set at, held until)
    wait, hold = http.Pacer.wait, http.Pacer.hold

    def gate(self) -> None:
        entered = time.monotonic()
        wait(self)
        gates.append((entered, time.monotonic()))

    def held(self, seconds: float) -> None:
        hold(self, seconds)
        holds.append((time.monotonic(), self._held_until))

    monkeypatch.setattr(http.Pacer, "wait", gate)
    monkeypatch.setattr(http.Pacer, "hold", held)
    runs = short_runs(40, project=P, steps=30, keys=KEYS)
    server = start_wandb(runs, faults=Faults(rate_limits=[(3, 1)], rate_limit_every=7, retry_after=1.0,
                                             ops=("RunsHistoryBatch",)))
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    monkeypatch.setenv("MARINCTL_WANDB_CONCURRENCY", "4")
    monkeypatch.setenv("MARINCTL_PROJECT_BATCH_VALUES", "2000")   # many requests, so several are in flight
    try:
        report = cli_json(cli, "sync", f"{ENTITY}/{P}", "--json")
    finally:
        server.stop()
    limited = sorted(n for op, n in server.faulted if op == "RunsHistoryBatch")
    assert len(limited) >= 2, server.faulted
    assert sum(r["rows_added"] for r in report["runs"]) == sum(len(r.long_rows()) for r in runs)
    for run in runs[::9]:
        assert _exported(cli, run.run_id) == _truth(run)
    assert len(gates) >= server.stats["RunsHistoryBatch"], "a request went around the pacer"
    assert holds, "no 429 held the pacer"
    set_at, until = holds[0]
    after = [(entered, left) for entered, left in gates if entered > set_at]
    assert after, "no request came after the first 429: nothing was held"
    early = [left for entered, left in after if entered < until and left < until]
    assert early == [], f"{len(early)} requests left the pacer before the server's Retry-After ended"


# --- progress ---------------------------------------------------------------------------------------------

def test_progress_on_a_terminal_counts_runs_and_rows(tmp_path, project):
    import pty

    server, runs = project
    env = env_with(MARINCTL_HOME=str(tmp_path / "home"), WANDB_BASE_URL=server.url, COLUMNS="160",
                   MARINCTL_PROJECT_BATCH_VALUES="4000")
    master, slave = pty.openpty()
    proc = marinctl_proc(["sync", f"{ENTITY}/{P}"], env=env, stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    try:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
        proc.wait(timeout=120)
    text = seen.decode(errors="replace")
    assert proc.returncode == 0, text[-2000:]
    assert f"/{len(runs)}" in text and "rows" in text and "runs/s" in text, text[-2000:]


def test_a_run_deleted_between_listing_and_fetch_is_left_out(cli, monkeypatch):
    runs = short_runs(12, project=P, steps=30, keys=KEYS)
    gone = runs[5]

    def delete_at_first_batch(op, n):
        if op == "RunsHistoryBatch" and n == 0:
            server.runs.pop(gone.run_id, None)

    server = start_wandb(runs, on_request=delete_at_first_batch)
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    try:
        report = cli_json(cli, "sync", f"{ENTITY}/{P}", "--json")
    finally:
        server.stop()
    assert sorted(r["run"] for r in report["runs"]) == sorted(r.run_id for r in runs if r is not gone)
    assert {r["run"] for r in cli_json(cli, "runs", "--json")} == {r.run_id for r in runs if r is not gone}
    for run in runs[4:7]:
        if run is not gone:
            assert _exported(cli, run.run_id) == _truth(run)


def test_detection_past_32_runs_is_left_for_later_and_done_on_request(cli, monkeypatch):
    runs = short_runs(34, project=P, steps=300, keys=KEYS)
    spiky = runs[20]
    spiky.set_values("train/loss", [250], [40.0])            # one loss spike, SYNTHETIC
    server = start_wandb(runs)
    monkeypatch.setenv("WANDB_BASE_URL", server.url)
    try:
        code, out, err = cli("sync", f"{ENTITY}/{P}", "--json")
        assert code == 0, err
        report = json.loads(out)
        assert report["detection_deferred"] == 34 and "anomaly detection left for 34 runs" in err
        assert cli_json(cli, "anomalies", "--run", spiky.run_id, "--json") == []
        _, text, _ = run_cli(cli, "sync", f"{ENTITY}/{P}")
        assert "34 of 34 runs unchanged" in text and len(text.splitlines()) < 5
        before = len(server.requests)
        run_cli(cli, "sync", f"{ENTITY}/{P}", "--detect")
        assert [op for op, _ in server.requests[before:]] == ["Runs"]   # scoring asks W&B for nothing
    finally:
        server.stop()
    found = cli_json(cli, "anomalies", "--run", spiky.run_id, "--json")
    assert any(a["step"] == 250 and a["metric"] == "train/loss" for a in found), found


def test_where_with_a_single_run_target_is_bad_input(cli, project):
    server, runs = project
    code, out, err = cli("sync", f"{ENTITY}/{P}/{runs[0].run_id}", "--where", "state:finished")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and "--where selects runs of a W&B project" in lines[0] and len(lines) == 2, err
    assert server.requests == []
