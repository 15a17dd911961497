"""The DuckDB store: migrations, idempotent writes, downsampling, lineage (real throwaway files)."""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np
import pyarrow as pa
import pytest

from marinctl.domain import RunInfo
from marinctl.errors import UserError
from marinctl.store import Store, schema
from marinctl.store import metrics as M
from marinctl.store.lineage import resolve_target
from marinctl.store.runs import resolve_run, upsert_run


def _batch(steps, key, values):
    return pa.table({"step": pa.array(steps, pa.int64()), "key": pa.array([key] * len(steps), pa.string()),
                     "value": pa.array(values, pa.float64())})


def _run(run_id, **kw):
    return RunInfo(source="wandb", run_id=run_id, entity="e", project="p",
                   created_at=datetime(2026, 1, 1, tzinfo=timezone.utc), **kw)


def test_migrations_apply_once_and_are_numbered(store):
    store.ensure_schema()
    with store.connect(write=True) as con:
        assert schema.current_version(con) == schema.latest_version()
        assert schema.migrate(con) == []  # nothing left to apply
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    assert {"runs", "metrics", "metric_keys", "sync_state", "events", "anomalies", "schema_migrations"} <= tables
    versions = [v for v, _, _ in schema.migrations()]
    assert versions == sorted(versions) and versions[0] == 1


def test_a_failing_migration_leaves_the_file_as_it_was(tmp_path, monkeypatch):
    """Pending migrations go in one transaction: a broken one applies none of its batch, and the
    file opens again as it was (the next release's fix then applies them all)."""
    from marinctl.store.engine import duckdb

    shipped = schema.migrations()
    monkeypatch.setattr(schema, "migrations", lambda: [*shipped, (len(shipped) + 1, "broken", "CREATE TABLE runs (x INT)")])
    con = duckdb.connect(str(tmp_path / "new.duckdb"))
    with pytest.raises(duckdb.Error):
        schema.migrate(con)
    assert schema.current_version(con) == 0
    assert con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'runs'").fetchall() == [(0,)]
    monkeypatch.setattr(schema, "migrations", lambda: shipped)
    assert schema.migrate(con) == [v for v, _, _ in shipped]
    assert schema.current_version(con) == schema.latest_version()
    con.close()


def test_replace_range_is_idempotent(store):
    with store.transaction() as con:
        pk = upsert_run(con, _run("r1"))
        M.replace_range(con, pk, _batch([0, 1, 2], "train/loss", [3.0, 2.0, 1.0]), 0, 3)
    for _ in range(3):  # a crashed-and-retried batch must not duplicate
        with store.transaction() as con:
            M.replace_range(con, pk, _batch([1, 2, 3], "train/loss", [2.5, 1.5, 0.5]), 1, 4)
    with store.connect() as con:
        steps, values = M.series(con, [(pk, None, None)], "train/loss")
    assert steps.tolist() == [0, 1, 2, 3]
    assert values.tolist() == [3.0, 2.5, 1.5, 0.5]


def test_transaction_rolls_back_on_error(store):
    with store.transaction() as con:
        pk = upsert_run(con, _run("r1"))
        M.replace_range(con, pk, _batch([0], "k", [1.0]), 0, 1)
    with pytest.raises(RuntimeError):
        with store.transaction() as con:
            M.replace_range(con, pk, _batch([0, 1], "k", [9.0, 9.0]), 0, 2)
            raise RuntimeError("killed mid-batch")
    with store.connect() as con:
        assert M.series(con, [(pk, None, None)], "k")[1].tolist() == [1.0]


def test_one_step_spike_survives_downsampling_at_every_zoom(store):
    n = 400_000
    steps = np.arange(n)
    values = 2.0 + 0.01 * np.sin(steps / 100.0)
    spike_at = 271_828
    values[spike_at] = 50.0
    values[123_456] = np.nan
    with store.transaction() as con:
        pk = upsert_run(con, _run("big"))
        M.replace_range(con, pk, _batch(steps.tolist(), "train/loss", values.tolist()), 0, n)
    with store.connect() as con:
        for lo, hi, buckets in [(0, n, 200), (0, n, 1000), (250_000, 300_000, 100), (271_000, 272_000, 50)]:
            env = M.downsample(con, [(pk, None, None)], "train/loss", lo, hi, buckets)
            assert len(env) <= buckets
            assert np.nanmax(env.vmax) == 50.0
            assert env.step_of_max[np.nanargmax(env.vmax)] == spike_at
            assert int(env.count.sum()) == hi - lo
        env = M.downsample(con, [(pk, None, None)], "train/loss", 0, n, 100)
        assert int(env.nonfinite.sum()) == 1


