"""marinctl's W&B mirror against the loopback W&B-compatible server (SYNTHETIC runs).

Ground truth is the generator's own (step, key, value) rows; `marinctl export` must
reproduce them exactly — after faults, rewinds, forks, incremental syncs and a SIGKILL.
"""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repro.wandb_log import teardown as teardown_wandb  # wandb.teardown() that cannot wait for ever
from marinctl.store import Store
from tests.fakes.synth import hero_lineage, ladder_runs, marin_run
from tests.fakes.wandb_server import Faults

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "marin-community/marin_moe"


def _export(cli, run: str, *extra: str) -> list[tuple[int, str, float]]:
    code, out, err = cli("export", run, *extra)
    assert code == 0, err
    rows = list(csv.reader(io.StringIO(out)))
    assert rows[0] == ["step", "key", "value"]
    return [(int(s), k, float(v)) for s, k, v in rows[1:]]


def _truth(run) -> list[tuple[int, str, float]]:
    return sorted(run.long_rows())


def test_sync_mirrors_every_row_and_export_reproduces_it(cli, wandb_server, monkeypatch):
    from marinctl.sources import wandb_parquet
    from marinctl.sync import wandb as wandb_sync

    monkeypatch.setattr(wandb_sync, "PARQUET_MIN_STEPS", 100)  # small runs still take the export path
    monkeypatch.setattr(wandb_parquet, "DOWNLOADS_AT_ONCE", 1)  # and one part at a time
    runs = hero_lineage(300) + ladder_runs(200)
    server = wandb_server(runs)
    code, out, err = cli("sync", PROJECT, "--json")
    assert code == 0, err
    report = json.loads(out)
    assert {r["run"] for r in report["runs"]} == {r.run_id for r in runs}
    for r in runs:
        assert _export(cli, r.run_id) == _truth(r), r.run_id
    # the history came through parquet exports plus live windows, not one request per step
    assert server.stats["RunParquetHistory"] >= 1
    # stitched hero: each step from the newest run covering it; parents' overrun ignored
    root, mid, leaf = runs[:3]
    stitched = _export(cli, "hero", "--stitched")
    expect = sorted([x for x in _truth(root) if x[0] <= mid.fork_step]
                    + [x for x in _truth(mid) if x[0] <= leaf.fork_step] + _truth(leaf))
    assert stitched == expect
    code, out, _ = cli("show", "hero", "--json")
    lineage = json.loads(out)["lineage"]
    assert [x["run"] for x in lineage] == [r.run_id for r in runs[:3]]
    assert lineage[1]["from_step"] == mid.fork_step + 1


def test_incremental_sync_fetches_only_new_steps(cli, wandb_server):
    run = marin_run("synthetic-live", steps=500, state="running")
    server = wandb_server([run], exported_until={"synthetic-live": 400})
    assert cli("sync", f"{PROJECT}/synthetic-live")[0] == 0
    before = dict(server.stats)
    run.extend(1499)  # 1000 new steps arrive
    code, out, err = cli("sync", f"{PROJECT}/synthetic-live", "--json")
    assert code == 0, err
    report = json.loads(out)["runs"][0]
    assert report["last_step"] == 1499
    assert _export(cli, "synthetic-live") == _truth(run)
    pages = server.stats["HistoryPage"] - before.get("HistoryPage", 0)
    assert pages <= 4  # the tail check plus a few windows, not a re-download
    # a sync with nothing new adds no rows
    code, out, _ = cli("sync", f"{PROJECT}/synthetic-live", "--json")
    assert json.loads(out)["runs"][0]["rows_added"] == 0


def test_faults_end_with_identical_mirror(cli, wandb_server):
    runs = hero_lineage(200)
    faults = Faults(rate_limit_every=5, retry_after=0.05, server_errors=[(2, 3)], truncate_every=7,
                    graphql_error_every=11, empty_pages=(0,))
    server = wandb_server(runs, faults=faults, exported_until={r.run_id: 0 for r in runs})
    code, out, err = cli("sync", PROJECT, "--json")
    assert code == 0, err
    for r in runs:
        assert _export(cli, r.run_id) == _truth(r)
    assert server.stats["HistoryPage"] > 0


def test_rewind_is_detected_and_resynced(cli, wandb_server):
    run = marin_run("synthetic-rewind", steps=800, state="running")
    server = wandb_server([run], exported_until={"synthetic-rewind": 0})
    assert cli("sync", f"{PROJECT}/synthetic-rewind")[0] == 0
    # history rewritten from step 500 (lastStep first goes back, then forward again)
    run.rewrite_from(500, seed=4242)
    run.extend(900, seed=4242)
    code, out, err = cli("sync", f"{PROJECT}/synthetic-rewind", "--json")
    assert code == 0, err
    result = json.loads(out)["runs"][0]
    assert result["rewound_from"] == 500
    assert _export(cli, "synthetic-rewind") == _truth(run)
    # lastStep going backwards: truncated, then synced
    run.truncate(700)
    assert cli("sync", f"{PROJECT}/synthetic-rewind")[0] == 0
    assert _export(cli, "synthetic-rewind") == _truth(run)


