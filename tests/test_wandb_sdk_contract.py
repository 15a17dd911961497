"""The real wandb SDK (0.31, via its spawned wandb-core) against the fake W&B server.

This pins the fake server to what the official client actually sends and parses, so
marinctl's own client can be tested against the same server with confidence. All data is
SYNTHETIC (tests/fakes/synth.py); everything runs on 127.0.0.1.
"""

from __future__ import annotations

import base64
import io
import json
import os
import pathlib
import subprocess

import httpx
import pyarrow.parquet as pq
import pytest

from repro.wandb_log import teardown as teardown_wandb  # wandb.teardown() that cannot wait for ever
from tests.fakes.synth import hero_lineage, ladder_runs
from tests.fakes.wandb_server import Faults, Rewind, WandbServer

PATH = "marin-community/marin_moe"
KEY = "x" * 40  # any 40-character key: the fake server accepts every key


def _descends_from_us(pid: str) -> bool:
    """Whether `pid` is a descendant of this test process (another suite's wandb-core is not ours)."""
    me = os.getpid()
    while pid not in ("0", "1"):
        try:
            pid = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
        except (OSError, IndexError):
            return False
        if pid == str(me):
            return True
    return False


def _core_pids() -> set[str]:
    out = subprocess.run(["pgrep", "-f", "wandb-core"], capture_output=True, text=True).stdout
    return {pid for pid in out.split() if _descends_from_us(pid)}


@pytest.fixture(scope="module")
def wandb_env(tmp_path_factory):
    """One wandb-core for the module; the parquet cache dir is fixed when it spawns."""
    before = _core_pids()
    cache = tmp_path_factory.mktemp("wandb-cache")
    env = {"WANDB_CACHE_DIR": str(cache), "WANDB_CONFIG_DIR": str(cache / "config"),
           "WANDB_DIR": str(cache), "WANDB_SILENT": "true"}
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("WANDB_MODE", raising=False)
        import wandb

        yield wandb
        teardown_wandb()
    leaked = _core_pids() - before
    assert not leaked, f"wandb-core left running: {leaked}"


@pytest.fixture(scope="module")
def hero():
    return hero_lineage(100)  # root 0..210, child 201..310 (fork 200), leaf 301..399 (fork 300)


@pytest.fixture(scope="module")
def served(wandb_env, hero):
    runs = hero + ladder_runs(200)
    with WandbServer(runs) as server:
        api = wandb_env.Api(api_key=KEY, overrides={"base_url": server.url})
        yield server, api, {r.run_id: r for r in runs}


def expected_rows(hero, index):
    """Ground truth for a lineage member: inherited parent rows <= fork_step, then its own."""
    run = hero[index]
    rows = run.rows()
    for parent, child in zip(reversed(hero[:index]), reversed(hero[1:index + 1])):
        rows = parent.rows(None if parent.fork_step is None else parent.fork_step + 1, child.fork_step + 1) + rows
    return rows


def by_step(rows):
    """Rows keyed by step, dropping the None cells parquet rows carry for keys not logged."""
    return {r["_step"]: {k: v for k, v in r.items() if v is not None} for r in rows}


@pytest.mark.slow
def test_lists_every_run_with_paging_filters_and_order(served):
    server, api, runs = served
    listed = [r.id for r in api.runs(PATH, per_page=3)]
    assert sorted(listed) == sorted(runs) and len(listed) == 7
    # +created_at is the SDK default order: the hero root (created first) leads
    assert listed[0] == "hero-12d8b6f0-dee637"
    assert server.stats["Runs"] >= 3
    hero_ids = [r.id for r in api.runs(PATH, filters={"group": "moe-hero-ep"}, order="-created_at")]
    assert hero_ids == ["hero-ragged_a2a-ep-step81k", "hero-wd-gate-router-p02-step54k", "hero-12d8b6f0-dee637"]
    ladder = [r.id for r in api.runs(PATH, filters={"display_name": {"$regex": "^ladder-d1"}})]
    assert sorted(ladder) == ["ladder-d1024", "ladder-d1536"]
    live = [r.id for r in api.runs(PATH, filters={"$and": [{"state": "running"}, {"tags": {"$in": ["hero"]}}]})]
    assert live == ["hero-ragged_a2a-ep-step81k"]


