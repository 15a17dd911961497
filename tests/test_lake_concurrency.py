"""Many machines on one team lake at once: followers, readers, a killed writer, a catalog that goes away.

Homes stand for machines: each follower or sync runs as a real `marinctl` process with a home of
its own (so nothing but the lake — its PostgreSQL catalog and data folder — is shared), against
loopback fakes: the W&B GraphQL fake serving SYNTHETIC runs, a webhook receiver.

- Two `sync --follow` processes on one project (one names the project, one its run) write no
  row twice and send an incident once:
  the lake's writer lock and per-run sync locks are PostgreSQL advisory locks (store/pglocks.py),
  and DuckLake itself would let two inserts of one row both commit (checked first, so the test
  shows what the locks add). A reader polling meanwhile sees whole runs with monotone last steps.
- A writer SIGKILLed while it downloads, decodes or commits leaves the last snapshot readable and
  no lock behind; the next sync completes the mirror exactly (byte-identical `export`).
- PostgreSQL stopped in the middle of a sync: exit 1 with one line naming the catalog; after the
  server is back, the next sync completes the mirror exactly.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time

import pytest

from tests.blackbox import interrupt, marinctl_proc, marinctl_run, sdk_env, start_wandb, wait_until
from tests.fakes.growing import Feed, growing_run
from tests.fakes.wandb_server import WandbServer
from tests.fakes.webhook_receiver import WebhookReceiver

WAIT_S = 60.0
E, P = "synthetic-lab", "lake-kill-synthetic"
PARQUET_RUN, WINDOWS_RUN = "lake-kill-parquet-synthetic", "lake-kill-windows-synthetic"


def _env(home, url, data, **extra) -> dict[str, str]:
    env = {k: v for k, v in sdk_env().items() if not k.startswith("MARINCTL_")}
    env.update(MARINCTL_HOME=str(home), MARINCTL_STORE=url, MARINCTL_STORE_DATA=str(data), **extra)
    return env


def _init(url: str, data) -> None:
    from tests.lake import init_lake

    init_lake(url, data)


def test_ducklake_alone_lets_two_writers_insert_the_same_row(pg_cluster, tmp_path):
    """What the writer lock is for: two DuckLake transactions that each find a row missing and
    insert it both commit (DuckLake turns concurrent commits away only where both delete)."""
    from marinctl.store import location
    from marinctl.store.lake import LakeStore

    url = pg_cluster.url(pg_cluster.new_database())
    lake = location.parse(url, str(tmp_path / "data"))
    LakeStore(lake).init()
    a, b = LakeStore(lake)._base(), LakeStore(lake)._base()
    try:
        for con in (a, b):
            LakeStore(lake)._attach(con)
            con.execute("USE marinctl_lake")
            con.execute("BEGIN TRANSACTION")
            assert con.execute("SELECT count(*) FROM metric_keys WHERE key = 'train/loss'").fetchall() == [(0,)]
            con.execute("INSERT INTO metric_keys VALUES (1, 'train/loss')")
        a.execute("COMMIT")
        b.execute("COMMIT")
        assert a.execute("SELECT count(*) FROM metric_keys WHERE key = 'train/loss'").fetchall() == [(2,)]
    finally:
        a.close()
        b.close()


class Follower:
    def __init__(self, args, env):
        self.proc = marinctl_proc(args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, start_new_session=True)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stderr:
            self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def synced(self, step: int) -> None:
        needle = f"last step {step:,}"
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(needle in line for line in list(self.lines)):
                return
            time.sleep(0.05)
        raise AssertionError(f"the follower never saw step {step}:\n" + "\n".join(self.lines[-40:]))

    def stop(self) -> int:
        assert interrupt(self.proc), "\n".join(self.lines[-20:])
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def test_two_followers_on_two_machines_write_each_row_once_and_send_one_alert(pg_cluster, tmp_path):
    import marinctl

    url, data = pg_cluster.url(pg_cluster.new_database()), tmp_path / "shared"
    _init(url, data)
    run = growing_run("synthetic-alerts-lake")
    seen: list[tuple[int, int, int]] = []          # (runs' last step, history's last step, its rows)
    problems: list[str] = []
    stop = threading.Event()

    def reader() -> None:
        m = marinctl.open(store=url, data=str(data))
        try:
            while not stop.is_set():
                try:
                    runs = m.runs().df()
                    if len(runs):
                        hist = m.history(run.run_id, keys=["train/loss"]).df()
                        last = int(hist["step"].max()) if len(hist) else -1
                        seen.append((int(runs["last_step"].max()), last, len(hist)))
                except marinctl.UnknownRun:
                    pass
                except Exception as exc:  # noqa: BLE001 — any failure of a reader is the finding
                    problems.append(f"{type(exc).__name__}: {exc}")
                stop.wait(0.2)
        finally:
            m.close()

    with WandbServer([run], verbose=False) as server, WebhookReceiver() as hook:
        feed = Feed(server, run)
        sink = f"webhook={hook.url}/generic"
        # one follows the project, the other its run: both stay up (the same target twice is refused
        # at once, as on one machine), and each pass the run is synced by whichever holds its lock
        args = ["--follow", "--interval", "0.5", "--notify", sink]
        envs = [_env(tmp_path / name, url, data, WANDB_BASE_URL=server.url) for name in ("a", "b")]
        one = Follower(["sync", f"{run.entity}/{run.project}", *args], envs[0])
        two = Follower(["sync", run.path, *args], envs[1])
        watcher = threading.Thread(target=reader, daemon=True)
        try:
            two.synced(feed.last_step)               # the run's follower holds its lock: the project's skips it
            watcher.start()
            two.synced(feed.grow(10))
            feed.grow(10, co_spike=True)
            two.synced(feed.last_step)
            assert hook.wait_for(lambda p: len(p) >= 1, WAIT_S), "\n".join(two.lines[-20:])
            # its delivery on record first: killed between the POST and the record, the next follower
            # sends it again under the same idempotency key (at least once; tests/test_alert_delivery.py)
            assert wait_until(lambda: '"delivered": true' in marinctl_run(["alerts", "--json"], env=envs[1]).stdout,
                              WAIT_S, step=0.2), "\n".join(two.lines[-20:])
            two.kill()                               # that machine dies: its locks go with its connection
            for _ in range(2):                       # the project's follower takes the run over from the
                one.synced(feed.grow(6))             # watermark, and scores the same episode: no second alert
            assert one.stop() in (0, 130), "\n".join(one.lines[-10:])
        finally:
            stop.set()
            one.kill()
            two.kill()
            if watcher.is_alive():
                watcher.join(timeout=30)
    assert len(hook.posts) == 1, [p.body for p in hook.posts]
    assert not problems, problems[:3]
    assert len(seen) >= 3, seen
    for (r0, h0, n0), (r1, h1, n1) in zip(seen, seen[1:]):
        assert r1 >= r0 and h1 >= h0 and n1 >= n0, seen         # never backwards
    truth = run.series["train/loss"][0]
    for _, last, rows in seen:                                   # never half a unit: every step up to its last
        assert rows == int((truth <= last).sum()), (last, rows)
    reads = marinctl_run(["export", run.run_id], env=envs[1])
    assert reads.returncode == 0, reads.stderr
    got = [line.split(",") for line in reads.stdout.splitlines()[1:]]
    assert len(got) == len({(s, k) for s, k, _ in got}), "a row written twice"
    assert sorted((int(s), k, float(v)) for s, k, v in got) == sorted(run.long_rows())
    alerts = marinctl_run(["alerts", "--json"], env=envs[0])
    assert alerts.returncode == 0 and alerts.stdout.count('"cause_class"') == 1, alerts.stdout


# --- a writer killed, a catalog gone --------------------------------------------------------------

def _kill_runs():
    from tests.fakes.synth import marin_run

    small = dict(entity=E, project=P, group="lake-kill-synthetic", layers=1, experts=2, norm_every=1000,
                 eval_every=1000)
    runs = [marin_run(PARQUET_RUN, steps=5400, seed=21, **small), marin_run(WINDOWS_RUN, steps=1600, seed=22, **small)]
    keep = ("_timestamp", "_runtime", "train/loss", "grad/norm/total", "throughput/tokens_per_second")
    for r in runs:
        for key in [k for k in r.series if k not in keep]:
            r.drop_key(key)
    return runs


class Trigger:
    """Calls `act` when request `n` of `op` (counted from `arm`) reaches the W&B fake."""

    def __init__(self, server):
        self.server, self.lock, self.target, self.fired = server, threading.Lock(), None, threading.Event()

    def arm(self, op: str, n: int, act) -> None:
        with self.lock:
            self.target = (op, self.server.stats.get(op, 0) + n, act)
            self.fired.clear()

    def __call__(self, op: str, n: int) -> None:
        with self.lock:
            if self.target is None or (op, n) != self.target[:2]:
                return
            act, self.target = self.target[2], None
        self.fired.set()
        act()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    runs = _kill_runs()
    server = start_wandb(runs, exported_until={PARQUET_RUN: 5000, WINDOWS_RUN: 0}, parquet_steps_per_file=2000)
    trigger = Trigger(server)
    server.on_request = trigger
    try:
        home = tmp_path_factory.mktemp("clean")
        env = {**sdk_env(), "MARINCTL_HOME": str(home), "WANDB_BASE_URL": server.url}
        assert marinctl_run(["sync", f"{E}/{P}"], env=env).returncode == 0
        clean = {r.run_id: marinctl_run(["export", r.run_id], env=env).stdout for r in runs}
        yield {"server": server, "trigger": trigger, "clean": clean}
    finally:
        server.stop()


def _exports(url: str, data, home) -> dict[str, str]:
    """Each run's `export` as a reader on another machine prints it."""
    from tests.blackbox import in_process

    out = {}
    for run_id in (PARQUET_RUN, WINDOWS_RUN):
        code, text, err = in_process("--home", str(home), "--store", url, "--store-data", str(data), "export", run_id)
        assert code == 0, err
        out[run_id] = text
    return out