def test_resolve_run_errors_are_user_errors(store):
    with store.transaction() as con:
        upsert_run(con, _run("abc"))
        assert resolve_run(con, "abc")["run_id"] == "abc"
        assert resolve_run(con, "e/p/abc")["run_id"] == "abc"
        assert resolve_run(con, "https://wandb.ai/e/p/runs/abc")["run_id"] == "abc"
        with pytest.raises(UserError):
            resolve_run(con, "nope")


def test_stitched_lineage_takes_each_step_from_newest_run(store):
    with store.transaction() as con:
        a = upsert_run(con, _run("hero-a", group="moe-hero-ep"))
        b = upsert_run(con, _run("hero-b-step5k", group="moe-hero-ep", fork_parent="hero-a", fork_step=5))
        c = upsert_run(con, _run("hero-c-step8k", group="moe-hero-ep", fork_parent="hero-b-step5k", fork_step=8))
        M.replace_range(con, a, _batch(list(range(0, 10)), "train/loss", [1.0] * 10), 0, 10)  # a ran past the fork
        M.replace_range(con, b, _batch(list(range(6, 12)), "train/loss", [2.0] * 6), 6, 12)
        M.replace_range(con, c, _batch(list(range(9, 15)), "train/loss", [3.0] * 6), 9, 15)
        target = resolve_target(con, "hero")
        steps, values = M.series(con, target.segments, "train/loss")
    assert [r["run_id"] for r in target.runs] == ["hero-a", "hero-b-step5k", "hero-c-step8k"]
    assert steps.tolist() == list(range(15))
    assert values.tolist() == [1.0] * 6 + [2.0] * 3 + [3.0] * 6
    assert target.run_at(7)["run_id"] == "hero-b-step5k"


def test_store_lock_conflict_is_reported_not_hung(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "locked.duckdb"
    Store(path).ensure_schema()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import duckdb,time; c=duckdb.connect({str(path)!r}); print('ok', flush=True); time.sleep(20)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        from marinctl.errors import RuntimeFailure

        with pytest.raises(RuntimeFailure, match="locked"):
            with Store(path, lock_timeout=0.5).connect() as con:
                con.execute("SELECT 1")
    finally:
        holder.kill()
        holder.wait()


def test_downsample_many_equals_one_key_at_a_time(store):
    steps = list(range(5000))
    with store.transaction() as con:
        pk = upsert_run(con, _run("multi"))
        M.replace_range(con, pk, _batch(steps, "a", [float(s % 97) for s in steps]), 0, 5000)
        M.replace_range(con, pk, _batch(steps[::10], "b", [float(s) ** 0.5 for s in steps[::10]]), 0, 5000)
    with store.connect() as con:
        many = M.downsample_many(con, [(pk, None, None)], ["a", "b", "missing"], 100, 4900, 37)
        assert set(many) == {"a", "b"}
        for key in ("a", "b"):
            one = M.downsample(con, [(pk, None, None)], key, 100, 4900, 37)
            for field in ("step_lo", "step_hi", "vmin", "vmax", "first", "last", "count", "step_of_max"):
                np.testing.assert_array_equal(getattr(many[key], field), getattr(one, field))
        assert len(M.downsample(con, [(pk, None, None)], "missing", 0, 10, 5)) == 0


def test_a_store_from_an_earlier_release_is_migrated_by_a_read_command(tmp_path, cli):
    """A person upgrades marinctl and runs `marinctl runs` on their old store: it is migrated and
    read at once (a read-only connection held open while migrating waited on itself, then blamed
    'another marinctl process')."""
    import duckdb

    home = tmp_path / "upgraded-home"
    home.mkdir()
    con = duckdb.connect(str(home / "marinctl.duckdb"))
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR,"
                " applied_at TIMESTAMPTZ DEFAULT current_timestamp)")
    for version, name, sql in schema.migrations()[:-1]:          # the release before the newest migration
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
    con.execute("INSERT INTO runs (uid, source, entity, project, run_id, name, state) VALUES"
                " ('e/p/old-synthetic', 'wandb', 'e', 'p', 'old-synthetic', 'old-synthetic', 'finished')")
    con.close()
    code, out, err = cli("--home", str(home), "runs", "--json")
    assert code == 0, err
    assert "old-synthetic" in out
    with duckdb.connect(str(home / "marinctl.duckdb"), read_only=True) as con:
        assert schema.current_version(con) == schema.latest_version()


