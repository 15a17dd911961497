"""Roles, exact attribution, and the CLI contract for `explain step N` / `anomalies` (SYNTHETIC data)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fakes import synth
from tests.fakes.load import load_into_store

from marinctl.analysis.explain import attribution, roles
from marinctl.sync import derive

CAUSES = {"optimizer", "adam_state", "data_batch", "numerics", "logit_growth", "init_shape", "moe_routing",
          "heuristic_parameter", "infrastructure", "config", "none"}


@pytest.mark.parametrize("path,module,layer,role", [
    ("stacked_blocks.3.mlp.router_bias", "router_bias", 3, "heuristic"),
    ("stacked_blocks.3.mlp.router.weight", "router", 3, "adam"),
    ("stacked_blocks.0.attn.w_q", "attention", 0, "muonh"),
    ("stacked_blocks.0.attn_norm.weight", "norm_gains", 0, "adam"),
    ("stacked_blocks.1.rms_attn.weight", "norm_gains", 1, "adam"),      # repro/model.py's RMSNorm gains
    ("stacked_blocks.1.rms_mlp.weight", "norm_gains", 1, "adam"),
    ("stacked_blocks.1.attn_gated_norm.w_down", "norm_gains", 1, "muonh"),
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
        assert set(r) == {"run", "step", "start", "end", "metric", "kind", "score", "cause_class"} and r["cause_class"] in CAUSES
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


def test_roles_name_the_update_rule_repro_trains_each_parameter_with():
    """`explain` reads a parameter's norm by its update rule (a hyperball one must not move); for every
    parameter of the hero's architecture (repro/model.py, the rung's own names) the rule it names
    is the optimizer group repro trains it in. `rms_attn.weight` (an RMSNorm gain, Adam) was read
    as a MuonH attention matrix ("hyperball drift" on every repro run), and the GatedNorm matrices
    `attn_gated_norm.w_*` as the Adam-trained attention gate."""
    torch = pytest.importorskip("torch")
    from repro.model import ModelConfig, MoEDecoder
    from repro.optim import group_of

    torch.manual_seed(0)
    model = MoEDecoder(ModelConfig(vocab_size=64, hidden_dim=32, num_layers=2, num_heads=2, head_dim=16,
                                   num_experts=4, num_experts_per_token=2, intermediate_dim=16, latent_dim=16,
                                   shared_expert_intermediate_dim=16, seq_len=16, sliding_window=8,
                                   gated_norm_rank=4, qb_hist_bins=200))
    recipe = roles.RecipeRoles("muonh", "qb", None, 4, "config")
    wrong = {name: (recipe.role(name).role, group_of(name, p.ndim)) for name, p in model.named_parameters()
             if recipe.role(name).role != group_of(name, p.ndim)}
    assert not wrong, wrong


def test_a_run_scored_by_older_detectors_is_scored_afresh_at_the_next_sync(tmp_path, cli):
    """Detections are derived: an upgrade whose detectors find otherwise (the roles above) must not
    leave a stored false finding in `anomalies` and `explain` for ever. A SYNTHETIC SDK run, synced
    through the CLI, scored "by an older release" (its pass stamped with another DETECTORS and a
    hyperball drift on an Adam-trained RMSNorm gain stored), is scored whole at the next sync."""
    from marinctl.analysis.detect import detection
    from marinctl.domain import Anomaly
    from marinctl.store import Store, anomalies as A, runs as R, state
    from tests.blackbox import run_cli, sdk_write, wandb_files

    logged = sdk_write(tmp_path / "w", '''
        run = wandb.init(project="detectors-synthetic", settings=wandb.Settings(console="off", silent=True))
        for s in range(40):
            run.log({"train/loss": 5.0 - 0.01 * s, "params/norm/stacked_blocks.0.rms_attn.weight": 1.0 + 0.01 * s}, step=s)
        run.finish()
        logged["run_id"] = run.id
    ''')
    path = wandb_files(tmp_path / "w")[logged["run_id"]][0]
    run_cli(cli, "sync", str(path))
    key = "params/norm/stacked_blocks.0.rms_attn.weight"

    def stored_kinds() -> list[tuple[str, str]]:
        code, out, err = cli("anomalies", "--json")
        assert code == 0, err
        return [(a["metric"], a["kind"]) for a in json.loads(out)]

    assert (key, "hyperball_drift") not in stored_kinds()             # an RMSNorm gain drifts freely (Adam)
    store = Store(tmp_path / "home" / "marinctl.duckdb")
    with store.transaction() as con:                                  # what an older release left
        uid = f"local:{logged['run_id']}"
        run_pk = R.pk_of(con, uid)
        A.insert(con, [Anomaly(run_pk, 20, key, "hyperball_drift", 0.2, "optimizer", {"role": "muonh"})])
        position, memory = state.detection(con, uid)
        state.save_detection(con, uid, position, {**memory, "detectors": detection.DETECTORS - 1})
    assert (key, "hyperball_drift") in stored_kinds()
    run_cli(cli, "sync", str(path))                                   # nothing new in the file
    assert (key, "hyperball_drift") not in stored_kinds()
    with store.connect() as con:
        assert state.detection(con, uid)[1]["detectors"] == detection.DETECTORS
