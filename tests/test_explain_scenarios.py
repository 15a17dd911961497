"""Labelled SYNTHETIC scenarios for detection and `explain step N` (never real data).

Each scenario starts from the synthetic Marin-shaped generator (tests/fakes/synth.py), injects
one known event, loads it into a real DuckDB store, and checks what marinctl concludes.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fakes import synth
from tests.fakes.load import load_into_store

from marinctl.analysis.explain import attribution, roles

from marinctl.analysis.detect import detectors
from marinctl.sync import derive
from marinctl.analysis.explain.explain import explain
from marinctl.store.lineage import resolve_target


def _retotal(run: synth.SynthRun) -> None:
    """Keep params/norm/total the exact root-sum-of-squares of the leaves after an injection."""
    leaves = [k for k in run.series if k.startswith("params/norm/") and k != "params/norm/total"]
    steps = run.series[leaves[0]][0]
    run.set_values("params/norm/total", steps, np.sqrt(sum(run.series[k][1] ** 2 for k in leaves)))


def _base(run_id: str = "synthetic-scenario", steps: int = 2000) -> synth.SynthRun:
    return synth.marin_run(run_id, steps=steps, layers=4, experts=8)


def _qb_jump(run: synth.SynthRun, at: int = 500, to: float = 30.0) -> None:
    for i in range(run.spec.layers):
        key = f"params/norm/stacked_blocks.{i}.mlp.router_bias"
        s, v = run.series[key]
        v = v.copy()
        v[s >= at] = to * (1.0 + 0.001 * np.arange((s >= at).sum()))
        run.set_values(key, s, v)
    _retotal(run)


def _load(store, *runs):
    pks = load_into_store(store, runs)
    with store.transaction() as con:
        for pk in pks.values():
            derive.detect(con, pk, full=True)
    return pks


def _explain(store, step, run=None, metric=None):
    with store.connect() as con:
        return explain(con, resolve_target(con, run), step, metric)


def test_qb_router_bias_jump_is_expected_balancing(store):
    run = _base()
    _qb_jump(run, 500)
    _load(store, run)
    doc = _explain(store, 500)
    top = doc["findings"][0]
    assert top["metric"] == "params/norm/total" and top["kind"] == "param_norm_jump" and top["step"] == 500
    assert top["cause_class"] == "heuristic_parameter"
    assert "expected balancing dynamics, not instability" in top["explanation"]
    bias_share = sum(r["share"] for r in top["evidence"]["by_module"] if r["module"] == "router_bias")
    assert bias_share >= 0.9
    # exact: the leaves' Δ‖θᵢ‖² sum to the logged total's Δ‖θ‖²
    assert top["evidence"]["delta_sq"] == pytest.approx(top["evidence"]["logged_delta_sq"], rel=1e-9)
    assert top["attribution"] and all("router_bias" in a["name"] for a in top["attribution"][:4])
    assert top["confidence"] >= 0.9
    assert not [f for f in doc["findings"] if f["metric"] == "train/loss"]


def test_grad_spike_one_step_before_loss_spike_is_optimizer(store):
    run = _base()
    s, v = run.series["grad/norm/total"]
    run.set_values("grad/norm/total", [700], [v[700] * 20])
    s, v = run.series["train/loss"]
    run.set_values("train/loss", [701], [v[701] * 1.8])
    _load(store, run)
    doc = _explain(store, 701)
    top = doc["findings"][0]
    assert (top["metric"], top["kind"], top["step"], top["cause_class"]) == ("train/loss", "co_spike", 701, "optimizer")
    assert top["evidence"]["grad_step"] == 700 and top["evidence"]["precursor_steps"] == 1
    assert top["evidence"]["z"] > 8


def test_loss_spike_without_precursor_is_data_batch(store):
    run = _base()
    s, v = run.series["train/loss"]
    run.set_values("train/loss", [900], [v[900] * 1.8])
    _load(store, run)
    doc = _explain(store, 900)
    top = doc["findings"][0]
    assert (top["kind"], top["step"], top["cause_class"]) == ("spike", 900, "data_batch")
    assert top["evidence"]["value"] == pytest.approx(v[900] * 1.8)


def test_fork_is_infrastructure(store):
    runs = synth.hero_lineage(300)           # forks at 600 and 900
    _load(store, *runs)
    doc = _explain(store, 601)
    forks = [f for f in doc["findings"] if f["kind"] == "fork"]
    assert forks and forks[0]["cause_class"] == "infrastructure" and forks[0]["step"] == 601
    assert doc["findings"][0]["cause_class"] == "infrastructure"
    # the fork's 6-hour wall gap is the fork, not a separate resume
    assert not [f for f in doc["findings"] if f["kind"] == "resume" and f["step"] == 601]


def test_rewind_is_detected_incrementally_and_is_infrastructure(store):
    run = _base(steps=1500)
    pks = load_into_store(store, [run])
    pk = pks[run.run_id]
    with store.transaction() as con:
        assert derive.detect(con, pk) == 0
        assert derive.detect(con, pk) == 0       # idempotent
    # W&B rewind: steps >= 1200 re-logged hours later with different noise
    run.truncate(1200)
    run.extend(1499, seed=7)
    ts_s, ts_v = run.series["_timestamp"]
    run.set_values("_timestamp", ts_s[ts_s >= 1200], ts_v[ts_s >= 1200] + 3 * 3600)
    with store.transaction() as con:
        con.execute("DELETE FROM metrics WHERE run_pk = ? AND step >= 1200", [pk])
    load_into_store(store, [run])
    with store.transaction() as con:
        assert derive.detect(con, pk) >= 1
        rows = con.execute("SELECT step, kind, cause_class FROM anomalies WHERE run_pk = ? AND kind = 'rewind'", [pk]).fetchall()
    assert rows and rows[0][2] == "infrastructure" and 1000 < rows[0][0] <= 1200
    doc = _explain(store, rows[0][0])
    assert any(f["kind"] == "rewind" and f["cause_class"] == "infrastructure" for f in doc["findings"])


def test_step_gap_and_resume(store):
    run = _base(steps=1500)
    for key in list(run.series):
        s, v = run.series[key]
        keep = (s < 1000) | (s >= 1050)
        run.series[key] = (s[keep], v[keep])
    ts_s, ts_v = run.series["_timestamp"]
    ts_v = ts_v.copy()
    ts_v[ts_s >= 1300] += 7200
    run.series["_timestamp"] = (ts_s, ts_v)
    run._touch()
    _load(store, run)
    with store.connect() as con:
        rows = {(s, k) for s, k in con.execute("SELECT step, kind FROM anomalies").fetchall()}
    assert (1050, "step_gap") in rows and (1300, "resume") in rows


def test_muonh_matrix_drift_is_flagged(store):
    run = _base()
    key = "params/norm/stacked_blocks.2.attn.w_q"
    s, v = run.series[key]
    v = v.copy()
    m = s >= 1200
    v[m] *= 1 + 0.03 * (s[m] - 1200) / 100
    run.set_values(key, s, v)
    _retotal(run)
    _load(store, run)
    with store.connect() as con:
        rows = con.execute("SELECT step, metric, cause_class, details FROM anomalies WHERE kind = 'hyperball_drift'").fetchall()
    assert len(rows) == 1
    step, metric, cause, details = rows[0]
    assert metric == key and 1230 <= step <= 1250 and json.loads(details)["role"] == "muonh"
    # an Adam-group matrix growing as much is not hyperball drift
    assert not [r for r in rows if "router.weight" in r[1] or "token_embed" in r[1]]


def test_healthy_stretch_has_no_findings(store):
    run = _base()
    _load(store, run)
    with store.connect() as con:
        assert con.execute("SELECT count(*) FROM anomalies").fetchall()[0][0] == 0
    doc = _explain(store, 1500)
    assert doc["findings"] == []
    assert doc["context"]["lr_phase"] == "decay" and doc["context"]["data_phase"] == "main"


def test_throughput_collapse(store):
    run = _base()
    s, v = run.series["throughput/tokens_per_second"]
    v = v.copy()
    v[s >= 1500] *= 0.6
    run.set_values("throughput/tokens_per_second", s, v)
    _load(store, run)
    with store.connect() as con:
        rows = con.execute("SELECT step, cause_class FROM anomalies WHERE kind = 'throughput_collapse'").fetchall()
    assert len(rows) == 1 and 1500 <= rows[0][0] <= 1520 and rows[0][1] == "infrastructure"


def test_incremental_matches_full_detection(store):
    """Detecting 2,000 steps in 4 syncs finds exactly what one full pass finds."""
    run = _base()
    _qb_jump(run, 500)
    s, v = run.series["train/loss"]
    run.set_values("train/loss", [900, 1510], [v[900] * 1.8, v[1510] * 1.8])
    pk = None
    for end in (499, 905, 1505, 1999):
        part = synth.SynthRun(**{**run.__dict__, "series": run.window(0, end + 1)})
        pk = load_into_store(store, [part])[run.run_id]
        with store.transaction() as con:
            derive.detect(con, pk)
    with store.connect() as con:
        inc = sorted(con.execute("SELECT step, metric, kind FROM anomalies").fetchall())
    with store.transaction() as con:
        derive.detect(con, pk, full=True)
        full = sorted(con.execute("SELECT step, metric, kind FROM anomalies").fetchall())
    assert inc == full
    assert {(500, "param_norm_jump"), (900, "spike"), (1510, "spike")} <= {(s, k) for s, _, k in full}


def test_sign_rule_bias_jump_is_not_expected():
    recipe = roles.RecipeRoles("muonh", "sign", 0.001, 64, "config")
    before = {"params/norm/blocks.0.mlp.router_bias": 0.1, "params/norm/blocks.0.attn.w_q": 40.0}
    after = {"params/norm/blocks.0.mlp.router_bias": 5.0, "params/norm/blocks.0.attn.w_q": 40.0}
    att = attribution.split(before, after, recipe)
    cause, _, _ = detectors.classify_norm_change(att, recipe, 10)
    assert cause == "moe_routing"             # 4.9 ≫ γ·√E·10 = 0.08
    qb = roles.RecipeRoles("muonh", "qb", None, 64, "config")
    assert detectors.classify_norm_change(attribution.split(before, after, qb), qb, 10)[0] == "heuristic_parameter"


def test_routing_entropy_drop_rolls_up_to_the_layer(store):
    run = _base()
    key = "train/router/layer_2/routing_entropy"
    s, v = run.series[key]
    v = v.copy()
    v[(s >= 1500) & (s < 1503)] -= 0.5
    run.set_values(key, s, v)
    layers = [run.series[f"train/router/layer_{i}/routing_entropy"][1] for i in range(run.spec.layers)]
    run.set_values("train/router/routing_entropy_mean", s, np.mean(layers, axis=0))
    _load(store, run)
    doc = _explain(store, 1500)
    top = doc["findings"][0]
    assert (top["kind"], top["step"], top["cause_class"]) == ("routing_entropy_drop", 1500, "moe_routing")
    assert top["attribution"][0]["name"] == "train/router/layer_2/routing_entropy"
    assert top["attribution"][0]["share"] > 0.8


def test_nan_loss_is_numerics(store):
    run = _base()
    run.set_values("train/loss", [1200, 1201], [float("nan"), float("inf")])
    _load(store, run)
    doc = _explain(store, 1200)
    top = doc["findings"][0]
    assert (top["metric"], top["kind"], top["step"], top["cause_class"]) == ("train/loss", "nonfinite", 1200, "numerics")
    assert top["evidence"]["count"] == 2


def test_empty_run_detects_nothing(store):
    run = synth.marin_run("synthetic-empty", steps=0)
    pk = load_into_store(store, [run])["synthetic-empty"]
    with store.transaction() as con:
        assert derive.detect(con, pk) == 0
        assert derive.detect(con, pk, full=True) == 0