def test_sigkill_mid_sync_then_resume_no_loss_no_duplicates(tmp_path, wandb_server):
    run = marin_run("synthetic-kill", steps=16000, extra_scalar_keys=20)
    server = wandb_server([run], faults=Faults(slow_every=1, slow_seconds=0.2), exported_until={"synthetic-kill": 0})
    env = {**os.environ, "WANDB_BASE_URL": server.url, "MARINCTL_HOME": str(tmp_path / "h")}
    cmd = [sys.executable, "-m", "marinctl", "sync", f"{PROJECT}/synthetic-kill"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = tmp_path / "h" / "marinctl.duckdb"
    deadline = time.time() + 60
    while time.time() < deadline and server.stats["HistoryPage"] < 4:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert server.stats["HistoryPage"] >= 4
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    partial = con.execute("SELECT count(*) FROM metrics").fetchall()[0][0]
    con.close()
    assert 0 < partial < len(run.long_rows())  # killed with part of the history committed
    server.faults = Faults()
    done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

    con = duckdb.connect(str(db), read_only=True)
    dupes = con.execute("SELECT count(*) FROM (SELECT run_pk, key_id, step FROM metrics GROUP BY ALL HAVING count(*) > 1)").fetchone()[0]
    rows = con.execute("SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id) ORDER BY 1, 2").fetchall()
    con.close()
    assert dupes == 0
    assert rows == _truth(run)


def test_unknown_project_and_run_exit_2(cli, wandb_server):
    wandb_server([marin_run("synthetic-a", steps=50)])
    code, _, err = cli("sync", "marin-community/no_such_project")
    assert code == 2 and "not found" in err and "Traceback" not in err
    code, _, err = cli("sync", f"{PROJECT}/no-such-run")
    assert code == 2 and "no-such-run" in err


def test_network_down_leaves_store_untouched(cli, wandb_server, monkeypatch, tmp_path):
    run = marin_run("synthetic-a", steps=120)
    wandb_server([run])
    assert cli("sync", f"{PROJECT}/synthetic-a")[0] == 0
    before = _export(cli, "synthetic-a")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("MARINCTL_HTTP_ATTEMPTS", "2")
    code, _, err = cli("sync", f"{PROJECT}/synthetic-a")
    assert code == 1
    assert "kept failing" in err and "Traceback" not in err
    assert _export(cli, "synthetic-a") == before


def test_rejected_key_is_reported_without_printing_it(cli, monkeypatch):
    """A server that answers 401: the message names the problem, never the key."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Deny(BaseHTTPRequestHandler):
        def do_POST(self):
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *a):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Deny)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    try:
        secret = "sekrit-" + "k" * 40
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
        monkeypatch.setenv("WANDB_API_KEY", secret)
        code, out, err = cli("sync", f"{PROJECT}/x")
        assert code == 1
        assert "rejected" in err and secret not in err and secret not in out
    finally:
        httpd.shutdown()
        httpd.server_close()
    db = Store(Path(os.environ["MARINCTL_HOME"]) / "marinctl.duckdb")
    with db.connect() as con:
        dump = " ".join(str(r) for r in con.execute("SELECT * FROM sync_state").fetchall())
        dump += " ".join(str(r) for r in con.execute("SELECT * FROM runs").fetchall())
    assert secret not in dump


def test_sdk_scan_history_and_marinctl_agree(cli, wandb_server, tmp_path):
    """The same rows through the real wandb SDK and through marinctl (SDK contract, both sides)."""
    wandb = pytest.importorskip("wandb")
    run = marin_run("synthetic-contract", steps=150)
    server = wandb_server([run])
    assert cli("sync", f"{PROJECT}/synthetic-contract")[0] == 0
    ours = _export(cli, "synthetic-contract")
    try:
        api = wandb.Api(api_key="x" * 40, overrides={"base_url": server.url})
        sdk_rows = list(api.run(f"{PROJECT}/synthetic-contract").scan_history())
    finally:
        teardown_wandb()
    theirs = sorted((int(r["_step"]), k, float(v)) for r in sdk_rows for k, v in r.items()
                    if k != "_step" and isinstance(v, (int, float)) and v is not None)
    assert ours == theirs
