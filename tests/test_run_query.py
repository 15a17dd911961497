"""The run filter language (`runs --where`) and `runs --group-by`, through the CLI on a store synced from
the loopback W&B fake. Runs are SYNTHETIC, with Marin-shaped nested configs."""

from __future__ import annotations

import pytest

from tests.blackbox import cli_json, run_cli, stderr_lines
from tests.fakes.sweep import ENTITY, short_runs

P = "select-synthetic"
# run -> (group, state, tags, learning rate, width)
SHAPE = {
    "short-000-synthetic": ("sweep-d512", "finished", ["baseline"], 3e-3, 512),
    "short-001-synthetic": ("sweep-d512", "finished", [], 1e-3, 512),
    "short-002-synthetic": ("sweep-d768", "running", ["baseline"], 3e-4, 768),
    "short-003-synthetic": ("sweep-d768", "crashed", [], 2e-3, 768),
    "isoflop-1e+18-a-synthetic": ("isoflop-d512", "finished", ["sweep"], 1e-3, 512),
    "isoflop-1e+18-b-synthetic": ("isoflop-d1024", "running", ["sweep", "baseline"], 5e-4, 1024),
}


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    from tests.blackbox import sdk_env, sync_served

    runs = short_runs(4, project=P, steps=20) + short_runs(2, project=P, steps=20, prefix="isoflop-1e+18")
    for run, rid in zip(runs, ["short-000-synthetic", "short-001-synthetic", "short-002-synthetic",
                               "short-003-synthetic", "isoflop-1e+18-a-synthetic", "isoflop-1e+18-b-synthetic"]):
        run.run_id = rid
        group, state, tags, lr, width = SHAPE[rid]
        run.group, run.state, run.tags = group, state, tags + ["synthetic"]
        run.config["optimizer"] = {"learning_rate": lr, "beta2": 0.95}
        run.config["model"] = {"hidden_dim": width}
    home = tmp_path_factory.mktemp("select-home")
    done = sync_served(runs, f"{ENTITY}/{P}", env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    return home


def _where(cli, home, expr: str) -> list[str]:
    return sorted(r["run"] for r in cli_json(cli, "--home", str(home), "runs", "--where", expr, "--json"))


def _expect(pred) -> list[str]:
    return sorted(r for r, shape in SHAPE.items() if pred(*shape))


@pytest.mark.parametrize("expr,pred", [
    ("cfg.optimizer.learning_rate>=1e-3", lambda g, s, t, lr, w: lr >= 1e-3),
    ("cfg.optimizer.learning_rate<1e-3", lambda g, s, t, lr, w: lr < 1e-3),
    ("group~d512", lambda g, s, t, lr, w: "d512" in g),
    ("group~^sweep-d(512|768)$", lambda g, s, t, lr, w: g in ("sweep-d512", "sweep-d768")),
    ("state:running", lambda g, s, t, lr, w: s == "running"),
    ("state:RUNNING", lambda g, s, t, lr, w: s == "running"),
    ("tag:baseline", lambda g, s, t, lr, w: "baseline" in t),
    ("name~isoflop", lambda g, s, t, lr, w: False),     # by display name, "<id> (synthetic)", and id alike
    ("cfg.model.hidden_dim=768", lambda g, s, t, lr, w: w == 768),
    ("cfg.model.hidden_dim!=768", lambda g, s, t, lr, w: w != 768),
    ("tag:baseline state:running", lambda g, s, t, lr, w: "baseline" in t and s == "running"),
    ("-tag:baseline", lambda g, s, t, lr, w: "baseline" not in t),
    ("-state:finished group~sweep", lambda g, s, t, lr, w: s != "finished" and g.startswith("sweep")),
    ("isoflop -tag:baseline", lambda g, s, t, lr, w: False),
    ("cfg.optimizer.missing>0", lambda g, s, t, lr, w: False),
    ("-cfg.optimizer.missing>0", lambda g, s, t, lr, w: True),
])
def test_where_selects_exactly_the_runs_the_terms_name(cli, mc, expr, pred):
    want = _expect(pred)
    if expr == "name~isoflop":
        want = sorted(r for r in SHAPE if "isoflop" in r)
    if expr == "isoflop -tag:baseline":
        want = ["isoflop-1e+18-a-synthetic"]
    assert _where(cli, mc, expr) == want


def test_where_reads_summary_keys_and_numbers_in_text(cli, mc):
    got = _where(cli, mc, "summary.parameter_count>1e9 summary.train/loss<100")
    assert got == sorted(SHAPE)                            # 1.6e9 params in every synthetic run's summary
    assert _where(cli, mc, "summary.parameter_count<1e9") == []


@pytest.mark.parametrize("expr,named", [
    ("lr>=1e-3", "unknown field 'lr'"),
    ("group~(d512", "regex does not compile"),
    ("cfg.optimizer.learning_rate>=fast", "'fast' is not a number"),
    ("state:", "no value"),
    ("tag:baseline -", "nothing to match"),
])
def test_a_bad_term_is_named_in_two_lines_and_exit_2(cli, mc, expr, named):
    code, out, err = cli("--home", str(mc), "runs", "--where", expr)
    lines = stderr_lines(err)
    assert code == 2 and out == ""
    assert len(lines) == 2 and named in lines[0] and lines[1].lstrip().startswith("try:"), err
    bad = next(t for t in expr.split() if t != "tag:baseline")
    assert repr(bad) in lines[0], lines[0]


def test_group_by_counts_and_last_values(cli, mc):
    groups = cli_json(cli, "--home", str(mc), "runs", "--group-by", "cfg.model.hidden_dim", "--json")
    assert [(g["group"], g["runs"]) for g in groups] == [(512, 3), (768, 2), (1024, 1)]
    for g in groups:
        assert set(g) >= {"group", "runs", "last"}
        assert g["last"]["step"] == 19 and isinstance(g["last"]["train/loss"], float)
    by_tag = {g["group"]: g["runs"] for g in cli_json(cli, "--home", str(mc), "runs", "--group-by", "tag", "--json")}
    assert by_tag["baseline"] == 3 and by_tag["synthetic"] == 6 and by_tag["sweep"] == 2
    some = cli_json(cli, "--home", str(mc), "runs", "--where", "state:running", "--group-by", "group",
                    "--keys", "eval/paloma/macro_loss", "--json")
    assert [(g["group"], g["runs"]) for g in some] == [("isoflop-d1024", 1), ("sweep-d768", 1)]
    assert set(some[0]["last"]) == {"eval/paloma/macro_loss", "step"}
    _, text, _ = run_cli(cli, "--home", str(mc), "runs", "--group-by", "state")
    assert "crashed" in text and "running" in text and "finished" in text
