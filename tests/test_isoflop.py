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


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    from tests.blackbox import sdk_env, sync_served

    runs = isoflop_sweep(SURFACE, {**GOOD, ONE_SIDED: (2.0, 8.0)}, project=P, runs_per_budget=6, noise=0.002)
    home = tmp_path_factory.mktemp("isoflop-home")
    done = sync_served(runs, f"{ENTITY}/{P}", env={**sdk_env(), "MARINCTL_HOME": str(home)})
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
])
def test_bad_input_exit_2(cli, mc, args, named):
    code, out, err = mc(cli)("ladder", *args)
    lines = stderr_lines(err)
    assert code == 2 and out == "" and len(lines) == 2 and named in lines[0], err