def test_held_keeps_one_instance_for_a_burst_then_lets_other_processes_in(tmp_path):
    """`held()` (the first view of a watch): the burst inside shares one open DuckDB instance, so
    another process is kept out meanwhile and let in after; a store this process may only read
    is not held, and reading it still works."""
    import subprocess
    import sys

    import duckdb

    path = tmp_path / "held.duckdb"
    store = Store(path, lock_timeout=0.5)
    probe = [sys.executable, "-c", f"import duckdb; duckdb.connect({str(path)!r}, read_only=True).close()"]
    with store.held():
        with store.transaction() as con:
            upsert_run(con, _run("r1"))
        with store.connect() as con:
            assert con.execute("SELECT run_id FROM runs").fetchall() == [("r1",)]
        assert subprocess.run(probe, capture_output=True, timeout=60).returncode != 0, "another process got in"
    assert subprocess.run(probe, capture_output=True, timeout=60).returncode == 0, "the store was not let go"

    real = Store._open

    def read_only_file(self, read_only, lock_timeout=None):
        if not read_only:
            raise duckdb.IOException('Cannot open file "held.duckdb": Permission denied')
        return real(self, read_only, lock_timeout)

    reader = Store(path)
    reader._open = read_only_file.__get__(reader)
    with reader.held():
        with reader.connect() as con:
            assert con.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]


def test_a_writer_checks_and_migrates_on_its_own_connection(tmp_path):
    """A process's first write opens the file once (each open builds a DuckDB instance):
    the schema is checked, and a new or older file migrated, on the writer's connection."""
    path = tmp_path / "once.duckdb"
    for _ in range(2):                       # a new file, then the same file in a fresh process's Store
        store, opens = Store(path), []
        real = store._open
        store._open = lambda read_only, lock_timeout=None: opens.append(read_only) or real(read_only, lock_timeout)
        with store.transaction() as con:
            upsert_run(con, _run(f"r{len(opens)}-{path.exists()}"))
        with store.connect() as con:
            assert con.execute("SELECT max(version) FROM schema_migrations").fetchall() == [(schema.latest_version(),)]
        assert opens == [False, True]


def test_replace_range_stores_every_value_bit_for_bit_and_interns_keys_once(store):
    """The write path scans NumPy columns (no DuckDB package import), where a NaN reads as NULL:
    NaN, ±inf, -0.0 and a subnormal come back as logged, a null stays null, keys are shared."""
    import struct

    odd = [1.0, float("nan"), float("inf"), float("-inf"), -0.0, 5e-324]
    keys = pa.chunked_array([["a", "b", "a"], ["c", "b", "a"]], pa.string())     # two chunks, as Arrow hands them
    batch = pa.table({"step": pa.array(range(6), pa.int64()), "key": keys, "value": pa.array(odd, pa.float64())})
    with store.transaction() as con:
        one, two = upsert_run(con, _run("odd-1")), upsert_run(con, _run("odd-2"))
        assert M.replace_range(con, one, batch, 0, 6) == 6
        M.replace_range(con, two, _batch([0, 1], "b", [2.0, 3.0]), 0, 2)
        M.replace_range(con, two, pa.table({"step": pa.array([2], pa.int64()), "key": pa.array(["c"]),
                                            "value": pa.array([None], pa.float64())}), 2, 3)
    with store.connect() as con:
        rows = con.execute("SELECT m.run_pk, k.key, m.step, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
                           " ORDER BY m.run_pk, m.step").fetchall()
        interned = con.execute("SELECT key FROM metric_keys ORDER BY key").fetchall()
    bits = [struct.pack("<d", v) for v in odd]
    assert [(k, s) for pk, k, s, _ in rows if pk == one] == [("a", 0), ("b", 1), ("a", 2), ("c", 3), ("b", 4), ("a", 5)]
    assert [struct.pack("<d", v) for pk, _, _, v in rows if pk == one] == bits
    assert [(k, s, v) for pk, k, s, v in rows if pk == two] == [("b", 0, 2.0), ("b", 1, 3.0), ("c", 2, None)]
    assert interned == [("a",), ("b",), ("c",)]


