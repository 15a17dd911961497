"""Local/offline W&B runs: real `.wandb` files written by the real wandb SDK (offline mode,
in a subprocess so no wandb-core outlives it), mirrored and compared row for row with what
was logged. The metric values are SYNTHETIC (Marin-shaped key names, made-up numbers).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import pytest

from marinctl.errors import UserError
from marinctl.sources import wandb_file as wf
from marinctl.sources import wandb_local as files
from marinctl.sources import wandb_records as wl_rows
from marinctl.sync import local as wl

WRITER = textwrap.dedent(r'''
    import json, math, sys, time
    import wandb
    out, steps, flush, sleep = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    runs = [("local", {"model": {"hidden_dim": 768}, "lr": 3e-4}, steps),
            ("repro", {"marinctl": {"repro_of": "rung1"}}, 20)][: int(sys.argv[5])]
    logged = {}
    for kind, config, n in runs:
        settings = dict(x_disable_stats=True)
        if flush > 0:
            settings["x_transaction_log_flush_interval"] = flush
        run = wandb.init(mode="offline", dir=out, project="marin_moe", name=f"synthetic-{kind}",
                         config=config, settings=wandb.Settings(**settings))
        rows = []
        for s in range(n):
            row = {"train/loss": 6.0 / (1 + 0.01 * s) + 0.01 * math.sin(s),
                   "grad/norm/total": 1.0 + 0.1 * math.cos(s),
                   "optim/learning_rate": 3e-4 * min(1.0, (s + 1) / 50),
                   "optim/adam_lr": 3e-4,
                   "throughput/tokens_per_second": 1e6 + s}
            if s % 10 == 0:
                row["params/norm/stacked_blocks.0.mlp.router_bias"] = 0.5 + s * 1e-3
                row["params/norm/total"] = 100.0 + s
            if s == 7:
                row["train/loss"] = float("nan")
            if s % 25 == 0:
                print(f"step {s}: loss={row['train/loss']:.4f}")
            run.log(row, step=s)
            rows.append({"_step": s, **row})
            if kind == "local" and s == 100:
                run.summary["best_loss"] = 1.25          # a summary key never logged as history
            if kind == "local" and s == 150:
                run.config.update({"late_flag": True})   # a config record mid-run
            if sleep:
                time.sleep(sleep)
        run.finish()
        logged[run.id] = {"kind": kind, "rows": rows}
    from repro.wandb_log import teardown  # bounded: wandb's own can wait for ever
    teardown()
    with open(out + "/logged.json", "w") as f:
        json.dump(logged, f)
''')


def write_runs(out: Path, steps: int = 300, *, flush: float = 0.0, sleep: float = 0.0, runs: int = 2,
               wait: bool = True):
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(steps), str(flush), str(sleep), str(runs)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if not wait:
        return proc
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    return json.loads((out / "logged.json").read_text())


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Two offline runs (300 steps, and a 20-step repro run) written once for the module."""
    out = tmp_path_factory.mktemp("wandbruns")
    logged = write_runs(out)
    files = {p.name.split("-", 1)[1][:-6]: p for p in (out / "wandb").glob("*/run-*.wandb")}
    return out, logged, files


@pytest.fixture(scope="module")
def mirrored(written, tmp_path_factory):
    """Both runs synced once, into a store of the module's own: for the tests that only read it.
    (store, what `sync_path` returned)."""
    from marinctl.store import Store

    out, _, _ = written
    store = Store(tmp_path_factory.mktemp("mirrored") / "mirrored.duckdb")
    return store, wl.sync_path(store, out / "wandb")


def _main(written):
    out, logged, files = written
    run_id = next(r for r, v in logged.items() if v["kind"] == "local")
    return run_id, logged[run_id]["rows"], files[run_id]


def sync_warned(store, path) -> tuple[list[dict], list[str]]:
    """`sync_path` with the warnings it hands back (the CLI prints them on stderr)."""
    warnings: list[str] = []
    return wl.sync_path(store, path, warn=warnings.append), warnings


def stored_rows(store, run_id: str) -> dict[tuple[int, str], float]:
    with store.connect() as con:
        rows = con.execute(
            "SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
            " JOIN runs r USING (run_pk) WHERE r.run_id = ?", [run_id]).fetchall()
    out = {(s, k): v for s, k, v in rows}
    assert len(out) == len(rows), "duplicate (step, key) rows in the store"
    return out


def expected_rows(logged_rows) -> dict[tuple[int, str], float]:
    return {(r["_step"], k): v for r in logged_rows for k, v in r.items() if k != "_step"}


