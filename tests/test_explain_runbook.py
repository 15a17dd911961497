"""Black-box: the incidents Marin's hero runbook watches for, on labelled SYNTHETIC runs
(tests/fakes/runbook.py) served by the loopback W&B server and mirrored with `marinctl sync
ENTITY/PROJECT`; every check reads `marinctl explain step N --run R [--json]` and `marinctl
anomalies --run R [--detail] [--json]`. Healthy SYNTHETIC sweeps (noise levels, every-step and
every-10-steps logging, warm-up ends, data-mixture switches, decay) stay free of high-severity
incidents, and a sweep of loss-spike sizes shows where detection begins (README: the rates).

Nothing here imports marinctl's analysis code. The store is built once for the module.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.blackbox import cli_in, home_json
from tests.blackbox import explain_in as explain
from tests.fakes import incidents as I
from tests.fakes import runbook as R
from tests.fakes.wandb_server import WandbServer

ROOT = Path(__file__).resolve().parent.parent
CONTRACT = {"run", "step", "start", "end", "metric", "kind", "score", "cause_class"}


@dataclass
class World:
    home: Path
    incidents: dict[str, I.Incident]
    sweep: list
    spikes: list
    cache: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"World({str(self.home)!r}, {len(self.incidents)} incidents, {len(self.sweep)} healthy runs)"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    """Every SYNTHETIC runbook incident, the healthy sweep and the spike-size runs, synced over W&B's GraphQL."""
    incidents = R.build()
    sweep = R.sweep(seeds=1, noises=(0.5, 1.0, 2.0))
    spikes = [R.spike_ladder(f"synthetic-spike-sizes-n{n:g}", noise=n) for n in (0.5, 1.0, 2.0)]
    home = tmp_path_factory.mktemp("runbook-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "GITHUB_", "GH_"))}
    env.update(NETRC=str(home / "netrc-none"), WANDB_CONFIG_DIR=str(home / "wandb-config"), MARINCTL_HOME=str(home),
               PYTHONPATH=str(ROOT))
    runs = [r for inc in incidents.values() for r in inc.runs] + sweep + spikes
    with WandbServer(runs, verbose=False) as server:
        report = home_json(home, "sync", f"{I.ENTITY}/{I.PROJECT}", f"{I.ENTITY}/{R.SWEEP_PROJECT}", "--json",
                           env={**env, "WANDB_BASE_URL": server.url})
    assert {r["run"] for r in report["runs"]} == {r.run_id for r in runs}
    return World(home, incidents, sweep, spikes)


def anomalies(cli, world: World, run: str, *extra: str) -> list[dict]:
    rows = json.loads(cli_in(cli, world, "anomalies", "--run", run, "--json", *extra))
    for r in rows:
        assert set(r) == CONTRACT and r["start"] <= r["step"] <= r["end"], r
    return rows


def brief(findings: list[dict], n: int = 5) -> list[tuple]:
    return [(f["step"], f["kind"], f["cause_class"]) for f in findings[:n]]


def severities(cli, world: World, run: str) -> list[str]:
    """The severity column of `anomalies --run RUN`, as a person reads it."""
    out = cli_in(cli, world, "anomalies", "--run", run)
    if out.startswith("no anomalies"):
        return []
    table = out.split("\n\n", 1)[0].splitlines()     # the table ends at the first blank line; the footer follows
    col = table[0].split().index("severity")
    return [re.split(r"\s{2,}", line.strip())[col] for line in table[2:] if re.match(r"^\d", line)]


# --- 1. Adam-group norm drift ------------------------------------------------------------------------

@pytest.mark.parametrize("name,cause,moved", [
    ("gate-drift", "optimizer", False),
    ("gate-drift-loss", "optimizer", True),
    ("router-weight-drift", "moe_routing", False),
])
def test_adam_group_norm_drift_is_found_and_classed(cli, world, name, cause, moved):
    inc = world.incidents[name]
    lo, hi = inc.causes[0].window
    mid = (lo + hi) // 2 + 1
    doc = explain(cli, world, inc.run_id, mid)
    top = doc["findings"][0] if doc["findings"] else {}
    assert (top.get("kind"), top.get("cause_class")) == ("adam_drift", cause), brief(doc["findings"])
    ev = top["evidence"]
    assert abs(ev["start"] - lo) <= 200 and ev["end"] >= hi - 100 and ev["loss_moved"] is moved, ev
    assert ev["leaves_drifting"] == I.LAYERS and ev["p"] < 1e-3 and ev["rise"] > 0.3, ev
    assert ("attn_gate" if "gate" in name else "router.weight") in top["metric"]
    assert "#8818" in top["explanation"] and "weight decay" in top["explanation"]
    assert ("already costing" in top["explanation"]) is moved
    rows = anomalies(cli, world, inc.run_id)
    assert [(r["kind"], r["cause_class"]) for r in rows] == [("adam_drift", cause)], rows
    text = cli_in(cli, world, "explain", "step", str(mid), "--run", inc.run_id)
    assert "adam drift" in text and "Adam without weight decay" in text


def test_a_drift_with_the_loss_moving_ranks_above_one_with_a_healthy_loss(cli, world):
    calm = explain(cli, world, world.incidents["gate-drift"].run_id, 2250)["findings"][0]
    moved = explain(cli, world, world.incidents["gate-drift-loss"].run_id, 2250)["findings"][0]
    assert moved["confidence"] > calm["confidence"]


# --- 2. a resume compared with its parent ----------------------------------------------------------------

@pytest.mark.parametrize("name,phase,bar", [("resume-mismatch", "after the post-resume warm-up", 0.01),
                                            ("resume-replay", "catch-up", 0.002)])
def test_a_childs_loss_mismatch_with_its_parent_is_found_and_named(cli, world, name, phase, bar):
    inc = world.incidents[name]
    parent, child = inc.runs
    truth = inc.causes[0]
    doc = explain(cli, world, child.run_id, truth.step + 100)
    hit = [f for f in doc["findings"] if f["kind"] == "resume_mismatch"]
    assert hit and doc["findings"][0] is hit[0] or doc["findings"][0]["kind"] == "resume_mismatch", brief(doc["findings"])
    f = hit[0]
    ev = f["evidence"]
    assert (f["metric"], f["cause_class"], f["step"]) == ("train/loss", "infrastructure", truth.step), brief(hit)
    assert (ev["fork_parent"], ev["fork_step"], ev["phase"], ev["threshold"]) == (parent.run_id, R.FORK, phase, bar)
    # the runbook's span decides the bar; the episode runs over the whole overlap (the parent logged to 1,499)
    assert ev["start"] == truth.step and ev["decided_to"] == truth.window[1] and ev["steps_over"], ev
    assert ev["end"] == R.PARENT_END - 1 == ev["overlap_to"] and (f["start"], f["end"]) == (ev["start"], ev["end"]), ev
    if name == "resume-mismatch":
        assert ev["mismatch"] == pytest.approx(0.03, abs=0.005)
    else:
        assert ev["median_abs_diff"] == pytest.approx(0.005, abs=5e-4) and ev["replay"] is True
    assert parent.run_id in f["explanation"]
    text = cli_in(cli, world, "explain", "step", str(truth.step + 100), "--run", child.run_id)
    assert "resume mismatch" in text and f"vs {parent.run_id}" in text
    rows = anomalies(cli, world, child.run_id)
    assert ("resume_mismatch", "infrastructure", truth.step) in {(r["kind"], r["cause_class"], r["start"]) for r in rows}


def test_a_faithful_resume_is_not_a_mismatch(cli, world):
    child = world.incidents["resume-faithful"].run
    rows = anomalies(cli, world, child.run_id)
    assert [(r["kind"], r["step"]) for r in rows] == [("fork", R.FORK + 1)], rows
    assert not [f for f in explain(cli, world, child.run_id, R.FORK + 100)["findings"] if f["kind"] == "resume_mismatch"]


# --- 3. a sustained throughput collapse is one window ------------------------------------------------------

@pytest.mark.parametrize("at", [1550, 1750, 1950])
def test_a_step_inside_a_throughput_collapse_finds_the_whole_window(cli, world, at):
    inc = world.incidents["throughput-collapse"]
    lo, hi = inc.causes[0].window
    doc = explain(cli, world, inc.run_id, at)
    top = doc["findings"][0] if doc["findings"] else {}
    assert (top.get("kind"), top.get("cause_class")) == ("throughput_collapse", "infrastructure"), brief(doc["findings"])
    ev = top["evidence"]
    assert abs(ev["start"] - lo) <= 5 and abs(ev["end"] - hi) <= 5 and ev["ratio"] == pytest.approx(0.75, abs=0.02), ev
    rows = anomalies(cli, world, inc.run_id)
    assert [(r["kind"], r["cause_class"]) for r in rows] == [("throughput_collapse", "infrastructure")], rows
    assert abs(rows[0]["start"] - lo) <= 5 and abs(rows[0]["end"] - hi) <= 5


# --- 4. a sustained loss excursion with a normal gradient is data_batch --------------------------------------

def test_a_sustained_loss_excursion_with_a_normal_grad_norm_is_data_batch_first(cli, world):
    inc = world.incidents["loss-excursion"]
    lo, hi = inc.causes[0].window
    for at in (lo, (lo + hi) // 2):
        doc = explain(cli, world, inc.run_id, at)
        assert doc["findings"][0]["cause_class"] == "data_batch", brief(doc["findings"])
        assert not [f for f in doc["findings"] if f["cause_class"] == "optimizer"], brief(doc["findings"])
    top = explain(cli, world, inc.run_id, lo)["findings"][0]
    assert top["kind"] == "sustained_rise" and top["evidence"]["grad_moved"] is False and top["evidence"]["returned"]
    rows = anomalies(cli, world, inc.run_id)
    assert [(r["cause_class"], r["start"], r["end"]) for r in rows] == [("data_batch", lo, hi)], rows


# --- 5. one incident, one row -----------------------------------------------------------------------------

def test_a_router_collapse_is_one_episode_and_its_steps_stay_available(cli, world):
    inc = world.incidents["router-collapse"]
    lo, hi = inc.causes[0].window
    rows = anomalies(cli, world, inc.run_id)
    assert [(r["cause_class"], r["kind"]) for r in rows] == [("moe_routing", "routing_entropy_drop")], rows
    ep = rows[0]
    assert lo <= ep["start"] <= lo + 10 and ep["end"] <= hi
    detail = anomalies(cli, world, inc.run_id, "--detail")
    assert len(detail) >= 20 and {r["cause_class"] for r in detail} == {"moe_routing"}
    assert min(r["step"] for r in detail) == ep["start"] and max(r["step"] for r in detail) == ep["end"]
    assert ep["score"] == max(r["score"] for r in detail if r["kind"] == ep["kind"])
    text = cli_in(cli, world, "anomalies", "--run", inc.run_id)
    assert f"1 incident from {len(detail)} detections" in text and "--detail" in text


# --- 6. a run's schedule is its own --------------------------------------------------------------------------

def test_a_run_named_like_a_rung_that_is_no_rung_gets_its_own_schedule(cli, world):
    run = world.incidents["rung-named"].run
    ctx = explain(cli, world, run.run_id, 600)["context"]
    assert (ctx["lr"]["total_steps"], ctx["lr"]["warmup_end_step"], ctx["lr"]["schedule_from"]) == (3000, 150, "config")
    assert ctx["data_phase"] is None and ctx["data"]["phases_from"] == "unknown", ctx["data"]


# --- healthy controls: no high-severity finding; where spike detection begins ------------------------------------

def test_healthy_sweep_has_no_incident_at_all(cli, world):
    """What the README states of the healthy sweep (bench/bench_fp_sweep.py runs the larger one): 0 of N
    healthy runs with a high-severity incident — indeed with any incident — read from the table a person
    reads, by a parser that finds `high` on a run known to be high."""
    assert len(world.sweep) == 12
    found = {r.run_id: severities(cli, world, r.run_id) for r in world.sweep}
    assert not [(run, s) for run, s in found.items() if "high" in s], found
    assert [run for run, s in found.items() if s] == [], found
    # the parser on runs whose incidents are known: a resume mismatch is high, a router collapse medium
    assert severities(cli, world, world.incidents["resume-mismatch"].runs[-1].run_id) == ["low", "high"]
    assert severities(cli, world, world.incidents["router-collapse"].run_id) == ["medium"]


def test_a_sweep_of_spike_sizes_shows_where_detection_begins(cli, world):
    begins = {}
    for run in world.spikes:
        rows = [r for r in anomalies(cli, world, run.run_id) if r["metric"] == "train/loss"]
        hit = [(r["start"] - R.SPIKE_FIRST) // R.SPIKE_EVERY for r in rows if (r["start"] - R.SPIKE_FIRST) % R.SPIKE_EVERY == 0]
        sizes = [R.SPIKES[k] for k in sorted(set(hit))]
        assert len(rows) == len(sizes), rows       # nothing but the spikes
        assert sizes == list(R.SPIKES[R.SPIKES.index(sizes[0]):]), sizes   # once found, every larger one too
        assert {r["cause_class"] for r in rows} == {"data_batch"}
        begins[run.run_id] = sizes[0]
    assert begins["synthetic-spike-sizes-n1"] in (1.1, 1.15, 1.2), begins
    assert begins["synthetic-spike-sizes-n2"] >= begins["synthetic-spike-sizes-n1"], begins


# --- windows across syncs: one finding, however many passes see it ------------------------------------------------

def _sync_in_stages(tmp_path, run, stages: list[int]) -> tuple[Path, dict]:
    """Serve `run` as it grows — cut at each of `stages` in turn, then whole — syncing after each:
    every sync after the first is an incremental detection pass."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "GITHUB_", "GH_"))}
    env.update(NETRC=str(tmp_path / "netrc-none"), WANDB_CONFIG_DIR=str(tmp_path / "wandb-config"), PYTHONPATH=str(ROOT))
    whole = dict(run.series)
    run.state = "running"
    with WandbServer([run], verbose=False) as server:
        for cut in [*stages, None]:
            run.series = dict(whole)
            if cut is not None:
                run.truncate(cut)
            else:
                run.state = "finished"
                run._touch()
            home_json(home, "sync", f"{I.ENTITY}/{I.PROJECT}", "--json", env={**env, "WANDB_BASE_URL": server.url})
    return home, env


def test_a_long_collapse_synced_in_passes_is_one_window_found_from_deep_inside(tmp_path, cli):
    run = I.base_run("synthetic-long-collapse", "long-collapse", steps=6000)
    R.slow_window(run, 1500, 5000, 0.75)
    home, _ = _sync_in_stages(tmp_path, run, [2600, 3900])
    code, out, err = cli("--home", str(home), "anomalies", "--run", run.run_id, "--json")
    rows = json.loads(out)
    assert [(r["kind"], r["start"]) for r in rows] == [("throughput_collapse", 1500)], rows
    assert 4990 <= rows[0]["end"] <= 5005, rows
    code, out, err = cli("--home", str(home), "explain", "step", "4200", "--run", run.run_id, "--json")
    top = json.loads(out)["findings"][0]
    assert (top["kind"], top["step"], top["evidence"]["ongoing"]) == ("throughput_collapse", 1500, False), top
    # 3,500 steps at (19.8 s + 0.4 s) / 0.75 each: the window's wall clock from its start, across the passes
    assert top["evidence"]["duration_s"] == pytest.approx(3499 * (19.8 + 0.4) / 0.75, rel=0.02), top["evidence"]


def test_a_drift_synced_in_passes_is_one_finding(tmp_path, cli):
    inc = R.gate_drift("synthetic-gate-drift-passes")
    home, _ = _sync_in_stages(tmp_path, inc.run, [2100, 2600])
    code, out, err = cli("--home", str(home), "anomalies", "--run", inc.run_id, "--json", "--detail")
    rows = json.loads(out)
    assert [(r["kind"], r["cause_class"]) for r in rows] == [("adam_drift", "optimizer")], rows
    assert abs(rows[0]["start"] - 1500) <= 200 and rows[0]["end"] >= 2900, rows


@pytest.mark.parametrize("name,at", [("gate-drift", 2250), ("throughput-collapse", 1750), ("loss-excursion", 1505),
                                     ("router-collapse", 1540), ("resume-mismatch", 1350)])
def test_explain_reads_what_sync_detected_as_the_detectors_would_find_it(cli, world, tmp_path, name, at):
    """explain reads sync's stored findings where detection has settled (the hero-scale latency);
    with the detection state gone it re-runs the detectors around N: the same findings either way."""
    import shutil

    from marinctl.store import Store, state

    run = world.incidents[name].run_id
    settled = explain(cli, world, run, at)
    home = tmp_path / "home-copy"
    shutil.copytree(world.home, home)
    store = Store(home / "marinctl.duckdb")
    with store.transaction() as con:
        uid = con.execute("SELECT uid FROM runs WHERE run_id = ?", [run]).fetchall()[0][0]
        state.forget_detection(con, uid)
    code, out, err = cli("--home", str(home), "explain", "step", str(at), "--run", run, "--json")
    assert code == 0, err
    again = json.loads(out)
    assert settled["findings"], name
    assert [(f["step"], f["kind"], f["cause_class"], f["confidence"]) for f in again["findings"]] == \
        [(f["step"], f["kind"], f["cause_class"], f["confidence"]) for f in settled["findings"]]
    assert again["summary"] == settled["summary"]
