"""In-process (SYNTHETIC data): level shifts vs spikes, schedule quiet with its context,
overflow markers, logit growth across incremental passes, the trend test on its own, and the
coinciding-causes summary as a person reads it.

Faster companions of tests/test_explain_incidents.py (which mirrors through W&B's shapes): each
run goes straight into a real DuckDB store (tests/fakes/load.py) and detection runs through the
sync pipeline's own `derive.detect`.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.fakes import incidents as I
from tests.fakes import synth
from tests.fakes.load import load_into_store

from marinctl.analysis.detect import trends
from marinctl.analysis.explain.explain import explain
from marinctl.store.lineage import resolve_target
from marinctl.sync import derive


def _detect(store, pk, *, full=True):
    with store.transaction() as con:
        derive.detect(con, pk, full=full)


def _rows(store, pk):
    with store.connect() as con:
        return con.execute("SELECT step, metric, kind, cause_class FROM anomalies WHERE run_pk = ? ORDER BY step, metric",
                           [pk]).fetchall()


def _explain(store, run, step):
    with store.connect() as con:
        return explain(con, resolve_target(con, run), step)


def _shifted(run_id: str, *, at: int, switches: list | None = None) -> synth.SynthRun:
    """Loss ×1.15 and grad norm ×1.4 from `at` on, staying there (a new level, not a spike)."""
    run = I.base_run(run_id, "level-shift", steps=2000)
    s, loss = run.series[I.LOSS]
    I.set_loss(run, s, np.where(s >= at, loss * 1.15, loss))
    gs, gv = run.series[I.GRAD]
    run.set_values(I.GRAD, gs, np.where(gs >= at, gv * 1.4, gv))
    if switches is not None:
        run.config = {**run.config, "data": {"train_weights": switches}}
    return run


def test_level_shift_is_not_a_spike_and_claims_no_cause(store):
    run = _shifted("synthetic-level-shift", at=1200)
    pk = load_into_store(store, [run])[run.run_id]
    _detect(store, pk)
    rows = _rows(store, pk)
    assert [(s, k, c) for s, _, k, c in rows] == [(1200, "level_shift", "none")], rows
    doc = _explain(store, run.run_id, 1200)
    assert [f["kind"] for f in doc["findings"]] == ["level_shift"]
    assert doc["findings"][0]["confidence"] < 0.5 and "not a spike" in doc["findings"][0]["explanation"]


def test_level_shift_at_a_scheduled_data_switch_is_context_only(store):
    run = _shifted("synthetic-scheduled-shift", at=1200, switches=[[0, {"web": 1.0}], [1200, {"web": 0.5, "math": 0.5}]])
    pk = load_into_store(store, [run])[run.run_id]
    _detect(store, pk)
    assert _rows(store, pk) == []
    doc = _explain(store, run.run_id, 1210)
    assert doc["findings"] == [] and doc["summary"] is None
    sched = [p for p in doc["context"]["schedule"] if p["step"] == 1200]
    assert sched and "data phase 2" in sched[0]["what"]
    assert sched[0]["level_ratio"]["loss"] == pytest.approx(1.15, rel=0.02)
    assert sched[0]["level_ratio"]["grad_norm"] == pytest.approx(1.4, rel=0.1)


def test_collapsing_loss_scale_is_numerics(store):
    run = I.base_run("synthetic-loss-scale", "overflow", steps=1500)
    s = np.arange(0, 1500)
    scale = np.where(s < 900, 65536.0, 65536.0 / 2.0 ** np.minimum(s - 899, 6))
    run.set_values("optim/loss_scale", s, scale)
    pk = load_into_store(store, [run])[run.run_id]
    _detect(store, pk)
    over = [r for r in _rows(store, pk) if r[2] == "overflow"]
    assert over == [(903, "optim/loss_scale", "overflow", "numerics")]     # 65536 / 16 at 903: below 1/8 of its peak
    top = _explain(store, run.run_id, 903)["findings"][0]
    assert (top["kind"], top["cause_class"]) == ("overflow", "numerics") and "loss scale" in top["explanation"]


def test_logit_growth_found_in_passes_matches_one_full_pass(store):
    """An lm_head drift stored by an early pass, before the trend was clear, is replaced by the
    logit-growth episode a later pass finds: synced in four pieces = detected in one go."""
    run = I.base_run("synthetic-logit-passes", "logit-growth", steps=1901)
    I.logit_growth(run, 1500, 1900)
    pk = None
    for end in (1520, 1640, 1760, 1900):
        part = synth.SynthRun(**{**run.__dict__, "series": run.window(0, end + 1)})
        pk = load_into_store(store, [part])[run.run_id]
        _detect(store, pk, full=False)
    incremental = _rows(store, pk)
    _detect(store, pk)
    full = _rows(store, pk)
    assert incremental == full
    assert [(k, c) for _, _, k, c in full] == [("logit_growth", "logit_growth")], full


def test_trend_test_finds_the_onset_and_leaves_a_falling_loss_alone():
    steps = np.arange(0, 2000)
    rng = np.random.default_rng(0)
    base = 1.1 + 70 / np.sqrt(steps + 50.0)
    healthy = base * (1 + 0.01 * rng.standard_normal(len(steps)))
    head = np.full(len(steps // 10), 177.0)
    w = steps[::10]
    owner = lambda s: 1  # noqa: E731
    quiet = trends.logit_growth(trends.signal("loss", "train/loss", (steps, healthy)),
                                [trends.signal("lm_head", "params/norm/lm_head", (w, np.full(len(w), 177.0)))],
                                start_after=200, last_step=1999, owner=owner, metric="train/loss")
    assert quiet == [] and len(head)
    rising = np.where(steps < 1400, healthy, healthy[1400] * (1 + 0.15 * (steps - 1400) / 500))
    grow = np.where(w < 1400, 177.0, 177.0 * (1 + 0.3 * (w - 1400) / 500))
    found = trends.logit_growth(trends.signal("loss", "train/loss", (steps, rising)),
                                [trends.signal("lm_head", "params/norm/lm_head", (w, grow))],
                                start_after=200, last_step=1999, owner=owner, metric="train/loss")
    assert len(found) == 1
    d = found[0].details
    assert 1350 <= d["start"] <= 1450 and d["end"] == 1999 and d["loss_p"] < trends.P_MAX
    assert [s["signal"] for s in d["signals"]] == ["lm_head"] and d["lm_head_rise"] > 0.2


def test_text_names_both_causes_at_the_step(store, cli, monkeypatch):
    inc = I.coincident()
    load_into_store(store, inc.runs)
    with store.connect() as con:
        pk = con.execute("SELECT run_pk FROM runs").fetchall()[0][0]
    _detect(store, pk)
    monkeypatch.setenv("MARINCTL_HOME", str(store.path.parent))
    store.path.rename(store.path.parent / "marinctl.duckdb")
    code, out, err = cli("explain", "step", "1500", "--run", inc.run_id)
    assert code == 0, err
    head = out.split("\n1. ")[0]
    assert "Two things happened at step 1,500" in head and "[optimizer]" in head and "[heuristic_parameter]" in head
    assert "event at logged steps 1,500, 1,501, 1,502, 1,503" in out