def _same(a: float, b: float) -> bool:
    return (a != a and b != b) or a == b


def assert_rows_equal(got: dict, want: dict) -> None:
    user = {k: v for k, v in got.items() if not k[1].startswith("_")}
    assert set(user) == set(want)
    bad = [k for k in want if not _same(user[k], want[k])]
    assert not bad, f"{len(bad)} values differ, e.g. {bad[:3]}"


# --- the mirror -------------------------------------------------------------------------------


def test_mirror_equals_what_the_sdk_logged(mirrored, written):
    out, logged, files = written
    store, results = mirrored
    by_run = {r["run"]: r for r in results}
    assert set(by_run) == set(logged)
    run_id, rows, _ = _main(written)
    assert by_run[run_id]["first_step"] == 0 and by_run[run_id]["last_step"] == 299
    got = stored_rows(store, run_id)
    assert_rows_equal(got, expected_rows(rows))
    # W&B's own columns come along, one per step
    assert sum(1 for k in got if k[1] == "_timestamp") == 300
    assert by_run[run_id]["rows_added"] == len(got)

    with store.connect() as con:
        runs = {r[0]: r[1:] for r in con.execute(
            "SELECT run_id, uid, source, state, name, project, config, summary, path FROM runs").fetchall()}
    uid, source, state, name, project, config, summary, path = runs[run_id]
    assert (uid, source, state, name, project) == (f"local:{run_id}", "local", "finished", "synthetic-local", "marin_moe")
    assert json.loads(config) == {"model": {"hidden_dim": 768}, "lr": 3e-4, "late_flag": True}
    summary = json.loads(summary)
    assert summary["best_loss"] == 1.25
    assert summary["train/loss"] == rows[-1]["train/loss"] and summary["_step"] == 299
    assert summary["params/norm/total"] == rows[290]["params/norm/total"]
    repro_id = next(r for r, v in logged.items() if v["kind"] == "repro")
    assert runs[repro_id][:3] == (f"repro:{repro_id}", "repro", "finished")
    assert_rows_equal(stored_rows(store, repro_id), expected_rows(logged[repro_id]["rows"]))


def test_small_read_windows_give_the_same_rows(store, written, tmp_path, monkeypatch):
    """Files are read in bounded windows; records cut by a window edge are resumed, and
    corruption inside a middle window does not stop the rest of the file."""
    monkeypatch.setattr(files, "WINDOW_BYTES", 40_000)
    run_id, rows, path = _main(written)
    data = bytearray(path.read_bytes())
    data[2 * wf.BLOCK + 3000] ^= 0xFF
    bad = _copy(path, tmp_path, bytes(data))
    results, warnings = sync_warned(store, bad)
    assert results[0]["last_step"] == 299 and len(warnings) == 1
    got = stored_rows(store, run_id)
    want = expected_rows(rows)
    assert 0 < len({s for s, _ in want} - {s for s, _ in got}) < 60
    wl.sync_path(store, path)   # the intact file (another path, same run) fills the gap
    assert_rows_equal(stored_rows(store, run_id), want)


def test_console_lines_become_events(mirrored, written):
    """Each run's printed lines, in order, as console events of that run (the repro run's under its own)."""
    store, _ = mirrored
    _, logged, _ = written
    with store.connect() as con:
        ev = con.execute("SELECT event_id, source, kind, body, step, run_uid FROM events ORDER BY event_id").fetchall()
    for run_id, v in logged.items():
        uid = f"{v['kind']}:{run_id}"
        mine = sorted((e for e in ev if e[5] == uid), key=lambda e: int(e[0].rsplit(":", 1)[1]))
        want = [f"step {s}: loss={r['train/loss']:.4f}" for s, r in enumerate(v["rows"]) if s % 25 == 0]
        assert [e[3] for e in mine] == want, uid
        assert {(e[1], e[2]) for e in mine} == {("local", "console")}, uid   # read from a local file
    assert len(ev) == sum(len(range(0, len(v["rows"]), 25)) for v in logged.values())