@pytest.mark.parametrize("op, n, delay", [("GET /files", 1, 0.05), ("RunsHistoryBatch", 0, 0.05),
                                         ("HistoryPage", 0, 0.02)],
                         ids=["parquet-part", "short-runs-batch", "live-tail"])
def test_a_writer_killed_mid_sync_leaves_the_lake_readable_and_the_next_sync_exact(pg_cluster, served, tmp_path,
                                                                                   op, n, delay):
    import marinctl

    url, data = pg_cluster.url(pg_cluster.new_database()), tmp_path / "shared"
    _init(url, data)
    env = _env(tmp_path / "writer", url, data, WANDB_BASE_URL=served["server"].url)
    proc = marinctl_proc(["sync", f"{E}/{P}"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    served["trigger"].arm(op, n, lambda: threading.Timer(delay, _sigkill, (proc.pid,)).start())
    proc.wait(timeout=WAIT_S * 2)
    assert served["trigger"].fired.is_set() and proc.returncode == -signal.SIGKILL, proc.stderr.read()[-2000:]
    m = marinctl.open(store=url, data=str(data))          # the last snapshot reads, from another "machine"
    try:
        listed = m.runs().df()
        assert set(listed["run"]) <= {PARQUET_RUN, WINDOWS_RUN}
    finally:
        m.close()
    again = marinctl_run(["sync", f"{E}/{P}"], env={**env, "MARINCTL_HOME": str(tmp_path / "other")}, timeout=300)
    assert again.returncode == 0, again.stderr                # no lock was left behind by the killed writer
    assert _exports(url, data, tmp_path / "reader") == served["clean"]


def _sigkill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_the_catalog_server_stopping_mid_sync_is_one_line_and_the_next_sync_completes(pg_cluster, served, tmp_path):
    url, data = pg_cluster.url(pg_cluster.new_database()), tmp_path / "shared"
    _init(url, data)
    env = _env(tmp_path / "writer", url, data, WANDB_BASE_URL=served["server"].url)
    stopped = threading.Event()

    def stop_server() -> None:
        pg_cluster.stop_server()
        stopped.set()

    served["trigger"].arm("HistoryPage", 0, lambda: threading.Thread(target=stop_server).start())
    try:
        done = marinctl_run(["sync", f"{E}/{P}"], env=env, timeout=300)
        assert stopped.wait(WAIT_S)
    finally:
        if not stopped.is_set():
            stopped.wait(WAIT_S)
        pg_cluster.restart()
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    first = next(i for i, line in enumerate(lines) if line.startswith("marinctl: error:"))
    assert lines[first + 1:] == [lines[-1]] and lines[-1].startswith("  try:") and "Traceback" not in done.stderr, lines
    assert "cannot be reached" in lines[first] and f"port={pg_cluster.port}" in lines[first], lines
    again = marinctl_run(["sync", f"{E}/{P}"], env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert _exports(url, data, tmp_path / "reader") == served["clean"]


def test_two_machines_syncing_two_runs_at_once_intern_each_key_once(pg_cluster, served, tmp_path):
    """Both runs log the same keys, new to the lake: each sync interns them while the other does.
    Without the writer lock both inserts of a key would commit (the first test) and every read
    joining on it would double the rows."""
    url, data = pg_cluster.url(pg_cluster.new_database()), tmp_path / "shared"
    _init(url, data)
    procs = [marinctl_proc(["sync", f"{E}/{P}/{run_id}"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env=_env(tmp_path / run_id, url, data, WANDB_BASE_URL=served["server"].url))
             for run_id in (PARQUET_RUN, WINDOWS_RUN)]
    for proc in procs:
        assert proc.wait(timeout=WAIT_S * 3) == 0, proc.stderr.read()[-2000:]
    from tests.blackbox import in_process

    code, out, err = in_process("--home", str(tmp_path / "reader"), "--store", url, "--store-data", str(data), "sql",
                                "SELECT key FROM metric_keys GROUP BY key HAVING count(*) > 1", "--json")
    assert code == 0 and out.strip() == "[]", out + err
    assert _exports(url, data, tmp_path / "reader") == served["clean"]


def test_a_lake_with_its_data_on_s3_reads_back_exact(pg_cluster, served, tmp_path, monkeypatch):
    """`--store-data s3://bucket/prefix/` on an S3-compatible server (moto's, on loopback; keys and
    endpoint from the AWS variables): DuckLake's files land in the bucket, W&B's exported parts
    are written as long rows there (no part file stays on the writer's disk), and a reader on
    another machine exports what a clean embedded mirror does."""
    from tests.lake import S3Server

    s3 = S3Server().start()
    try:
        url, data = pg_cluster.url(pg_cluster.new_database()), f"s3://{s3.bucket}/team/"
        env = {**_env(tmp_path / "writer", url, data, WANDB_BASE_URL=served["server"].url), **s3.env()}
        done = marinctl_run(["store", "init", url, "--data", data], env=env)
        assert done.returncode == 0, done.stderr
        done = marinctl_run(["sync", f"{E}/{P}"], env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert any(k.startswith("team/lake/main/metrics/") and k.endswith(".parquet") for k in s3.keys()), s3.keys()
        assert not list((tmp_path / "writer").rglob("*.parquet")), "a downloaded part was left behind"
        for key, value in s3.env().items():
            monkeypatch.setenv(key, value)   # the reader's own AWS variables
        assert _exports(url, data, tmp_path / "reader") == served["clean"]
    finally:
        s3.stop()
