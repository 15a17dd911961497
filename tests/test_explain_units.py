"""Roles, exact attribution, and the CLI contract for `explain step N` / `anomalies` (SYNTHETIC data)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fakes import synth
from tests.fakes.load import load_into_store

from marinctl.analysis import attribution, roles
from marinctl.sync import derive

CAUSES = {"optimizer", "adam_state", "data_batch", "numerics", "logit_growth", "init_shape", "moe_routing",
          "heuristic_parameter", "infrastructure", "config", "none"}


@pytest.mark.parametrize("path,module,layer,role", [
    ("stacked_blocks.3.mlp.router_bias", "router_bias", 3, "heuristic"),
    ("stacked_blocks.3.mlp.router.weight", "router", 3, "adam"),
    ("stacked_blocks.0.attn.w_q", "attention", 0, "muonh"),
    ("stacked_blocks.0.attn_norm.weight", "norm_gains", 0, "adam"),
    ("stacked_blocks.1.mlp.experts.w_gate", "routed_experts", 1, "muonh"),
    ("stacked_blocks.1.mlp.shared.w_up", "shared_experts", 1, "muonh"),
    ("token_embed", "embeddings", None, "adam"),
    ("lm_head", "lm_head", None, "adamh"),
    ("stacked_blocks.stacked.mlp.router_bias", "router_bias", None, "heuristic"),
    ("transformer.layers.9.self_attn.v_proj.weight", "attention", 9, "muonh"),
    ("pending_qb_betas", "other", None, "buffer"),
])
def test_roles_from_names(path, module, layer, role):
    recipe = roles.RecipeRoles("muonh", "qb", None, 384, "config")
    got = recipe.role(path)
    assert (got.module, got.layer, got.role) == (module, layer, role)


def test_recipe_from_config():
    hero = roles.recipe_roles({"run_group": "moe-hero-ep", "run_id": "hero-x", "config": {"adam_lr": 0.000759}})
    assert (hero.optimizer, hero.bias_rule) == ("muonh", "qb")
    dense = roles.recipe_roles({"run_group": "dense", "run_id": "llama", "config": {"lr": 3e-4}})
    assert (dense.optimizer, dense.bias_rule) == ("adam", "none")
    ds = roles.recipe_roles({"run_group": "x", "run_id": "y", "config": {"router_bias_update_speed": 0.001, "num_experts": 256}})
    assert ds.bias_rule == "sign" and ds.sign_rule_bound(1) == pytest.approx(0.001 * 16)


def test_attribution_is_exact():
    rng = np.random.default_rng(0)
    names = [f"params/norm/stacked_blocks.{i}.{leaf}" for i in range(3) for leaf in synth.LAYER_LEAVES]
    before = {n: float(x) for n, x in zip(names, rng.uniform(1, 50, len(names)))}
    after = {n: v * float(rng.uniform(0.9, 1.1)) for n, v in before.items()}
    att = attribution.split(before, after, roles.RecipeRoles("muonh", "qb", None, 8, "config"))
    total_sq = sum(v * v for v in after.values()) - sum(v * v for v in before.values())
    assert att.total_delta == pytest.approx(total_sq, rel=1e-12)
    assert sum(l["share"] for l in att.leaves) == pytest.approx(1.0, abs=1e-9)
    assert sum(r["share"] for r in att.by_module) == pytest.approx(1.0, abs=1e-9)
    assert sum(r["share"] for r in att.by_layer) == pytest.approx(1.0, abs=1e-9)
    assert {r["layer"] for r in att.by_layer} == {0, 1, 2}


@pytest.fixture
def qb_store(store):
    run = synth.marin_run("synthetic-cli", steps=1200, layers=2, experts=8)
    for i in range(2):
        key = f"params/norm/stacked_blocks.{i}.mlp.router_bias"
        s, v = run.series[key]
        run.set_values(key, s, np.where(s >= 500, 30.0, v))
    leaves = [k for k in run.series if k.startswith("params/norm/") and k != "params/norm/total"]
    s = run.series[leaves[0]][0]
    run.set_values("params/norm/total", s, np.sqrt(sum(run.series[k][1] ** 2 for k in leaves)))
    sl, vl = run.series["train/loss"]
    run.set_values("train/loss", [900], [vl[900] * 2])
    pks = load_into_store(store, [run])
    with store.transaction() as con:
        derive.detect(con, pks["synthetic-cli"], full=True)
    return store


def _use(store, monkeypatch):
    monkeypatch.setenv("MARINCTL_HOME", str(store.path.parent))
    store.path.rename(store.path.parent / "marinctl.duckdb")


def test_cli_explain_json_follows_contract(qb_store, cli, monkeypatch):
    _use(qb_store, monkeypatch)
    code, out, err = cli("explain", "step", "500", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["run"] == "hero" and doc["run_at_step"] == "synthetic-cli" and doc["step"] == 500
    assert {"findings", "context"} <= set(doc)
    assert {"lr_phase", "data_phase", "events"} <= set(doc["context"])
    f = doc["findings"][0]
    assert {"metric", "kind", "step", "cause_class", "confidence", "attribution", "explanation", "evidence"} <= set(f)
    assert f["cause_class"] in CAUSES and 0 <= f["confidence"] <= 1
    assert all({"name", "share"} <= set(a) for a in f["attribution"])
    code, out, err = cli("explain", "step", "500")
    assert code == 0 and "heuristic_parameter" in out and "router bias" in out and "context" in out


def test_cli_anomalies_json_follows_contract(qb_store, cli, monkeypatch):
    _use(qb_store, monkeypatch)
    code, out, err = cli("anomalies", "--json")
    assert code == 0, err
    rows = json.loads(out)
    assert [(r["step"], r["kind"]) for r in rows] == [(500, "param_norm_jump"), (900, "spike")]
    for r in rows:
        assert set(r) == {"run", "step", "metric", "kind", "score", "cause_class"} and r["cause_class"] in CAUSES
    code, out, _ = cli("anomalies")
    assert code == 0 and "param_norm_jump" in out


def test_cli_bad_input_exits_2(qb_store, cli, monkeypatch):
    _use(qb_store, monkeypatch)
    code, _, err = cli("explain", "step", "999999")
    assert code == 2 and "outside" in err and "try:" in err
    code, _, err = cli("explain", "step", "500", "--metric", "no/such/key")
    assert code == 2 and "no/such/key" in err
    code, _, err = cli("explain", "step", "500", "--run", "nope")
    assert code == 2


def test_explain_context_shows_nearby_github_events_inert(qb_store, cli, monkeypatch):
    with qb_store.transaction() as con:
        uid = con.execute("SELECT uid FROM runs").fetchall()[0][0]
        con.execute("INSERT INTO events (event_id, source, kind, title, url, run_uid, step) VALUES (?, 'github', 'comment', ?, ?, ?, ?)",
                    ["github:o/r#1/comment/1", "restarted \x1b]52;c;ZXZpbA==\x07after \x1b[31mcrash", "https://github.com/o/r/issues/1#c1", uid, 505])
    _use(qb_store, monkeypatch)
    code, out, err = cli("explain", "step", "500", "--json")
    ev = json.loads(out)["context"]["events"]
    assert code == 0 and ev and ev[0]["url"] == "https://github.com/o/r/issues/1#c1" and ev[0]["step"] == 505
    code, out, err = cli("explain", "step", "500")
    assert "https://github.com/o/r/issues/1#c1" in out and "\x1b" not in out and "restarted after crash" in out
    assert "loss and gradient norm stayed calm" in out


def test_explain_metric_focus_names_the_leaf_role(qb_store, cli, monkeypatch):
    _use(qb_store, monkeypatch)
    code, out, err = cli("explain", "step", "500", "--metric", "params/norm/stacked_blocks.1.mlp.router_bias", "--json")
    assert code == 0, err
    me = json.loads(out)["metric_evidence"]
    assert (me["role"], me["module"], me["layer"], me["value"]) == ("heuristic", "router_bias", 1, 30.0)
    code, out, err = cli("explain", "step", "900", "--metric", "train/loss", "--json")
    doc = json.loads(out)
    assert [f["kind"] for f in doc["findings"]] == ["spike"] and doc["metric_evidence"]["z"] > 8
