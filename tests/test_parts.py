"""W&B's exported parquet parts kept as the stored form of history.

The same SYNTHETIC run is mirrored twice from the loopback W&B fake: once through its
parquet export (parts registered, live tail in the long table) and once through JSON
history windows only (every value a long row). Everything a user reads — `export` (CSV and
parquet), `plot`, `sql`'s history view, `anomalies`, `explain` — must be identical, with
NaN and ±Inf logged both inside an exported part and in the live tail. Then what can happen
to parts: a rewind inside an exported range, a part file deleted by hand, files a crash
left unregistered, and export shapes W&B may send (ints, bools, strings, nested structs,
no statistics).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.blackbox import as_number, run_cli

E, P = "synthetic-lab", "parts-synthetic"
RUN = "parts-run-synthetic"
STEPS, EXPORTED, PER_FILE = 3000, 2500, 1000
BAD = {  # NaN/Inf in an exported part and in the live tail
    "train/loss": ([1234, 1235, 2700], [math.nan, math.inf, math.nan]),
    "grad/norm/total": ([1800, 2900], [-math.inf, math.inf]),
}


def _run():
    from tests.fakes.synth import marin_run

    run = marin_run(RUN, steps=STEPS, entity=E, project=P, state="running", layers=2, experts=2,
                    norm_every=10, eval_every=250, extra_scalar_keys=3)
    for key, (steps, values) in BAD.items():
        run.set_values(key, steps, values)
    return run


def _truth(run) -> list[tuple[int, str, float]]:
    return sorted(run.long_rows(), key=lambda r: (r[0], r[1]))


def _rows(text: str) -> list[tuple[int, str, float]]:
    rows = list(csv.reader(io.StringIO(text)))
    assert rows[0] == ["step", "key", "value"]
    return [(int(s), k, as_number(v) if v not in ("nan", "inf", "-inf") else float(v)) for s, k, v in rows[1:]]


def _same_rows(got, want) -> bool:
    return len(got) == len(want) and all(
        a[:2] == b[:2] and (a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2]))) for a, b in zip(got, want))


def _files(home: Path) -> set[str]:
    root = home / "marinctl.history"
    return {str(f.relative_to(root)) for f in root.rglob("*") if f.is_file()} if root.exists() else set()


def _sql(cli, home: Path, query: str) -> list[list[str]]:
    _, out, _ = run_cli(cli, "--home", str(home), "sql", query, "--csv")
    return list(csv.reader(io.StringIO(out)))[1:]


@pytest.fixture
def parquet_path(monkeypatch):
    from marinctl.sync import wandb as wandb_sync

    monkeypatch.setattr(wandb_sync, "PARQUET_MIN_STEPS", 100)   # a small run still takes the export path
    return wandb_sync


@pytest.fixture
def served(wandb_server, parquet_path):
    run = _run()
    return wandb_server([run], exported_until={RUN: EXPORTED}, parquet_steps_per_file=PER_FILE), run


def _sync(cli, home: Path, *extra: str) -> dict:
    _, out, _ = run_cli(cli, "--home", str(home), "sync", f"{E}/{P}/{RUN}", "--json", *extra)
    return json.loads(out)["runs"][0]


def test_parts_and_long_rows_read_the_same(cli, served, parquet_path, tmp_path, monkeypatch):
    server, run = served
    parts_home, long_home = tmp_path / "parts", tmp_path / "long"
    _sync(cli, parts_home)
    monkeypatch.setattr(parquet_path, "PARQUET_MIN_STEPS", 10 ** 9)   # the same run, JSON windows only
    _sync(cli, long_home)

    # the parts home really holds parts, and long rows only for the live tail
    n_parts, lo, hi = _sql(cli, parts_home, "SELECT count(*), min(lo), max(hi) FROM history_parts")[0]
    assert int(n_parts) == EXPORTED // PER_FILE + 1 and int(lo) == 0 and int(hi) == EXPORTED
    assert int(_sql(cli, parts_home, "SELECT min(step) FROM metrics")[0][0]) == EXPORTED
    assert _sql(cli, long_home, "SELECT count(*) FROM history_parts")[0][0] == "0"
    assert len(_files(parts_home)) == int(n_parts)

    def both(*args: str) -> tuple[str, str]:
        a = run_cli(cli, "--home", str(parts_home), *args)[1]
        b = run_cli(cli, "--home", str(long_home), *args)[1]
        return a, b

    a, b = both("export", RUN)
    assert a == b
    assert _same_rows(_rows(a), _truth(run))          # every value, NaN/Inf included, sorted by step then key
    a, b = both("export", RUN, "--keys", "train/loss,grad/norm/total")
    assert a == b and len(_rows(a)) == 2 * STEPS
    out = tmp_path / "parts.parquet"
    run_cli(cli, "--home", str(parts_home), "export", RUN, "--format", "parquet", "--out", str(out))
    table = pq.read_table(out)
    assert _same_rows(list(zip(table["step"].to_pylist(), table["key"].to_pylist(), table["value"].to_pylist())),
                      _truth(run))
    for key in ("train/loss", "grad/norm/total", "params/norm/total"):
        a, b = both("plot", key, "--run", RUN, "--width", "100", "--height", "18")
        assert a == b and a.strip(), key
    a, b = both("anomalies", "--run", RUN, "--json")
    assert a == b
    nonfinite = {(x["metric"], x["step"]) for x in json.loads(a) if x["kind"] == "nonfinite"}
    assert {("train/loss", 1234), ("grad/norm/total", 1800)} <= nonfinite   # found inside exported parts
    query = ("SELECT key, count(*), min(step), max(step), count(*) FILTER (WHERE NOT isfinite(value))"
             f" FROM history WHERE run = '{RUN}' GROUP BY key ORDER BY key")
    a, b = both("sql", query, "--csv")
    assert a == b and len(a.splitlines()) > 20
    for step in ("1235", str(EXPORTED), "2901"):
        a, b = both("explain", "step", step, "--run", RUN, "--json")
        assert a == b, step
    a, b = (json.loads(x) for x in both("show", RUN, "--json"))
    assert a["last_step"] == b["last_step"] == STEPS - 1


def test_rewind_inside_an_exported_range_clips_the_part(cli, served, tmp_path):
    server, run = served
    home = tmp_path / "home"
    _sync(cli, home)
    run.rewrite_from(1500, seed=99)                   # W&B history rewritten from inside the second part
    server.exported_until[RUN] = 2800
    got = _sync(cli, home)
    assert got["rewound_from"] == 1500
    _, out, _ = run_cli(cli, "--home", str(home), "export", RUN)
    assert _same_rows(_rows(out), _truth(run))
    spans = [(int(a), int(b)) for a, b in _sql(cli, home, "SELECT lo, hi FROM history_parts ORDER BY lo")]
    assert spans[:2] == [(0, 1000), (1000, 1500)]      # the straddling part clipped, its file kept
    assert spans[2][0] == 1500 and spans[-1][1] == 2800
    files = {r[0] for r in _sql(cli, home, "SELECT DISTINCT file FROM history_parts")}
    assert _files(home) == files                       # the dropped parts' files are gone


def test_a_deleted_part_file_is_fetched_again(cli, served, tmp_path):
    server, run = served
    home = tmp_path / "home"
    _sync(cli, home)
    middle = _sql(cli, home, "SELECT file FROM history_parts ORDER BY lo")[1][0]
    (home / "marinctl.history" / middle).unlink()
    code, _, err = cli("--home", str(home), "export", RUN)
    assert code == 1 and "missing" in err and "marinctl sync" in err and "Traceback" not in err
    downloads = server.stats["GET /files"]
    _sync(cli, home)
    assert server.stats["GET /files"] > downloads    # the watermark went back to the lost part's first step
    _, out, _ = run_cli(cli, "--home", str(home), "export", RUN)
    assert _same_rows(_rows(out), _truth(run))
    assert _files(home) == {r[0] for r in _sql(cli, home, "SELECT file FROM history_parts")}


def test_files_a_crash_left_are_collected(cli, served, tmp_path, monkeypatch):
    from marinctl.store import parts

    server, run = served
    home = tmp_path / "home"
    real = parts.register
    calls = []

    def crash_on_second(con, run_pk, path, part):
        calls.append(path)
        if len(calls) == 2:
            raise RuntimeError("synthetic crash")   # after the downloads, before the second part's commit
        return real(con, run_pk, path, part)

    monkeypatch.setattr(parts, "register", crash_on_second)
    code, _, _ = cli("--home", str(home), "sync", f"{E}/{P}/{RUN}")
    assert code != 0 and len(calls) == 2
    monkeypatch.setattr(parts, "register", real)
    registered = {r[0] for r in _sql(cli, home, "SELECT file FROM history_parts")}
    assert len(registered) == 1 and len(_files(home)) > 1       # orphans on disk
    stray = next(iter(_files(home)))
    (home / "marinctl.history" / (stray + ".part")).write_bytes(b"half a download")
    _sync(cli, home)
    _, out, _ = run_cli(cli, "--home", str(home), "export", RUN)
    assert _same_rows(_rows(out), _truth(run))
    assert _files(home) == {r[0] for r in _sql(cli, home, "SELECT file FROM history_parts")}


def test_export_shapes_w_and_b_may_send(cli, tmp_path):
    """ints, bools, strings, lists, a nested struct, no `_step` statistics: read defensively."""
    from marinctl.domain import RunInfo
    from marinctl.store import Store, parts, runs

    home = tmp_path / "shapes"
    home.mkdir()
    store = Store(home / "marinctl.duckdb")
    store.ensure_schema()
    uid = "synthetic-lab/shapes-synthetic/shapes-synthetic"
    steps = np.arange(10, 20, dtype=np.int64)
    table = pa.table({
        "_step": steps,
        "count": pa.array(np.arange(10, dtype=np.int32)),
        "flag": pa.array([i % 2 == 0 for i in range(10)]),
        "note": pa.array([f"s{i}" for i in range(10)]),
        "hist": pa.array([[1.0, 2.0]] * 10),
        "train": pa.array([{"loss": float(i) if i != 3 else math.nan, "acc": i} for i in range(10)]),
        "lr": pa.array([None if i % 3 else 0.1 * i for i in range(10)], pa.float64()),
    })
    path = parts.new_file(parts.root_for(store.path), uid)
    pq.write_table(table, path, write_statistics=False)
    info = RunInfo(source="wandb", run_id="shapes-synthetic", entity="synthetic-lab", project="shapes-synthetic",
                   name="shapes-synthetic", tags=["synthetic"], state="finished", remote_last_step=19)
    with store.transaction() as con:
        pk = runs.upsert_run(con, info)
        part = parts.facts(path, 10, 20)
        parts.register(con, pk, path, part)
        runs.raise_last_step(con, pk, part.last_step)
    _, out, _ = run_cli(cli, "--home", str(home), "export", "shapes-synthetic")
    got = {(s, k): v for s, k, v in _rows(out)}
    assert {k for _, k in got} == {"count", "flag", "train.loss", "train.acc", "lr"}
    assert got[(13, "count")] == 3.0 and got[(12, "flag")] == 1.0 and got[(13, "flag")] == 0.0
    assert math.isnan(got[(13, "train.loss")]) and got[(14, "train.acc")] == 4.0
    assert sorted(s for s, k in got if k == "lr") == [10, 13, 16, 19]   # null = not logged
    rows = _sql(cli, home, "SELECT key, count(*) FROM history GROUP BY key ORDER BY key")
    assert rows == [["count", "10"], ["flag", "10"], ["lr", "4"], ["train.acc", "10"], ["train.loss", "10"]]


def test_bounded_windows_give_what_one_query_gives(store, monkeypatch):
    """store/rolling.py cuts each key's rows into chunks with the windows' look-back: the
    detections must be exactly those of one query over the whole frame."""
    from marinctl.analysis.detect import detection
    from marinctl.store import rolling
    from tests.fakes.load import load_into_store
    from tests.fakes.synth import marin_run

    run = marin_run("chunks-synthetic", steps=3000, layers=2, experts=2, norm_every=10, state="running")
    steps, values = run.series["train/loss"]
    run.set_values("train/loss", [700, 1900, 2600], values[[700, 1900, 2600]] * 3.0)
    run.set_values("grad/norm/total", [1899, 2600], run.series["grad/norm/total"][1][[1899, 2600]] * 5.0)
    run.set_values("train/loss", [1000], [math.nan])
    pk = load_into_store(store, [run])[run.run_id]

    def found(rows: int):
        monkeypatch.setattr(rolling, "CHUNK_ROWS", rows)
        with store.connect() as con:
            got = detection.full(con, pk).found
        return sorted((a.step, a.metric, a.kind, round(a.score, 9)) for a in got)

    whole, chunked = found(10 ** 9), found(97)
    assert whole == chunked
    assert {(s, k) for s, _, k, _ in whole} >= {(700, "spike"), (2600, "co_spike")}


def test_crossings_walk_batches_as_one_frame():
    """store/rolling.crossings walks a frame one record batch (one part) at a time, carrying each
    key's last deviation; frames whose batches are out of step order are sorted whole. Both must
    give what a plain per-key walk in step order gives, NaN/±Inf and a zero reference included."""
    from marinctl.store import rolling

    rng = np.random.default_rng(7)
    rows = []
    for i in range(5):
        steps = np.sort(rng.choice(4000, 400, replace=False))
        values = 1 + rng.normal(0, 0.02, len(steps))
        values[rng.choice(len(steps), 6, replace=False)] = [math.nan, math.inf, -math.inf, 0.0, math.nan, 1.0]
        rows += [(f"leaf{i}", int(s), float(v)) for s, v in zip(steps, values)]
    refs = {"leaf0": 1.0, "leaf1": 1.01, "leaf2": 0.0, "leaf3": 0.99}   # leaf4 has no reference

    def walk(lo, hi):   # the reference: each key's rows in step order, lag of the deviation
        out = []
        for key, ref in refs.items():
            prev = None
            for _, s, v in sorted(r for r in rows if r[0] == key):
                with np.errstate(divide="ignore", invalid="ignore"):
                    dev = float(np.abs(np.float64(v) / ref - 1.0))
                if (dev > 0.01 or math.isnan(dev)) and (prev is None or prev <= 0.01) and lo <= s < hi:
                    out.append((key, s, v, ref, dev))
                prev = dev
        return sorted(out, key=lambda r: (r[1], -r[4] if r[4] == r[4] else float("-inf")))

    def frame(ordered: bool) -> pa.Table:
        got = sorted(rows, key=lambda r: r[1]) if ordered else [rows[i] for i in rng.permutation(len(rows))]
        t = pa.table({"key": [r[0] for r in got], "step": [r[1] for r in got], "value": [r[2] for r in got]})
        return pa.concat_tables([t.slice(0, 700), t.slice(700, 600), t.slice(1300)])   # three batches

    def same(a, b):
        return len(a) == len(b) and all(x[:2] == y[:2] and x[3] == y[3] and all(
            u == w or (math.isnan(u) and math.isnan(w)) for u, w in ((x[2], y[2]), (x[4], y[4]))) for x, y in zip(a, b))

    for ordered in (True, False):
        for lo, hi in ((0, None), (1500, 3000)):
            want = walk(lo, hi if hi is not None else 10 ** 9)
            assert want and same(rolling.crossings(None, frame(ordered), refs, 0.01, lo, hi), want), (ordered, lo, hi)


def test_lineage_and_ladder_read_the_same_from_parts(cli, tmp_path):
    """The watch fixture's SYNTHETIC hero fork chain and ladder rungs, stored once as long rows and
    once as parts + a long tail: `ladder`, `show`, `plot` and `export` of the stitched leaf, and
    `watch`'s screen, must not tell them apart."""
    import asyncio

    from marinctl.store import Store
    from tests.fakes.load import load_as_parts, load_into_store
    from tests.fakes.synth import hero_lineage, ladder_runs
    from tests.watch_pilot import open_watch, run_test, settle

    runs = hero_lineage(200) + ladder_runs(200)
    homes = {"long": tmp_path / "long", "parts": tmp_path / "parts"}
    load_into_store(Store(homes["long"] / "marinctl.duckdb"), runs)
    load_as_parts(Store(homes["parts"] / "marinctl.duckdb"), runs, tmp_path / "export", tail=40, per_file=150)
    leaf = runs[len(hero_lineage(200)) - 1].run_id
    assert _sql(cli, homes["parts"], "SELECT count(DISTINCT run_pk) FROM history_parts")[0][0] == str(len(runs))

    def both(*args: str) -> tuple[str, str]:
        return tuple(run_cli(cli, "--home", str(homes[h]), *args)[1] for h in ("long", "parts"))

    a, b = both("ladder", "--pin", "1.6", "--json")
    assert a == b and len(json.loads(a)["rungs"]) == 4
    a, b = both("show", leaf, "--json")
    assert a == b
    a, b = both("plot", "train/loss", "--run", leaf, "--width", "100", "--height", "18")
    assert a == b and a.strip()
    a, b = both("export", leaf, "--keys", "train/loss,grad/norm/total,optim/learning_rate")
    assert a == b and len(_rows(a)) == 3 * (800 - 601)   # the leaf's own steps

    async def watch_screen(home: Path) -> str:
        app = open_watch(home / "marinctl.duckdb", leaf)
        async with run_test(app) as pilot:
            text = await settle(pilot)
        return "\n".join(text.splitlines()[1:])   # the header's first line carries the sync clock

    long_screen, parts_screen = (asyncio.run(watch_screen(homes[h])) for h in ("long", "parts"))
    assert long_screen == parts_screen and "train/loss" in long_screen