@pytest.mark.slow
def test_config_summary_and_metadata(served):
    server, api, runs = served
    for rid in ("hero-wd-gate-router-p02-step54k", "ladder-d768"):
        synth = runs[rid]
        run = api.run(f"{PATH}/{rid}")
        assert run.config == synth.config
        summary = {k: v for k, v in dict(run.summary).items() if k != "_wandb"}
        assert summary == synth.summary
        assert (run.name, run.group, run.state, list(run.tags)) == (synth.display_name, synth.group, synth.state, synth.tags)
    child = api.run(f"{PATH}/hero-wd-gate-router-p02-step54k")
    assert child.config["trainer"]["tracker"]["fork_from"] == "hero-12d8b6f0-dee637?_step=200"
    assert child.lastHistoryStep == 310


@pytest.mark.slow
@pytest.mark.parametrize("index", [0, 1])
def test_scan_history_is_the_served_history(served, hero, index):
    """Finished runs are served entirely from the parquet export; the fork child includes
    the parent's rows <= fork_step."""
    server, api, _ = served
    run = api.run(f"{PATH}/{hero[index].run_id}")
    rows = list(run.scan_history())
    want = expected_rows(hero, index)
    assert len(rows) == len(want)
    assert by_step(rows) == by_step(want)
    assert rows[0]["_step"] == 0 and rows[-1]["_step"] == hero[index].last_step


@pytest.mark.slow
def test_scan_history_of_a_running_run_joins_parquet_and_live_rows(served, hero):
    server, api, _ = served
    before = server.stats["HistoryPage"]
    run = api.run(f"{PATH}/{hero[2].run_id}")
    rows = list(run.scan_history(page_size=50))
    want = expected_rows(hero, 2)
    # steps < 320 come from parquet, the rest from HistoryPage windows [minStep, maxStep)
    assert server.stats["HistoryPage"] - before == 2          # windows [300,350) and [350,400)
    got = by_step(rows)
    assert got == by_step(want) and sorted(got) == list(range(400))
    # wandb-core 0.31 appends the whole live window it asked for even where parquet already
    # covered it, so the boundary window's exported steps (300..319) come back twice.
    assert len(rows) == len(want) + 20


@pytest.mark.slow
def test_sampled_history(served, hero):
    server, api, _ = served
    run = api.run(f"{PATH}/{hero[0].run_id}")
    rows = run.history(samples=40, pandas=False)
    assert len(rows) == 40 and rows[0]["_step"] == 0 and rows[-1]["_step"] == hero[0].last_step
    assert server.stats["RunFullHistory"] >= 1
    evals = run.history(keys=["eval/paloma/macro_loss"], pandas=False)
    assert [r["_step"] for r in evals] == [0, 100, 200]
    assert evals[1]["eval/paloma/macro_loss"] == hero[0].series["eval/paloma/macro_loss"][1][1]
    assert set(evals[0]) == {"_step", "eval/paloma/macro_loss"}


@pytest.mark.slow
def test_sdk_stops_at_an_empty_runs_page(wandb_env, hero):
    """W&B can answer a runs page with no edges but hasNextPage=true. The SDK then stops
    listing (its paginator ends when a page adds nothing) — marinctl must not."""
    with WandbServer(hero, faults=Faults(empty_pages=(1,))) as server:
        api = wandb_env.Api(api_key=KEY, overrides={"base_url": server.url})
        listed = [r.id for r in api.runs(PATH, per_page=1)]
        assert listed == ["hero-12d8b6f0-dee637"]
        assert server.stats["Runs"] == 2


@pytest.mark.slow
def test_sdk_rides_out_rate_limits(wandb_env, hero):
    faults = Faults(rate_limits=[(0, 1)], retry_after=1, ops=("HistoryPage",))
    with WandbServer(hero, faults=faults, exported_until={hero[2].run_id: 350}) as server:
        api = wandb_env.Api(api_key=KEY, overrides={"base_url": server.url})
        rows = list(api.run(f"{PATH}/{hero[2].run_id}").scan_history(page_size=50, use_cache=False))
        assert by_step(rows) == by_step(expected_rows(hero, 2))
        assert server.stats["HistoryPage"] == 2  # [350,400): the 1st try answered 429, the retry served


# --- the fake server over raw HTTP (what marinctl's own client sees) -----------------------

