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

from tests.blackbox import env_with, marinctl_run, sync_served

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

    def on_lake(*args: str, home: str = "b") -> str:
        proc = marinctl_run(["--home", str(root / home), *args], env=lake_env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def embedded(*args: str) -> str:
        proc = marinctl_run(["--home", str(root / "e"), *args], env=plain_env, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    return {"url": url, "data": data, "lake": on_lake, "embedded": embedded, "runs": runs}


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
    assert env_with()  # the process environment is left as it was
