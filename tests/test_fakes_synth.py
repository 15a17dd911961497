"""Invariants of the SYNTHETIC Marin-run generator and the store loader (tests/fakes)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes.load import load_into_store
from tests.fakes.synth import HERO_IDS, hero_lineage, ladder_runs, marin_run, norm_leaves


def test_params_norm_total_is_exact_sum_of_squares_of_leaves():
    run = marin_run("synthetic-norms", steps=300, layers=3)
    tot_steps, tot = run.series["params/norm/total"]
    leaves = [k for k in run.series if k.startswith("params/norm/") and k != "params/norm/total"]
    assert len(leaves) == len(norm_leaves(3)) == 3 * 11 + 2
    assert np.array_equal(tot_steps, np.arange(0, 300, 10))
    sq = np.zeros(len(tot_steps))
    for k in leaves:
        s, v = run.series[k]
        assert np.array_equal(s, tot_steps)
        sq += v * v
    np.testing.assert_allclose(tot, np.sqrt(sq), rtol=1e-13, atol=0)
    # grad/norm/total is logged every step and, at watch steps, equals its leaves' norm too
    gs, gv = run.series["grad/norm/total"]
    assert len(gs) == 300
    gsq = sum(run.series["grad/norm/" + p][1] ** 2 for p, _ in norm_leaves(3))
    np.testing.assert_allclose(gv[tot_steps], np.sqrt(gsq), rtol=1e-13)


def test_marin_key_names_and_cadences():
    run = marin_run("synthetic-keys", steps=250, layers=2, extra_scalar_keys=3, eval_every=100)
    keys = set(run.series)
    for k in ("train/loss", "train/cross_entropy_loss", "optim/learning_rate", "optim/adam_lr",
              "grad/norm/total", "throughput/tokens_per_second", "throughput/mfu", "throughput/duration",
              "throughput/total_tokens", "moe/drop_fraction", "train/router/routing_entropy_mean",
              "train/router/router_z_loss", "train/router/load_balancing_loss",
              "train/router/layer_0/routing_entropy", "train/router/layer_1/routing_entropy",
              "global_step", "run_progress", "params/norm/total", "eval/paloma/macro_loss",
              "eval/paloma/c4_en/bpb", "params/norm/stacked_blocks.1.mlp.router_bias",
              "grad/norm/stacked_blocks.0.attn.w_q", "params/norm/token_embed", "params/norm/lm_head",
              "train/aux/synthetic_002", "_timestamp", "_runtime"):
        assert k in keys, k
    assert list(run.series["eval/paloma/macro_loss"][0]) == [0, 100, 200]
    assert len(run.series["train/loss"][0]) == 250
    ent = np.mean([run.series[f"train/router/layer_{i}/routing_entropy"][1] for i in range(2)], axis=0)
    np.testing.assert_allclose(run.series["train/router/routing_entropy_mean"][1], ent)
    # linear schedule: 1% warm-up to the peak, then linear decay towards 5% of it
    lr = run.series["optim/learning_rate"][1]
    assert list(lr[:3]) == pytest.approx([0.0158 / 2, 0.0158, 0.0158], rel=1e-12)   # round(1% of 250) = 2 warm-up steps
    assert lr[-1] == pytest.approx(0.0158 * (1 - 0.95 * 247 / 248), rel=1e-12)
    # MuonH matrices stay on the hyperball; the router bias wobbles
    wq = run.series["params/norm/stacked_blocks.0.attn.w_q"][1]
    rb = run.series["params/norm/stacked_blocks.0.mlp.router_bias"][1]
    assert np.ptp(wq) / wq.mean() < 1e-4 < np.ptp(rb) / rb.mean()
    assert run.synthetic and "synthetic" in run.tags and "synthetic" in run.display_name
    assert run.config["synthetic"] is True
    assert run.summary["train/loss"] == run.series["train/loss"][1][-1] and run.summary["_step"] == 249


def test_generation_is_deterministic_and_seeded():
    a = marin_run("synthetic-a", steps=120, seed=3)
    b = marin_run("synthetic-a", steps=120, seed=3)
    c = marin_run("synthetic-a", steps=120, seed=4)
    assert a.long_rows() == b.long_rows()
    assert not np.array_equal(a.series["train/loss"][1], c.series["train/loss"][1])
    # adding filler keys leaves every other key unchanged
    d = marin_run("synthetic-a", steps=120, seed=3, extra_scalar_keys=5)
    assert np.array_equal(a.series["train/loss"][1], d.series["train/loss"][1])


def test_hero_lineage_forks():
    root, mid, leaf = hero_lineage(100)
    assert [r.run_id for r in (root, mid, leaf)] == list(HERO_IDS)
    assert (mid.fork_parent, mid.fork_step, leaf.fork_parent, leaf.fork_step) == (root.run_id, 200, mid.run_id, 300)
    assert mid.config["trainer"]["tracker"]["fork_from"] == f"{root.run_id}?_step=200"
    assert root.steps()[-1] > 200 and mid.steps()[-1] > 300      # parents log past the fork point
    assert mid.steps()[0] == 201 and leaf.steps()[0] == 301 and leaf.last_step == 399
    for child in (mid, leaf):
        for key, (steps, _) in child.series.items():
            assert steps.min() > child.fork_step, key
    assert leaf.state == "running" and {r.group for r in (root, mid, leaf)} == {"moe-hero-ep"}
    assert leaf.created_at > mid.created_at > root.created_at


def test_ladder_rungs_eval_every_five_percent():
    rungs = ladder_runs(400)
    assert [r.run_id for r in rungs] == ["ladder-d768", "ladder-d1024", "ladder-d1536", "ladder-d2048"]
    assert all(r.group == "moe-hero-ep-scaling-ladder" for r in rungs)
    assert list(rungs[0].series["eval/paloma/macro_loss"][0]) == list(range(0, 400, 20))
    finals = [r.summary["eval/paloma/macro_loss"] for r in rungs]
    assert finals == sorted(finals, reverse=True)  # wider rungs end lower


def test_rows_and_scenario_injection():
    run = marin_run("synthetic-rows", steps=50, layers=1, eval_every=20)
    rows = run.rows(10, 21)
    assert [r["_step"] for r in rows] == list(range(10, 21))
    assert "params/norm/total" in rows[0] and "params/norm/total" not in rows[1]
    assert "eval/paloma/macro_loss" in rows[10] and {"_timestamp", "_runtime"} <= set(rows[3])
    v0 = run.version
    run.set_values("train/loss", [12, 13], [float("nan"), 99.0])
    assert run.version > v0 and run.rows(12, 14)[1]["train/loss"] == 99.0
    run.set_values("train/spike_synthetic", [70], 5.0)             # a new step beyond the end
    assert run.last_step == 70 and run.rows(70, 71)[0]["_timestamp"] > run.rows(49, 50)[0]["_timestamp"]
    run.truncate(30)
    assert run.last_step == 29
    old = run.series["train/loss"][1].copy()
    run.rewrite_from(20, seed=7)
    assert run.last_step == 29 and np.array_equal(run.series["train/loss"][1][:20], old[:20], equal_nan=True)
    assert not np.array_equal(run.series["train/loss"][1][20:], old[20:])
    run.extend(59)
    assert run.last_step == 59 and len(run.series["train/loss"][0]) == 60


def test_load_into_store_matches_ground_truth(store):
    from marinctl.store import metrics as m
    from marinctl.store.lineage import resolve_target

    runs = hero_lineage(60)
    pks = load_into_store(store, runs, window=50)
    with store.connect() as con:
        n = con.execute("SELECT count(*) FROM metrics").fetchone()[0]
        assert n == sum(len(r.long_rows()) for r in runs)
        got = con.execute(
            "SELECT m.step, k.key, m.value FROM metrics m JOIN metric_keys k USING (key_id)"
            " WHERE run_pk = ? ORDER BY 1, 2", [pks[runs[1].run_id]]).fetchall()
        assert got == runs[1].long_rows()
        last = con.execute("SELECT run_id, last_step, fork_step, state FROM runs ORDER BY run_pk").fetchall()
        assert last == [(r.run_id, r.last_step, r.fork_step, r.state) for r in runs]
        target = resolve_target(con, runs[2].run_id, stitched=True)
        steps, values = m.series(con, target.segments, "train/loss")
    # the stitched lineage covers 0..last with each step from the newest run holding it
    assert list(steps) == list(range(0, 240))
    assert values[130] == runs[1].series["train/loss"][1][130 - 121]

