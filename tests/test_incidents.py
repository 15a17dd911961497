"""Incidents (analysis/detect/incidents.py): one episode per incident, the interface alerts key on.

Unit tests on hand-made SYNTHETIC detections; the CLI tests on synced SYNTHETIC runs are in
tests/test_explain_runbook.py.
"""

from __future__ import annotations

from marinctl.analysis.detect.incidents import Incident, incidents, severity
from marinctl.domain import Anomaly


def _a(step, kind="routing_entropy_drop", cause="moe_routing", score=9.0, run=1, metric="train/router/routing_entropy_mean",
       **details):
    return Anomaly(run, step, metric, kind, score, cause, {"interval": 1, **details})


def test_a_router_collapse_scored_at_150_rows_is_one_incident_peaking_at_its_highest_score():
    rows = [_a(s, score=9.0 + (s == 1570) * 20) for s in range(1500, 1650)]
    (i,) = incidents(rows)
    assert (i.start, i.step, i.end, i.cause_class, i.kind) == (1500, 1570, 1649, "moe_routing", "routing_entropy_drop")
    assert i.score == 29.0 and i.steps == tuple(range(1500, 1650)) and i.detections == 150
    assert i.severity == "medium"


def test_rows_further_apart_than_three_logged_rows_are_two_incidents():
    assert len(incidents([_a(100), _a(104)])) == 2
    assert len(incidents([_a(100), _a(103)])) == 1
    # every 10 steps: 30 steps apart is within three logged rows
    assert len(incidents([_a(100, interval=10), _a(130, interval=10)])) == 1


def test_a_co_spike_over_three_steps_is_one_optimizer_incident():
    co = _a(1501, "co_spike", "optimizer", 75.0, metric="train/loss", precursor_steps=1, event_steps=[1500, 1501, 1502, 1503],
            start=1500, end=1503)
    grad = _a(1505, "grad_spike", "optimizer", 9.0, metric="grad/norm/total")
    bias = _a(1500, "param_norm_jump", "heuristic_parameter", 30.0, metric="params/norm/total", confidence=0.97)
    found = incidents([grad, bias, co])
    assert [(i.cause_class, i.kind, i.step, i.start, i.end) for i in found] == [
        ("heuristic_parameter", "param_norm_jump", 1500, 1500, 1500), ("optimizer", "co_spike", 1501, 1500, 1505)]
    assert found[1].severity == "high" and found[0].severity == "low" and found[1].steps == (1500, 1501, 1502, 1503, 1505)


def test_window_detections_are_one_incident_per_window_and_apart_from_other_windows():
    slow = _a(1500, "throughput_collapse", "infrastructure", 0.25, metric="throughput/tokens_per_second", start=1500, end=1999)
    gap = _a(1700, "step_gap", "infrastructure", 90.0, metric="_step")
    mismatch = _a(1600, "resume_mismatch", "infrastructure", 0.03, metric="train/loss", start=1600, end=1800)
    found = incidents([slow, gap, mismatch])
    assert [(i.kind, i.start, i.end) for i in found] == [("throughput_collapse", 1500, 1999), ("resume_mismatch", 1600, 1800)]
    assert found[0].detections == 2


def test_runs_and_causes_never_share_an_incident_and_order_is_run_then_start():
    found = incidents([_a(200, run=2), _a(100, run=2), _a(100, run=1), _a(100, "spike", "data_batch", metric="train/loss", run=1)])
    assert [(i.run_pk, i.start, i.cause_class) for i in found] == [
        (1, 100, "data_batch"), (1, 100, "moe_routing"), (2, 100, "moe_routing"), (2, 200, "moe_routing")]
    assert all(isinstance(i, Incident) for i in found) and incidents([]) == []


def test_severity_follows_explains_rank():
    assert severity("nonfinite", "numerics") == "high"
    assert severity("co_spike", "optimizer", 0.8) == "high"
    assert severity("spike", "data_batch") == "medium"
    assert severity("throughput_collapse", "infrastructure") == "medium"
    assert severity("param_norm_jump", "heuristic_parameter", 0.97) == "low"
    assert severity("fork", "infrastructure") == "low"
    assert severity("level_shift", "none", 1.0) == "low"


def test_findings_below_an_alert_bar_are_low_and_never_change_the_other_incidents():
    """A throughput dip and a resume offset are incidents of their own: every other incident — what
    alerts fire on — is the one it would be without them."""
    gap = _a(1700, "step_gap", "infrastructure", 90.0, metric="_step")
    restart = _a(1702, "resume", "infrastructure", 12.0, metric="_timestamp")
    dip = _a(1650, "throughput_dip", "infrastructure", 0.25, metric="throughput/tokens_per_second", start=1650, end=1710,
             confidence=0.8)
    offset = _a(1251, "resume_offset", "infrastructure", 0.007, metric="train/loss", start=1251, end=1499, confidence=0.8)
    without = incidents([gap, restart])
    found = incidents([offset, gap, dip, restart])
    assert [i for i in found if i.kind not in ("throughput_dip", "resume_offset")] == without
    assert [(i.kind, i.start, i.end, i.severity) for i in found if i.kind in ("throughput_dip", "resume_offset")] == [
        ("resume_offset", 1251, 1499, "low"), ("throughput_dip", 1650, 1710, "low")]
    assert severity("throughput_dip", "infrastructure", 0.8) == "low" == severity("resume_offset", "infrastructure", 0.8)
    assert severity("throughput_collapse", "infrastructure") == "medium" and severity("resume_mismatch", "infrastructure") == "high"
