"""`marinctl ladder --isoflop ENTITY/PROJECT` on a SYNTHETIC isoFLOP sweep synced from the loopback W&B
fake, whose loss surface (tests/fakes/sweep.py: Chinchilla's form and constants) fixes every budget's
optimum and the scaling exponents in closed form; the analysis must recover them within a few percent
and name the budget whose runs do not bracket its optimum."""

from __future__ import annotations

import pytest

from tests.blackbox import cli_json, run_cli, stderr_lines
from tests.fakes.sweep import ENTITY, Surface, isoflop_sweep

P = "isoflop-synthetic"
SURFACE = Surface()
GOOD = {c: (1 / 3, 3.0) for c in (1e18, 3e18, 1e19, 3e19, 1e20)}   # runs from D*/3 to 3·D*
ONE_SIDED = 3e20                                                     # runs from 2·D* to 8·D*: the optimum lies below them
# a SYNTHETIC candidate whose optimal loss at C is the baseline's at 1.3·C: both of Chinchilla's terms
# scaled by 1.3^−γ (γ the L(C) exponent) leave N*, D* as they are and scale L* − E by that much
P_FAST = "isoflop-synthetic-faster"
SPEEDUP = 1.3
CANDIDATE = Surface(A=Surface().A * SPEEDUP ** -Surface().loss_exponent, B=Surface().B * SPEEDUP ** -Surface().loss_exponent)


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    from tests.blackbox import sdk_env, sync_served

    runs = isoflop_sweep(SURFACE, {**GOOD, ONE_SIDED: (2.0, 8.0)}, project=P, runs_per_budget=6, noise=0.002)
    faster = isoflop_sweep(CANDIDATE, GOOD, project=P_FAST, runs_per_budget=6, noise=0.002, seed=1,
                           tag="faster")
    home = tmp_path_factory.mktemp("isoflop-home")
    done = sync_served(runs + faster, f"{ENTITY}/{P}", f"{ENTITY}/{P_FAST}", env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return lambda cli: (lambda *args: cli("--home", str(home), *args))


def test_each_budgets_optimum_is_recovered(cli, mc):
    doc = cli_json(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--json")
    budgets = {b["compute"]: b for b in doc["budgets"]}
    assert sorted(budgets) == sorted([*GOOD, ONE_SIDED])
    for c in GOOD:
        n, d, loss = SURFACE.optimum(c)
        b = budgets[c]
        assert set(b) >= {"compute", "runs", "optimum"} and b["runs"] == 6 and b["bracketed"]
        assert b["optimum"]["tokens"] == pytest.approx(d, rel=0.04), c
        assert b["optimum"]["params"] == pytest.approx(n, rel=0.04), c
        assert b["optimum"]["loss"] == pytest.approx(loss, rel=0.005), c


def test_scaling_exponents_are_recovered(cli, mc):
    doc = cli_json(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--pin", str(SURFACE.E), "--predict", "1e21",
                   "--json")
    assert set(doc) >= {"budgets", "fit", "tokens_opt", "params_opt", "predictions"}
    assert doc["tokens_opt"]["exponent"] == pytest.approx(SURFACE.tokens_exponent, rel=0.03)
    assert doc["params_opt"]["exponent"] == pytest.approx(SURFACE.params_exponent, rel=0.03)
    assert doc["tokens_opt"]["coef"] == pytest.approx(SURFACE.tokens_coef(), rel=0.1)    # 18 decades out, at C = 1
    assert doc["tokens_opt"]["exponent_err"] > 0
    assert doc["fit"]["alpha"] == pytest.approx(SURFACE.loss_exponent, rel=0.05)
    assert doc["fit"]["L_inf"] == SURFACE.E and doc["fit"]["pinned"]
    (p,) = doc["predictions"]
    n, d, loss = SURFACE.optimum(1e21)
    assert p["compute"] == 1e21 and p["loss"] == pytest.approx(loss, rel=0.01)
    assert p["tokens"] == pytest.approx(d, rel=0.06) and p["params"] == pytest.approx(n, rel=0.06)


def test_a_budget_whose_runs_do_not_bracket_its_optimum_is_named_and_left_out(cli, mc):
    doc = cli_json(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--json")
    b = next(x for x in doc["budgets"] if x["compute"] == ONE_SIDED)
    assert not b["bracketed"] and not b["used_in_fit"]
    assert "do not bracket" in b["note"] and b["optimum"]["tokens"] < b["tokens_range"][0]
    assert any("3e+20" in n and "do not bracket" in n for n in doc["notes"])
    code, out, err = run_cli(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}")
    assert any("budget 3e+20" in line and "do not bracket" in line for line in stderr_lines(err)), err
    row = next(line for line in out.splitlines() if line.startswith("3e+20"))
    assert "not bracketed" in row
    assert "T*(C) =" in out and "N*(C) =" in out and "log10 tokens" in out   # the fits and the chart


def test_optima_and_exponents_carry_intervals_that_hold_the_surface(cli, mc):
    doc = cli_json(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--pin", str(SURFACE.E), "--json")
    assert doc["level"] == 0.9
    for b in doc["budgets"]:
        if b["compute"] not in GOOD:
            continue
        o = b["optimum"]
        for k in ("tokens", "params", "loss"):
            assert o["lo"][k] < o[k] < o["hi"][k], (b["compute"], k)
        assert o["hi"]["tokens"] / o["lo"]["tokens"] < 1.5                     # tight at this noise
        # (whether they hold the surface's own optimum is coverage, measured in test_ladder_intervals.py:
        # at this sweep's 0.07% noise the parabola's bias, not the noise, is a budget's main error)
    for name, truth in (("tokens_opt", SURFACE.tokens_exponent), ("params_opt", SURFACE.params_exponent)):
        line = doc[name]
        assert line["lo"] < line["exponent"] < line["hi"] and line["lo"] <= truth <= line["hi"], name
    assert doc["fit"]["alpha_ci"]["lo"] <= SURFACE.loss_exponent <= doc["fit"]["alpha_ci"]["hi"]
    narrow = cli_json(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--level", "0.5", "--json")
    b0, b1 = doc["budgets"][1]["optimum"], narrow["budgets"][1]["optimum"]
    assert b1["hi"]["tokens"] / b1["lo"]["tokens"] < b0["hi"]["tokens"] / b0["lo"]["tokens"]
    assert narrow["tokens_opt"]["hi"] - narrow["tokens_opt"]["lo"] < doc["tokens_opt"]["hi"] - doc["tokens_opt"]["lo"]


def test_against_gives_a_second_sweeps_effective_speedup(cli, mc):
    doc = cli_json(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--against", f"{ENTITY}/{P_FAST}",
                   "--pin", str(SURFACE.E), "--json")
    assert doc["candidate"]["project"] == f"{ENTITY}/{P_FAST}"
    rows = doc["effective_speedup"]
    assert [r["compute"] for r in rows] == sorted([*GOOD, 1e21, 1e23])       # its budgets, then --predict's
    for r in rows:
        assert r["lo"] <= SPEEDUP <= r["hi"] and r["lo"] <= r["value"] <= r["hi"], r
    code, out, err = run_cli(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--against", f"{ENTITY}/{P_FAST}",
                             "--pin", str(SURFACE.E))
    assert "effective speed-up k" in out and "candidate fit" in out, out


def test_where_narrows_the_sweep(cli, mc):
    doc = cli_json(mc(cli), "ladder", "--isoflop", f"{ENTITY}/{P}", "--where", "name~^isoflop-1e\\+18", "--json")
    assert [(b["compute"], b["runs"]) for b in doc["budgets"]] == [(1e18, 6)]
    assert doc["fit"] is None and doc["tokens_opt"] is None


@pytest.mark.parametrize("args,named", [
    (["--isoflop", "not-a-project"], "--isoflop takes ENTITY/PROJECT"),
    (["--isoflop", f"{ENTITY}/never-synced"], "no runs of synthetic-lab/never-synced are stored"),
    (["--isoflop", f"{ENTITY}/{P}", "--metric", "no/such/metric"], "has a budget, tokens and 'no/such/metric'"),
    (["--where", "state:finished"], "--where selects runs of an isoFLOP sweep"),
    (["--isoflop", f"{ENTITY}/{P}", "--where", "bogus>1"], "unknown field 'bogus'"),
    (["--isoflop", f"{ENTITY}/{P}", "--against", "not-a-project"], "--against takes ENTITY/PROJECT"),
])
def test_bad_input_exit_2(cli, mc, args, named):
    code, out, err = mc(cli)("ladder", *args)
    lines = stderr_lines(err)
    assert code == 2 and out == "" and len(lines) == 2 and named in lines[0], err
