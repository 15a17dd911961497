"""One mirror for a team: a DuckLake synced from one home reads back from another as an embedded mirror.

Two homes stand for two machines and one lake (a real PostgreSQL catalog, a data folder) lies
between them: home A creates the lake with `marinctl store init` and syncs a W&B project into it
(a loopback fake serving SYNTHETIC runs: one long enough for W&B's parquet export, kept as
parts in the shared folder, one of JSON windows only); home E syncs the same runs into its own
embedded file. Every reading command from home B over the lake prints what home E prints over
its file — `runs`, `show`, `export`, `explain`, `anomalies` — and the Python API over the lake
equals the CLI. All runs are SYNTHETIC.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.blackbox import marinctl_run, sync_served
from tests.blackbox import in_process
from tests.lake import init_lake

E, P = "synthetic-lab", "lake-synthetic"
LONG, SHORT = "lake-long-synthetic", "lake-short-synthetic"


def _runs():
    from tests.fakes.synth import marin_run

    small = dict(entity=E, project=P, group="lake-synthetic", layers=1, experts=2, norm_every=500, eval_every=1000)
    runs = [marin_run(LONG, steps=6000, seed=11, **small),    # exports [0, 5000) + the live tail
            marin_run(SHORT, steps=900, seed=12, **small)]    # JSON windows only
    runs[0].set_values("train/loss", [2600], [40.0])        # a spike: anomalies and findings are not empty
    runs[0].set_values("grad/norm/total", [3100], [float("nan")])    # a NaN, kept as NaN in both stores
    return runs


@pytest.fixture(scope="module")
def world(pg_cluster, tmp_path_factory):
    root = tmp_path_factory.mktemp("lake-mirror")
    url, data = pg_cluster.url(pg_cluster.new_database()), root / "shared"
    base = {k: v for k, v in os.environ.items() if not k.startswith("MARINCTL_")}
    lake_env = {**base, "MARINCTL_STORE": url, "MARINCTL_STORE_DATA": str(data), "WANDB_API_KEY": "x" * 40}
    plain_env = {**base, "WANDB_API_KEY": "x" * 40}
    done = marinctl_run(["store", "init", url, "--data", str(data)], env=base)
    assert done.returncode == 0, done.stderr
    runs = _runs()
    for home, env in ((root / "a", lake_env), (root / "e", plain_env)):
        done = sync_served(runs, f"{E}/{P}", "--json", env={**env, "MARINCTL_HOME": str(home)})
        assert done.returncode == 0, done.stderr
    assert (data / "history").is_dir() and any((data / "history").rglob("*.parquet")), "parts kept in the shared folder"

    def on_lake(*args: str, home: str = "b") -> str:       # a reader on a machine of its own (home B)
        code, out, err = in_process("--home", str(root / home), "--store", url, "--store-data", str(data), *args)
        assert code == 0, err
        return out

    def embedded(*args: str) -> str:
        code, out, err = in_process("--home", str(root / "e"), *args)
        assert code == 0, err
        return out

    return {"url": url, "data": data, "lake": on_lake, "embedded": embedded, "runs": runs, "root": root,
            "plain_env": plain_env}


@pytest.mark.parametrize("args", [
    ("runs", "--json"), ("show", LONG, "--json"), ("show", SHORT, "--json"),
    ("export", LONG), ("export", SHORT, "--keys", "train/loss"),
    ("explain", "step", "2600", "--run", LONG, "--json"), ("anomalies", "--run", LONG, "--json"),
], ids=lambda a: "-".join(a)[:40])
def test_another_home_reads_the_lake_as_the_embedded_mirror(world, args):
    got, want = world["lake"](*args), world["embedded"](*args)
    assert got == want
    assert got.strip() not in ("", "[]")


def test_the_python_api_over_the_lake_equals_the_cli(world):
    import marinctl

    m = marinctl.open(store=world["url"], data=str(world["data"]))
    try:
        runs = json.loads(world["lake"]("runs", "--json"))
        assert sorted(_table(m.runs()).column("run").to_pylist()) == sorted(r["run"] for r in runs)
        rows = _table(m.history(LONG, keys=["train/loss"]))
        printed = world["lake"]("export", LONG, "--keys", "train/loss").splitlines()[1:]
        assert len(printed) == rows.num_rows > 5000
        assert [f"{s},{k}" for s, k in zip(rows.column("step").to_pylist(), rows.column("key").to_pylist())] == \
               [",".join(line.split(",")[:2]) for line in printed]
        assert m.explain(2600, run=LONG) == json.loads(world["lake"]("explain", "step", "2600", "--run", LONG, "--json"))
    finally:
        m.close()


def _table(relation):
    got = relation.arrow()
    return got.read_all() if hasattr(got, "read_all") else got     # DuckDB 1.5 hands a reader


def test_a_lake_that_holds_no_store_is_named(pg_cluster, tmp_path):
    url = pg_cluster.url(pg_cluster.new_database())
    env = {k: v for k, v in os.environ.items() if not k.startswith("MARINCTL_")}
    proc = marinctl_run(["--store", url, "runs", "--json"], env=env)
    assert proc.returncode == 2
    assert "no marinctl store in the DuckLake" in proc.stderr and "store init" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) <= 2
    import marinctl

    with pytest.raises(marinctl.NoStore):
        marinctl.open(store=url)


# --- store copy -------------------------------------------------------------------------------------

def test_store_copy_moves_a_mirror_both_ways_and_the_second_time_only_what_changed(world, pg_cluster):
    root = world["root"]
    url, data = pg_cluster.url(pg_cluster.new_database()), root / "team"
    init_lake(url, data)
    laptop = root / "e" / "marinctl.duckdb"

    def copy(src: str, dst: str) -> dict:
        code, out, err = in_process("store", "copy", src, dst, "--json")
        assert code == 0, err
        return json.loads(out)

    first = copy(str(laptop), url)
    want_rows = sum(len(r.long_rows()) for r in world["runs"])
    assert first == {"runs": 2, "rows": want_rows}
    assert copy(str(laptop), url) == {"runs": 0, "rows": 0}
    short = world["runs"][1]
    before = short.last_step
    short.extend(before + 300)                                # the laptop syncs 300 more steps of one run
    done = sync_served(world["runs"], f"{E}/{P}/{SHORT}", env={**world["plain_env"], "MARINCTL_HOME": str(root / "e")})
    assert done.returncode == 0, done.stderr
    grown = copy(str(laptop), url)
    assert grown == {"runs": 1, "rows": sum(1 for s, _, _ in short.long_rows() if s > before)}   # the new steps only
    team = ("--home", str(root / "c"), "--store", url, "--store-data", str(data))
    for args in (("runs", "--json"), ("export", SHORT), ("export", LONG), ("anomalies", "--run", LONG, "--json")):
        code, out, err = in_process(*team, *args)
        assert code == 0 and out == world["embedded"](*args), (args, err)
    flight = root / "flight.duckdb"                           # the lake into a file, for a flight
    assert copy(url, str(flight)) == {"runs": 2, "rows": want_rows + grown["rows"]}
    for args in (("runs", "--json"), ("export", SHORT), ("explain", "step", "2600", "--run", LONG, "--json")):
        code, out, err = in_process("--db", str(flight), *args)
        assert code == 0 and out == world["embedded"](*args), (args, err)


def test_a_file_a_newer_duckdb_wrote_is_one_line_naming_the_copy_to_make(tmp_path, pg_cluster):
    """tests/fixtures/duckdb2-storage.duckdb.gz: a SYNTHETIC file DuckDB 2.0.1 wrote in its default
    storage format, which the DuckDB `marinctl[team]` pins cannot read."""
    import gzip
    from pathlib import Path

    import duckdb

    if not duckdb.__version__.startswith("1."):
        pytest.skip("this DuckDB reads the newer format itself")
    old = tmp_path / "laptop.duckdb"
    old.write_bytes(gzip.decompress((Path(__file__).parent / "fixtures" / "duckdb2-storage.duckdb.gz").read_bytes()))
    url = pg_cluster.url(pg_cluster.new_database())
    init_lake(url, tmp_path / "team")
    for args in (("--db", str(old), "runs"), ("store", "copy", str(old), url)):
        code, out, err = in_process(*args)
        lines = err.strip().splitlines()
        assert code == 1 and len(lines) == 2, err
        assert "written by a newer DuckDB" in lines[0] and f"store copy {old}" in lines[1], lines