RUNS_Q = """query Runs($project: String!, $entity: String!, $cursor: String, $perPage: Int, $order: String, $filters: JSONString) {
  project(name: $project, entityName: $entity) { runCount(filters: $filters)
    runs(filters: $filters, after: $cursor, first: $perPage, order: $order) {
      edges { node { ...R } cursor } pageInfo { endCursor hasNextPage } } } }
fragment R on Run { name state createdAt heartbeatAt historyLineCount historyKeys tags }"""
HISTORY_Q = """query HistoryPage($entity: String!, $project: String!, $run: String!, $minStep: Int64!, $maxStep: Int64!, $pageSize: Int!) {
  project(name: $project, entityName: $entity) { run(name: $run) { history(minStep: $minStep, maxStep: $maxStep, samples: $pageSize) } } }"""
KEYS_Q = """query K($entity: String!, $project: String!, $run: String!) {
  project(name: $project, entityName: $entity) { run(name: $run) { last: historyKeys } } }"""


def gql(server, query, headers=None, **variables):
    variables.setdefault("entity", "marin-community")
    variables.setdefault("project", "marin_moe")
    return httpx.post(server.url + "/graphql", json={"query": query, "variables": variables},
                      headers=headers or {}, timeout=10)


def history(server, run, lo, hi):
    r = gql(server, HISTORY_Q, run=run, minStep=lo, maxStep=hi, pageSize=hi - lo)
    return [json.loads(x) for x in r.json()["data"]["project"]["run"]["history"]]


def test_anonymous_reads_work_and_viewer_is_null(hero):
    with WandbServer(hero) as server:
        r = gql(server, "query V { viewer { username } }")
        assert r.status_code == 200 and r.json()["data"]["viewer"] is None
        basic = base64.b64encode(b"api:" + KEY.encode()).decode()
        r = gql(server, "query V { viewer { username entity } }", headers={"Authorization": f"Basic {basic}"})
        assert r.json()["data"]["viewer"] == {"username": "synthetic-user", "entity": "marin-community"}
        r = gql(server, RUNS_Q, perPage=2, order="+created_at")
        conn = r.json()["data"]["project"]["runs"]
        assert [e["node"]["name"] for e in conn["edges"]] == [hero[0].run_id, hero[1].run_id]
        assert base64.b64decode(conn["pageInfo"]["endCursor"]).decode() == "arrayconnection:1"
        assert conn["pageInfo"]["hasNextPage"] is True
        assert server.stats["V"] == 2 and server.auth_requests == 1 and server.unknown == []


@pytest.fixture(scope="module")
def hero_server(hero):
    """The hero lineage served plainly, for the tests that only read it (and count nothing)."""
    with WandbServer(hero) as server:
        yield server


def test_filters_on_times_names_and_order(hero, hero_server):
    server = hero_server

    def names(flt, order="+created_at"):
        d = gql(server, RUNS_Q, filters=json.dumps(flt), order=order).json()["data"]["project"]
        return d["runCount"], [e["node"]["name"] for e in d["runs"]["edges"]]

    cut = hero[1].created_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert names({"createdAt": {"$gt": cut}}) == (1, [hero[2].run_id])
    hb = hero[0].heartbeat_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert names({"heartbeatAt": {"$gt": hb}}, "+heartbeat_at")[1] == [hero[1].run_id, hero[2].run_id]
    assert names({"name": {"$in": [hero[0].run_id, "nope"]}}) == (1, [hero[0].run_id])
    assert names({"state": "finished"})[1] == [hero[1].run_id]
    r = gql(server, RUNS_Q, perPage=1).json()["data"]["project"]["runs"]["edges"][0]["node"]
    assert r["createdAt"].endswith("Z") and r["name"] == hero[2].run_id  # -created_at by default
    assert r["historyKeys"]["lastStep"] == 399 and r["historyLineCount"] == 400


def test_fork_child_history_inherits_parent_rows(hero, hero_server):
    root, mid, _ = hero
    rows = history(hero_server, mid.run_id, 195, 206)
    assert [r["_step"] for r in rows] == list(range(195, 206))
    assert rows[0] == root.rows(195, 196)[0] and rows[-1] == mid.rows(205, 206)[0]
    # the parent logged past the fork point; the child's history never shows those rows
    assert rows[6]["train/loss"] != root.series["train/loss"][1][201]
    assert history(hero_server, mid.run_id, 400, 500) == []  # an empty window past the end