def test_oracle_wandb_leet_inspect(mirrored, written):
    """`wandb leet inspect --json` (W&B's own Go reader) sees the same history we stored."""
    store, _ = mirrored
    run_id, _, path = _main(written)
    wandb_cli = Path(sys.executable).with_name("wandb")
    assert wandb_cli.exists(), "the wandb CLI comes with the test extra (marinctl[local])"
    proc = subprocess.run([str(wandb_cli), "leet", "inspect", "--json", str(path)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    oracle = {}
    for line in proc.stdout.splitlines():
        rec = json.loads(line)
        if rec.get("type") == "history":
            item = rec["history"]["item"]
            step = int(item["_step"])
            for k, v in item.items():
                if k != "_step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    oracle[(step, k)] = float(v)
                elif v in ("NaN", "nan"):
                    oracle[(step, k)] = float("nan")
    assert len({s for s, _ in oracle}) == 300
    got = stored_rows(store, run_id)
    assert set(oracle) <= set(got)
    assert all(_same(got[k], v) for k, v in oracle.items())


def test_unchanged_file_is_not_reread_and_resume_has_no_duplicates(store, written, tmp_path):
    run_id, rows, path = _main(written)
    data = path.read_bytes()
    copy = tmp_path / "run" / path.name
    copy.parent.mkdir()
    cut = len(data) // 2 + 5   # mid-chunk: a live file whose writer has not flushed the rest
    copy.write_bytes(data[:cut])
    first = wl.sync_path(store, copy)[0]
    assert 0 < first["last_step"] < 299
    again = wl.sync_path(store, copy)[0]
    assert again["rows_added"] == 0 and again["last_step"] == first["last_step"]
    with open(copy, "ab") as fh:     # the writer flushes the rest: same inode, more bytes
        fh.write(data[cut:])
    rest = wl.sync_path(store, copy)[0]
    assert rest["last_step"] == 299
    got = stored_rows(store, run_id)
    assert_rows_equal(got, expected_rows(rows))
    assert first["rows_added"] + rest["rows_added"] == len(got)


def test_sync_killed_between_windows_resumes_without_duplicates(store, written, monkeypatch):
    run_id, rows, path = _main(written)
    monkeypatch.setattr(files, "WINDOW_BYTES", 30_000)
    real_apply, calls = wl.FileSync._apply, []

    def dying_apply(self, *args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt   # Ctrl-C after two committed windows
        return real_apply(self, *args)

    monkeypatch.setattr(wl.FileSync, "_apply", dying_apply)
    with pytest.raises(KeyboardInterrupt):
        wl.sync_path(store, path)
    partial = stored_rows(store, run_id)
    assert 0 < len({s for s, _ in partial}) < 300
    monkeypatch.setattr(wl.FileSync, "_apply", real_apply)
    res = wl.sync_path(store, path)
    got = stored_rows(store, run_id)
    assert_rows_equal(got, expected_rows(rows))
    assert res[0]["rows_added"] + len(partial) == len(got)


def test_live_tail_gets_every_row_exactly_once(store, tmp_path):
    out = tmp_path / "live"
    (out / "wandb").mkdir(parents=True)
    proc = write_runs(out, steps=150, flush=0.5, sleep=0.015, runs=1, wait=False)
    stop = threading.Event()
    updates: list[list[dict]] = []
    follower = threading.Thread(target=wl.follow, args=(store, out / "wandb"),
                                kwargs=dict(interval=0.2, stop=stop, on_update=updates.append), daemon=True)
    follower.start()
    try:
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err.decode()
        logged = json.loads((out / "logged.json").read_text())
        run_id = next(iter(logged))
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            with store.connect() as con:
                row = con.execute("SELECT state, last_step FROM runs WHERE run_id = ?", [run_id]).fetchall()
            if row and row[0] == ("finished", 149):
                break
            time.sleep(0.2)
    finally:
        stop.set()
        follower.join(timeout=10)
        if proc.poll() is None:
            proc.kill()
    assert not follower.is_alive()
    seen = [u["last_step"] for batch in updates for u in batch if u["run"] == run_id and u["last_step"] is not None]
    assert len(set(seen)) >= 2 and seen == sorted(seen), f"no live progress seen: {seen}"
    assert_rows_equal(stored_rows(store, run_id), expected_rows(logged[run_id]["rows"]))


# --- corrupt input --------------------------------------------------------------------------


def _old(path: Path) -> None:
    t = time.time() - 3600
    os.utime(path, (t, t))


def _copy(path: Path, tmp_path: Path, data: bytes) -> Path:
    dest = tmp_path / "bad" / path.name
    dest.parent.mkdir(exist_ok=True)
    dest.write_bytes(data)
    return dest


def test_bad_checksum_skips_one_block_and_keeps_the_rest(store, written, tmp_path, cli):
    run_id, rows, path = _main(written)
    data = bytearray(path.read_bytes())
    flip = 3 * wf.BLOCK + 5000
    data[flip] ^= 0xFF
    bad = _copy(path, tmp_path, bytes(data))
    code, out, err = cli("--db", str(store.path), "sync", str(bad), "--json")
    assert code == 0, err
    report = json.loads(out)
    res = report["runs"][0]
    assert err.count("warning") == 1 and "bad checksum at byte" in err and err.startswith("warning: ")
    assert report["warnings"] == [err.strip()[len("warning: "):]]
    at = int(err.split("at byte ")[1].split(";")[0])
    assert 3 * wf.BLOCK <= at <= flip
    got = stored_rows(store, run_id)
    want = expected_rows(rows)
    missing_steps = sorted({s for s, _ in want} - {s for s, _ in got})
    per_block = 300 * wf.BLOCK / len(data)        # steps per 32 KiB block, on average
    assert 0 < len(missing_steps) <= 1.5 * per_block + 2  # one block's worth of records at most
    assert missing_steps == list(range(missing_steps[0], missing_steps[-1] + 1))
    assert all(_same(got[k], want[k]) for k in got if not k[1].startswith("_"))
    assert res["last_step"] == 299


def test_truncated_file_keeps_every_complete_record(store, written, tmp_path):
    run_id, rows, path = _main(written)
    data = path.read_bytes()
    bad = _copy(path, tmp_path, data[: 2 * wf.BLOCK + 1234])
    _old(bad)   # not written for an hour: a truncated file, not a live one
    results, warnings = sync_warned(store, bad)
    res = results[0]
    assert len(warnings) == 1 and "incomplete record at byte" in warnings[0]
    got = stored_rows(store, run_id)
    steps = sorted({s for s, _ in got})
    assert steps == list(range(0, res["last_step"] + 1)) and res["last_step"] > 10
    want = expected_rows(rows)
    assert all(_same(v, want[k]) for k, v in got.items() if not k[1].startswith("_"))
    # a second sync of the unchanged file adds nothing
    assert wl.sync_path(store, bad)[0]["rows_added"] == 0


def test_garbage_appended_reads_everything(store, written, tmp_path):
    run_id, rows, path = _main(written)
    garbage = bytes((i * 37 + 11) % 256 for i in range(5000))
    bad = _copy(path, tmp_path, path.read_bytes() + garbage)
    results, warnings = sync_warned(store, bad)
    res = results[0]
    assert len(warnings) == 1 and "at byte" in warnings[0]
    assert res["last_step"] == 299
    assert_rows_equal(stored_rows(store, run_id), expected_rows(rows))


@pytest.mark.parametrize("content", [b"", b"hello, this is not a W&B file\n" * 100, wf.HEADER])
def test_nothing_readable_is_a_user_error(store, tmp_path, content):
    bad = tmp_path / "run-x.wandb"
    bad.write_bytes(content)
    _old(bad)
    with pytest.raises(UserError) as exc:
        wl.sync_path(store, bad)
    assert ("nothing readable" in exc.value.message or "not a W&B transaction log" in exc.value.message)
    assert exc.value.hint


def test_missing_or_empty_targets_are_user_errors(store, tmp_path):
    with pytest.raises(UserError, match="no such file"):
        wl.sync_path(store, tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="no .wandb files"):
        wl.sync_path(store, tmp_path / "empty")


def test_cli_exit_codes(cli, written, tmp_path):
    run_id, _, path = _main(written)
    code, out, err = cli("sync", str(path), "--json")
    assert code == 0, err
    assert json.loads(out)["runs"][0]["run"] == run_id
    bad = tmp_path / "junk.wandb"
    bad.write_bytes(b"\x00junk" * 10)
    code, out, err = cli("sync", str(bad))
    assert code == 2 and "Traceback" not in err and "not a W&B transaction log" in err


# --- decoding details -----------------------------------------------------------------------


def _write_log(path: Path, payloads: list[bytes]) -> None:
    """A minimal .wandb writer (LevelDB-log framing) for hand-built records."""
    out = bytearray(wf.HEADER)
    for p in payloads:
        first = True
        while True:
            left = wf.BLOCK - len(out) % wf.BLOCK
            if left < 7:
                out += b"\x00" * left
                continue
            take = min(len(p), left - 7)
            chunk, p = p[:take], p[take:]
            typ = (1 if not p else 2) if first else (4 if not p else 3)
            out += struct.pack("<IHB", zlib.crc32(chunk, zlib.crc32(bytes([typ]))), len(chunk), typ) + chunk
            first = False
            if not p:
                break
    path.write_bytes(bytes(out))


def test_typed_values_and_key_forms_decode(store, tmp_path):
    from wandb.proto import wandb_internal_pb2 as pb

    recs = []
    r = pb.Record(num=1)
    r.run.run_id, r.run.project = "typed1", "p"
    recs.append(r.SerializeToString())
    for s in range(3):
        r = pb.Record(num=2 + s)
        h = r.history
        h.step.num = s
        h.item.add(key="_step", integer=s)
        h.item.add(key="a/number", number=1.5 * s)
        h.item.add(key="int", integer=10 + s)
        h.item.add(key="flag", boolean=bool(s % 2))
        h.item.add(key="text", text="hello")
        h.item.add(nested_key=["x", "y"], value_json=json.dumps(2.0 * s))
        h.item.add(key="blob", json='{"a": 1}')
        h.item.add(key="big", value_json="x" * 100000 if s == 1 else "1")  # spans blocks once
        recs.append(r.SerializeToString())
    f = tmp_path / "run-typed1.wandb"
    _write_log(f, recs)
    res = wl.sync_path(store, f)[0]
    assert res == {"run": "typed1", "rows_added": 3 * 5 - 1, "first_step": 0, "last_step": 2}
    got = stored_rows(store, "typed1")
    assert got[(2, "a/number")] == 3.0 and got[(2, "int")] == 12.0 and got[(1, "flag")] == 1.0
    assert got[(2, "x.y")] == 4.0 and got[(0, "big")] == 1.0 and (1, "big") not in got   # W&B joins nested keys with '.'
    assert not any(k == "x/y" for _, k in got)
    assert (0, "text") not in got and (0, "blob") not in got


def test_state_follows_leet_liveness(store, tmp_path):
    from wandb.proto import wandb_internal_pb2 as pb

    r = pb.Record(num=1)
    r.run.run_id = "alive1"
    f = tmp_path / "run-alive1.wandb"
    _write_log(f, [r.SerializeToString()])
    now = time.time()

    def state():
        with store.connect() as con:
            return con.execute("SELECT state FROM runs WHERE run_id = 'alive1'").fetchall()[0][0]

    wl.sync_path(store, f)
    assert state() == "running"
    os.utime(f, (now - 3 * 60, now - 3 * 60))
    wl.sync_path(store, f)
    assert state() == "stale"
    os.utime(f, (now - 11 * 60, now - 11 * 60))
    wl.sync_path(store, f)
    assert state() == "crashed"
    assert wl.state_for(1, now, now) == "failed" and wl.state_for(0, 0, now) == "finished"


def test_fresh_header_only_file_says_wait(store, tmp_path):
    f = tmp_path / "run-new.wandb"
    f.write_bytes(wf.HEADER)
    with pytest.raises(UserError, match="yet") as exc:
        wl.sync_path(store, f)
    assert "--follow" in exc.value.hint


def test_console_reassembles_fragments():
    c = wl_rows.Console()
    assert c.feed("stdout", "step 1") == []
    assert c.feed("stdout", " done\nnext") == ["step 1 done"]
    assert c.feed("stdout", "\r 10%\r 50%\r100%\n") == ["100%"]
    assert c.feed("stderr", "a\r\nb\n") == ["a", "b"]
    assert c.pending == {"stdout": "", "stderr": ""}


def test_is_local_target(tmp_path):
    f = tmp_path / "run-a.wandb"
    f.write_bytes(wf.HEADER)
    assert files.is_local_target(str(f)) and files.is_local_target(str(tmp_path))
    assert files.is_local_target("./wandb") and files.is_local_target("x/run-abc.wandb")
    assert not files.is_local_target("marin-community/marin_moe")
    assert not files.is_local_target("https://wandb.ai/a/b/runs/c") and not files.is_local_target("marin")


def test_without_wandb_a_wandb_file_names_the_install_extra(written, tmp_path):
    """A base install (no wandb): reading a .wandb file exits 1 naming `marinctl[local]`;
    commands that do not read one still work. (wandb hidden with sys.modules['wandb'] = None.)"""
    _, _, path = _main(written)
    home = tmp_path / "no-wandb-home"

    def marinctl_without_wandb(*args: str) -> subprocess.CompletedProcess:
        code = ("import sys; sys.modules['wandb'] = None; from marinctl.cli import main; "
                f"main({['--home', str(home), *args]!r})")
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parent.parent)

    proc = marinctl_without_wandb("sync", str(path))
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines == ["marinctl: error: reading .wandb files needs wandb, which this install lacks",
                     "  try: pip install 'marinctl[local]' (from a checkout: pip install -e '.[local]')"]
    proc = marinctl_without_wandb("runs", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []   # nothing half-synced was stored