def test_a_process_killed_after_a_new_stores_first_open_leaves_a_store_the_next_command_opens(tmp_path):
    """The migrations reach the file before anything else runs: a process that dies right after a new
    home's first open (no close, no checkpoint) leaves a store the next `marinctl` opens. DuckDB 1.5
    cannot replay a migration's ALTER TABLE from the WAL (an internal error at every later open)."""
    import subprocess
    import sys

    from tests.blackbox import env_with, marinctl_run

    home = tmp_path / "home"
    # a writer's first connection migrates the new file, then the process dies mid-work (as SIGKILL does)
    die = ("import os, sys; from marinctl.store import Store\n"
           "with Store(sys.argv[1]).connect(write=True) as con: os._exit(0)")
    subprocess.run([sys.executable, "-c", die, str(home / "marinctl.duckdb")], check=True, timeout=60)
    done = marinctl_run(["--home", str(home), "runs", "--json"], env=env_with())
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr


def test_a_process_killed_between_the_migrations_commit_and_checkpoint_leaves_a_store_that_opens(tmp_path):
    """The migrations' COMMIT reaches the WAL before their CHECKPOINT reaches the file; a process
    killed between the two left a WAL DuckDB 1.5 cannot replay (an ALTER TABLE of a table whose
    defaults call functions): every later open failed with an internal error. The next command
    sets that WAL aside (kept beside the file) and migrates again."""
    import subprocess
    import sys

    from tests.blackbox import env_with, marinctl_run

    home = tmp_path / "home"
    dies = ("import os, sys, duckdb\nfrom marinctl.store import schema\n"
            "con = duckdb.connect(sys.argv[1])\n"
            "class DiesAtCheckpoint:\n"
            "    def __getattr__(self, name): return getattr(con, name)\n"
            "    def execute(self, sql, *args):\n"
            "        if sql.strip() == 'CHECKPOINT': os._exit(0)      # killed here, as SIGKILL would\n"
            "        return con.execute(sql, *args)\n"
            "schema.migrate(DiesAtCheckpoint())\n")
    subprocess.run([sys.executable, "-c", dies, str(home / "marinctl.duckdb")], check=True, timeout=60)
    assert (home / "marinctl.duckdb.wal").stat().st_size > 0        # the migrations, in the WAL only
    done = marinctl_run(["--home", str(home), "runs", "--json"], env=env_with())
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stderr
    assert len(list(home.glob("marinctl.duckdb.wal.unreplayable-*"))) == 1


def test_threads_of_one_process_open_the_store_at_once_without_an_error(tmp_path):
    """duckdb 1.5 refuses a connect that meets the file's instance on its way out, as another thread
    closes its last connection ("Unique file handle conflict"): `sync --follow`'s alert pass met it
    beside the tail's writes. The store opens again instead (17 of 1,600 opens failed before)."""
    import threading

    store = Store(tmp_path / "marinctl.duckdb")
    with store.transaction():
        pass
    failed: list[str] = []

    def work(write: bool) -> None:
        for _ in range(400):
            try:
                with (store.transaction() if write else store.connect()) as con:
                    con.execute("SELECT count(*) FROM runs").fetchall()
            except Exception as exc:  # noqa: BLE001 — counted, then asserted none
                failed.append(f"{type(exc).__name__}: {exc}"[:160])

    threads = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failed == [], failed[:3]
