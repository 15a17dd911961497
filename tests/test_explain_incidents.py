"""Black-box: labelled SYNTHETIC incidents (tests/fakes/incidents.py) reach marinctl the way
a user's runs do — served by the loopback W&B server and mirrored with `marinctl sync ENTITY/PROJECT`,
or written as offline `.wandb` files by the real wandb SDK and mirrored with `marinctl sync DIR` —
and every check reads `marinctl explain step N --run R --json` and `marinctl anomalies --run R --json`.

Nothing here imports marinctl's analysis code, so these tests hold through any restructuring.
The store is built once for the module. A test marked xfail(strict=True) describes what the
code does today (observed through the same commands); when a fix makes it pass, drop the mark.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.blackbox import home_json
from tests.fakes import incidents as I
from tests.fakes.wandb_server import WandbServer

ROOT = Path(__file__).resolve().parent.parent
CAUSES = {"optimizer", "adam_state", "data_batch", "numerics", "logit_growth", "init_shape", "moe_routing",
          "heuristic_parameter", "infrastructure", "config", "none"}
FINDING_KEYS = {"metric", "kind", "step", "cause_class", "confidence", "attribution", "explanation", "evidence"}


@dataclass
class World:
    home: Path
    incidents: dict[str, I.Incident]
    cache: dict = field(default_factory=dict)

    def __repr__(self) -> str:  # failure reports print the fixture: keep it to one line
        return f"World({str(self.home)!r}, {len(self.incidents)} incidents)"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    """Every incident mirrored into one store: served ones over W&B's GraphQL, offline ones from `.wandb` files."""
    incidents = I.build()
    home = tmp_path_factory.mktemp("incidents-home")
    offline = tmp_path_factory.mktemp("incidents-offline")
    writer = I.write_offline(offline, [n for n, (_, how) in I.REGISTRY.items() if how == "offline"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "GITHUB_", "GH_"))}
    env.update(NETRC=str(offline / "netrc-none"), WANDB_CONFIG_DIR=str(offline / "wandb-config"), MARINCTL_HOME=str(home),
               PYTHONPATH=str(ROOT))
    served = [r for n, inc in incidents.items() if I.REGISTRY[n][1] == "server" for r in inc.runs]
    try:
        with WandbServer(served, verbose=False) as server:
            report = home_json(home, "sync", f"{I.ENTITY}/{I.PROJECT}", "--json", env={**env, "WANDB_BASE_URL": server.url})
        assert {r["run"] for r in report["runs"]} == {r.run_id for r in served}
        _, err = writer.communicate(timeout=300)
        assert writer.returncode == 0, err.decode()[-2000:]
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    report = home_json(home, "sync", str(offline / "wandb"), "--json", env=env)
    assert len(report["runs"]) == sum(len(incidents[n].runs) for n, (_, how) in I.REGISTRY.items() if how == "offline")
    return World(home, incidents)


# --- reading marinctl's answers -------------------------------------------------------------------