def test_parquet_export_and_live_rows(hero):
    leaf = hero[2]
    q = """query P($entity: String!, $project: String!, $runName: String!, $liveKeys: [String!]!) {
      project(name: $project, entityName: $entity) { run(name: $runName) { parquetHistory(liveKeys: $liveKeys) { parquetUrls liveData } } } }"""
    with WandbServer(hero, exported_until={leaf.run_id: 350}, parquet_steps_per_file=100) as server:
        ph = gql(server, q, runName=leaf.run_id, liveKeys=["_step"]).json()["data"]["project"]["run"]["parquetHistory"]
        assert [r["_step"] for r in ph["liveData"]] == list(range(350, 400))
        assert all(set(r) == {"_step"} for r in ph["liveData"])
        tables = [pq.read_table(io.BytesIO(httpx.get(u).content)) for u in ph["parquetUrls"]]
        assert [t.num_rows for t in tables] == [100, 100, 100, 50]
        t = tables[2]
        assert t.column("_step").to_pylist() == list(range(200, 300))
        # step 250 belongs to the middle run; keys it did not log are null
        mid = hero[1]
        assert t.column("train/loss")[50].as_py() == mid.series["train/loss"][1][250 - 201]
        assert t.column("params/norm/total")[51].as_py() is None
        ranged = httpx.get(ph["parquetUrls"][0], headers={"Range": "bytes=-8"})
        assert ranged.status_code == 206 and ranged.content[-4:] == b"PAR1"
        assert server.stats["GET /files"] == 5


def test_http_faults(hero):
    faults = Faults(server_errors=[(1, 2)], rate_limit_every=5, retry_after=3, graphql_error_every=7,
                    truncate_every=11, slow_every=13, slow_seconds=0.3)
    with WandbServer(hero, faults=faults) as server:
        seen = []
        for i in range(14):
            try:
                r = gql(server, KEYS_Q, run=hero[0].run_id)
                seen.append((r.status_code, "errors" in r.json()))
            except httpx.HTTPError as exc:
                seen.append(type(exc).__name__)
            if i == 4:
                assert r.headers["Retry-After"] == "3" and r.headers["RateLimit-Reset"] == "3"
        assert seen[:8] == [(200, False), (503, True), (503, True), (200, False), (429, True),
                            (200, False), (200, True), (200, False)]
        assert seen[9] == (429, True) and seen[10] == "RemoteProtocolError" and seen[12] == (200, False)
        assert server.stats["K"] == 14


def test_empty_listing_page_keeps_the_cursor(hero):
    with WandbServer(hero, faults=Faults(empty_pages=(1,))) as server:
        names, cursor, pages = [], None, 0
        while True:
            conn = gql(server, RUNS_Q, perPage=1, cursor=cursor, order="+created_at").json()["data"]["project"]["runs"]
            pages += 1
            names += [e["node"]["name"] for e in conn["edges"]]
            if not conn["pageInfo"]["hasNextPage"]:
                break
            cursor = conn["pageInfo"]["endCursor"]
        assert names == [r.run_id for r in hero] and pages == 4


def test_rewind_moves_last_step_back_then_forward_with_new_values(hero):
    root = hero[0]
    old = dict(zip(*[a.tolist() for a in root.series["train/loss"]]))
    rw = Rewind(root.run_id, at_step=150, seed=42, at_request=1, regrow_after=2)
    with WandbServer(hero, faults=Faults(rewind=rw)) as server:
        last = [gql(server, KEYS_Q, run=root.run_id).json()["data"]["project"]["run"]["last"]["lastStep"]
                for _ in range(4)]
        assert last == [210, 149, 149, 210]
        rows = history(server, root.run_id, 148, 152)
        assert rows[0]["train/loss"] == old[148] and rows[2]["train/loss"] != old[150]


def test_command_line_server_prints_its_url_and_stops_by_itself():
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.wandb_server", "--runs", "hero-small", "--seconds", "3"],
                            cwd=root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        r = httpx.post(url + "/graphql", json={"query": '{ project(name: "marin_moe", entityName: "marin-community") { runCount } }'})
        assert r.json()["data"]["project"]["runCount"] == 7
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