def explain(cli, world: World, name: str, step: int) -> dict:
    run = world.incidents[name].run_id
    if (run, step) not in world.cache:
        code, out, err = cli("--home", str(world.home), "explain", "step", str(step), "--run", run, "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["step"] == step and isinstance(doc["findings"], list) and "context" in doc
        for f in doc["findings"]:
            assert FINDING_KEYS <= set(f), f
            assert f["cause_class"] in CAUSES, f
        world.cache[(run, step)] = doc
    return world.cache[(run, step)]


def anomalies(cli, world: World, name: str, lo: int | None = None, hi: int | None = None) -> list[dict]:
    run = world.incidents[name].run_id
    if (run, "anomalies") not in world.cache:
        code, out, err = cli("--home", str(world.home), "anomalies", "--run", run, "--json")
        assert code == 0, err
        rows = json.loads(out)
        for r in rows:
            assert {"run", "step", "metric", "kind", "score", "cause_class"} <= set(r) and r["cause_class"] in CAUSES
        world.cache[(run, "anomalies")] = rows
    return [r for r in world.cache[(run, "anomalies")]
            if (lo is None or r["step"] >= lo) and (hi is None or r["step"] <= hi)]


def brief(findings: list[dict], n: int = 5) -> list[tuple]:
    """What a failure message shows: (step, kind, cause) of the first findings."""
    return [(f["step"], f["kind"], f["cause_class"]) for f in findings[:n]]


def ints_in(obj, key_hint: str = "") -> set[int]:
    """Every integer in a JSON value, found under a key containing `key_hint` (any key when empty)."""
    out: set[int] = set()
    if isinstance(obj, dict):
        for k, v in obj.items():
            if key_hint in k.lower():
                out |= ints_in(v)
            else:
                out |= ints_in(v, key_hint)
    elif isinstance(obj, list):
        for v in obj:
            out |= ints_in(v, key_hint)
    elif isinstance(obj, int) and not isinstance(obj, bool) and not key_hint:
        out.add(obj)
    return out


def window_of(evidence: dict) -> tuple[int, int] | None:
    """The (first, last) step of a trend finding's window, under any of the usual names."""
    for a, b in (("start", "end"), ("window_start", "window_end"), ("start_step", "end_step"), ("first_step", "last_step")):
        if isinstance(evidence.get(a), int) and isinstance(evidence.get(b), int):
            return evidence[a], evidence[b]
    w = evidence.get("window")
    if isinstance(w, list) and len(w) == 2 and all(isinstance(x, int) for x in w):
        return w[0], w[1]
    if isinstance(w, dict):
        return window_of(w)
    return None


def case(name: str, xfail: str | None = None, *extra):
    marks = [pytest.mark.xfail(strict=True, reason=xfail)] if xfail else []
    return pytest.param(name, *extra, marks=marks, id=name)


# --- 1. two causes at one step ----------------------------------------------------------------------

COINCIDENT = [
    case("coincident"),
    case("fork-coincident"),
    case("sparse-coincident"),
]


@pytest.mark.parametrize("name", COINCIDENT)
def test_coincident_causes_are_both_in_the_top_three(cli, world, name):
    inc = world.incidents[name]
    bias, opt = inc.cause("heuristic_parameter"), inc.cause("optimizer")
    for step in (bias.step, opt.step):
        doc = explain(cli, world, name, step)
        top = [f["cause_class"] for f in doc["findings"][:3]]
        assert {"heuristic_parameter", "optimizer"} <= set(top), (step, brief(doc["findings"]))
        bias_f = next(f for f in doc["findings"][:3] if f["cause_class"] == "heuristic_parameter")
        assert bias_f["step"] == bias.step and any("router_bias" in a["name"] for a in bias_f["attribution"][:2])


@pytest.mark.parametrize("name", [
    case("coincident"),
    case("fork-coincident"),
    case("sparse-coincident"),
])
def test_coincident_causes_one_finding_per_cause_with_the_event_steps(cli, world, name):
    inc = world.incidents[name]
    opt = inc.cause("optimizer")
    doc = explain(cli, world, name, inc.cause("heuristic_parameter").step)
    near = [f for f in doc["findings"] if abs(f["step"] - opt.step) <= 5 * inc.every]
    by_cause = [f["cause_class"] for f in near]
    assert by_cause.count("optimizer") == 1 and by_cause.count("heuristic_parameter") == 1, brief(near, 8)
    assert not {"data_batch", "infrastructure"} & set(by_cause), brief(near, 8)
    event = next(f for f in near if f["cause_class"] == "optimizer")
    listed = ints_in(event["evidence"], "step") | {event["step"]}
    assert set(opt.steps[:3]) <= listed, (opt.steps, sorted(listed))


@pytest.mark.parametrize("name", [
    case("coincident"),
    case("fork-coincident"),
    case("sparse-coincident"),
])
def test_coincident_causes_are_named_together(cli, world, name):
    inc = world.incidents[name]
    n = inc.cause("heuristic_parameter").step
    doc = explain(cli, world, name, n)
    said = " ".join([f["explanation"] for f in doc["findings"][:3]] + [str(doc.get(k, "")) for k in ("explanation", "summary")])
    assert re.search(rf"two things happened at step {n:,}|two things happened at step {n}\b", said, re.I), said[:600]


@pytest.mark.parametrize("name", [case("coincident"), case("fork-coincident"), case("sparse-coincident")])
def test_coincident_causes_are_both_stored(cli, world, name):
    inc = world.incidents[name]
    bias, opt = inc.cause("heuristic_parameter"), inc.cause("optimizer")
    rows = anomalies(cli, world, name, bias.step - inc.every, opt.steps[-1])
    assert {r["cause_class"] for r in rows} == {"heuristic_parameter", "optimizer"}, rows
    assert any(r["step"] == bias.step and r["cause_class"] == "heuristic_parameter" for r in rows)


# --- 2. slow logit growth -----------------------------------------------------------------------------

LOGIT = [
    case("logit-growth"),
    case("logit-growth-nan"),
    case("fork-logit-growth"),
    case("sparse-logit-growth"),
]


@pytest.mark.parametrize("name", LOGIT)
def test_slow_logit_growth_is_classed_logit_growth(cli, world, name):
    inc = world.incidents[name]
    truth = inc.cause("logit_growth")
    lo, hi = truth.window
    doc = explain(cli, world, name, truth.step)
    assert doc["findings"] and doc["findings"][0]["cause_class"] == "logit_growth", brief(doc["findings"])
    f = doc["findings"][0]
    win = window_of(f["evidence"])
    assert win is not None, f["evidence"]
    assert lo - 150 <= win[0] <= hi - 100 and hi - 50 <= win[1] <= inc.run.last_step, (win, truth.window)
    said = json.dumps(f["evidence"]) + f["explanation"]
    assert "lm_head" in said and re.search(r"z.?loss|cross_entropy", said), said[:600]
    assert sum(isinstance(v, float) for v in f["evidence"].values()) >= 2, f["evidence"]
    assert not [g for g in doc["findings"] if g["cause_class"] == "optimizer"], brief(doc["findings"])


@pytest.mark.parametrize("name", [
    case("logit-growth"),
    case("sparse-logit-growth"),
])
def test_logit_growth_window_is_not_called_optimizer(cli, world, name):
    inc = world.incidents[name]
    lo, hi = inc.cause("logit_growth").window
    rows = anomalies(cli, world, name, lo, hi)
    assert any(r["cause_class"] == "logit_growth" for r in rows), rows[:8]
    assert not [r for r in rows if r["cause_class"] in ("optimizer", "infrastructure")], rows[:8]


def test_nans_after_logit_growth_are_numerics(cli, world):
    inc = world.incidents["logit-growth-nan"]
    nan = inc.cause("numerics")
    doc = explain(cli, world, "logit-growth-nan", nan.step)
    top = doc["findings"][0]
    assert (top["cause_class"], top["step"]) == ("numerics", nan.step), brief(doc["findings"])
    rows = anomalies(cli, world, "logit-growth-nan", nan.step, nan.steps[-1])
    assert rows and {r["cause_class"] for r in rows} == {"numerics"}
    assert "train/loss" in {r["metric"] for r in rows}


# --- 3. gaps ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["gap", "gap-spikes", "sparse-gap"])
def test_restart_gap_is_infrastructure(cli, world, name):
    inc = world.incidents[name]
    gap = inc.cause("infrastructure")
    doc = explain(cli, world, name, gap.step)
    infra = [f for f in doc["findings"] if f["cause_class"] == "infrastructure" and f["step"] == gap.step]
    assert infra, brief(doc["findings"])
    assert gap.steps[0] in ints_in(infra[0]["evidence"], "previous"), infra[0]["evidence"]   # the last step before


@pytest.mark.parametrize("name", [
    case("gap"),
    case("sparse-gap"),
])
def test_no_finding_for_a_delta_spanning_a_gap(cli, world, name):
    inc = world.incidents[name]
    gap = inc.cause("infrastructure")
    rows = anomalies(cli, world, name, gap.step - 100, gap.step + 100)
    assert {(r["step"], r["cause_class"]) for r in rows} == {(gap.step, "infrastructure")}, rows[:8]
    doc = explain(cli, world, name, gap.step)
    assert {f["cause_class"] for f in doc["findings"]} == {"infrastructure"}, brief(doc["findings"])


def test_real_spikes_before_and_after_a_gap_are_still_found(cli, world):
    inc = world.incidents["gap-spikes"]
    rows = anomalies(cli, world, "gap-spikes")
    found = {(r["step"], r["cause_class"]) for r in rows}
    assert {(c.step, c.cause_class) for c in inc.causes} <= found, sorted(found)
    # at the bad batch 5 steps after the restart, the restart and the QB re-set at its first step are
    # episodes that ended within the window before it: all three answer it
    doc = explain(cli, world, "gap-spikes", inc.causes[2].step)
    causes = {f["cause_class"] for f in doc["findings"]}
    assert {"heuristic_parameter", "infrastructure", "data_batch"} <= causes, brief(doc["findings"])
    # and at the re-set itself, the bad batch still to come is not part of the answer
    doc = explain(cli, world, "gap-spikes", inc.cause("heuristic_parameter").step)
    assert "data_batch" not in {f["cause_class"] for f in doc["findings"]}, brief(doc["findings"])


# --- 4. schedule-aware quiet -----------------------------------------------------------------------------

SCHED = I.SCHEDULE
WARM_END = int(SCHED["warmup"] * SCHED["total"])
DECAY_START = int(SCHED["total"] * (1 - SCHED["decay"]))


@pytest.mark.parametrize("why,step", [
    case("warm-up ends", None, WARM_END),
    case("data phase 2 starts", None, SCHED["switches"][0]),
    case("decay starts", None, DECAY_START),
    case("data phase 3 starts", None, SCHED["switches"][1]),
])
def test_schedule_changes_are_not_findings(cli, world, why, step):
    inc = world.incidents["schedule"]
    lo, hi, _ = next(q for q in inc.quiet if q[2] == why)
    rows = anomalies(cli, world, "schedule", lo, hi)
    assert not [r for r in rows if r["cause_class"] != "none"], rows[:8]
    doc = explain(cli, world, "schedule", step)
    loud = [f for f in doc["findings"] if f["cause_class"] != "none" and f["confidence"] >= 0.5]
    assert not loud, brief(loud)


def test_schedule_warmup_end_is_in_context(cli, world):
    ctx = explain(cli, world, "schedule", WARM_END + 10)["context"]
    assert ctx["lr"]["warmup_end_step"] == WARM_END and ctx["lr_phase"] != "warmup"
    assert explain(cli, world, "schedule", WARM_END)["context"]["lr"]["total_steps"] == SCHED["total"]


def test_schedule_decay_start_is_in_context(cli, world):
    assert explain(cli, world, "schedule", 1000)["context"]["lr_phase"] != "decay"
    ctx = explain(cli, world, "schedule", DECAY_START + 10)["context"]
    assert ctx["lr_phase"] == "decay" and DECAY_START in ints_in(ctx["lr"]), ctx["lr"]


def test_schedule_data_switches_are_in_context(cli, world):
    sw1, sw2 = SCHED["switches"]
    before = explain(cli, world, "schedule", sw1 - 50)["context"]["data"]
    assert before["next_switch"] == sw1, before
    after = explain(cli, world, "schedule", sw1 + 10)["context"]["data"]
    assert after["start_step"] == sw1 and after["next_switch"] == sw2, after


# --- 5. sparse logging and forks, beyond the variants above -------------------------------------------------

def test_sparse_healthy_run_has_no_findings(cli, world):
    assert anomalies(cli, world, "sparse-healthy") == []
    assert explain(cli, world, "sparse-healthy", 1500)["findings"] == []


def test_fork_point_is_infrastructure(cli, world):
    inc = world.incidents["fork-coincident"]
    fork = inc.cause("infrastructure")
    doc = explain(cli, world, "fork-coincident", fork.step)
    assert doc["findings"], "nothing found at the fork point"
    top = doc["findings"][0]
    assert (top["cause_class"], top["step"]) == ("infrastructure", fork.step), brief(doc["findings"])
    assert top["evidence"]["fork_step"] == inc.run.fork_step
    assert not [f for f in doc["findings"] if f["kind"] == "resume" and f["step"] == fork.step]


# --- the single-cause incidents explain already holds on --------------------------------------------------

def test_classic_router_bias_jump_is_expected_balancing(cli, world):
    doc = explain(cli, world, "classic-router-bias", 500)
    top = doc["findings"][0]
    assert (top["metric"], top["kind"], top["step"], top["cause_class"]) == (
        "params/norm/total", "param_norm_jump", 500, "heuristic_parameter"), brief(doc["findings"])
    assert "expected balancing dynamics, not instability" in top["explanation"]
    assert sum(r["share"] for r in top["evidence"]["by_module"] if r["module"] == "router_bias") >= 0.9
    # exact: the leaves' Δ‖θᵢ‖² sum to the logged total's Δ‖θ‖²
    assert top["evidence"]["delta_sq"] == pytest.approx(top["evidence"]["logged_delta_sq"], rel=1e-6)
    assert top["attribution"] and all("router_bias" in a["name"] for a in top["attribution"][:4])
    assert top["confidence"] >= 0.9
    assert not [f for f in doc["findings"] if f["metric"] == "train/loss"]


def test_classic_grad_precursor_co_spike_is_optimizer(cli, world):
    doc = explain(cli, world, "classic-co-spike", 701)
    top = doc["findings"][0]
    assert (top["metric"], top["step"], top["cause_class"]) == ("train/loss", 701, "optimizer"), brief(doc["findings"])
    assert top["evidence"]["grad_step"] == 700 and top["evidence"]["z"] > 8


def test_classic_bad_batch_is_data_batch(cli, world):
    doc = explain(cli, world, "classic-bad-batch", 900)
    top = doc["findings"][0]
    assert (top["metric"], top["step"], top["cause_class"]) == ("train/loss", 900, "data_batch"), brief(doc["findings"])
    assert [(r["step"], r["cause_class"]) for r in anomalies(cli, world, "classic-bad-batch")] == [(900, "data_batch")]


def test_classic_slowdown_is_infrastructure(cli, world):
    rows = anomalies(cli, world, "classic-slowdown")
    assert len(rows) == 1 and 1500 <= rows[0]["step"] <= 1520 and rows[0]["cause_class"] == "infrastructure", rows
    doc = explain(cli, world, "classic-slowdown", rows[0]["step"])
    assert doc["findings"][0]["cause_class"] == "infrastructure", brief(doc["findings"])


def test_classic_hyperball_drift_is_optimizer(cli, world):
    rows = anomalies(cli, world, "classic-hyperball-drift")
    key = "params/norm/stacked_blocks.2.attn.w_q"
    assert [(r["metric"], r["cause_class"]) for r in rows] == [(key, "optimizer")], rows
    assert 1230 <= rows[0]["step"] <= 1250
    top = explain(cli, world, "classic-hyperball-drift", rows[0]["step"])["findings"][0]
    assert (top["metric"], top["cause_class"], top["evidence"]["role"]) == (key, "optimizer", "muonh")


def test_classic_healthy_control_is_quiet(cli, world):
    assert anomalies(cli, world, "classic-healthy") == []
    doc = explain(cli, world, "classic-healthy", 1500)
    assert doc["findings"] == [] and doc["context"]["lr_phase"] == "decay"
