"""`marinctl diff RUN_A RUN_B` through the CLI on runs synced from the loopback W&B fake: config
differences by nested key, and the step where two runs separate beyond their own noise. SYNTHETIC."""

from __future__ import annotations

import numpy as np
import pytest

from tests.blackbox import cli_json, run_cli, start_wandb, stderr_lines
from tests.fakes.synth import marin_run

E, P = "synthetic-lab", "diff-synthetic"
SPLIT = 137        # where B's loss leaves A's
SPLIT_OTHER = 211  # where C (another seed) leaves A's


@pytest.fixture(scope="module")
def mc(tmp_path_factory):
    from tests.blackbox import marinctl_run, sdk_env

    small = dict(steps=300, layers=1, experts=2, norm_every=50, eval_every=25, entity=E, project=P)
    a = marin_run("diff-a-synthetic", seed=3, **small)
    b = marin_run("diff-b-synthetic", seed=3, **small)        # same seed: the same noise until SPLIT
    c = marin_run("diff-c-synthetic", seed=11, **small)       # its own noise throughout
    for run, at, by in ((b, SPLIT, 0.05), (c, SPLIT_OTHER, 0.6)):
        s, v = run.series["train/loss"]
        run.set_values("train/loss", s[s >= at], v[s >= at] + by)
    a.config["optimizer"] = {"learning_rate": 1e-3, "weight_decay": 0.1}
    b.config["optimizer"] = {"learning_rate": 2e-3, "weight_decay": 0.1, "beta2": 0.95}
    a.config["only_in_a"] = True
    home = tmp_path_factory.mktemp("diff-home")
    server = start_wandb([a, b, c])
    try:
        done = marinctl_run(["sync", f"{E}/{P}"], env={**sdk_env(), "MARINCTL_HOME": str(home), "WANDB_BASE_URL": server.url})
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    return lambda cli: (lambda *args: cli("--home", str(home), *args)), {"a": a, "b": b, "c": c}


def test_config_differences_by_nested_key(cli, mc):
    at, _ = mc
    doc = cli_json(at(cli), "diff", "diff-a-synthetic", "diff-b-synthetic", "--json")
    cfg = doc["config"]
    assert set(cfg) == {"changed", "only_a", "only_b"}
    assert cfg["changed"]["optimizer.learning_rate"] == [1e-3, 2e-3]
    assert "optimizer.weight_decay" not in cfg["changed"]
    assert cfg["only_a"] == {"only_in_a": True}
    assert cfg["only_b"] == {"optimizer.beta2": 0.95}


def test_runs_separate_at_the_step_they_part(cli, mc):
    at, runs = mc
    doc = cli_json(at(cli), "diff", "diff-a-synthetic", "diff-b-synthetic", "--json")
    by_key = {m["key"]: m for m in doc["metrics"]}
    loss = by_key["train/loss"]
    assert set(loss) >= {"key", "separates_at", "max_gap", "max_gap_step", "last_a", "last_b"}
    assert loss["separates_at"] == SPLIT
    assert loss["max_gap_step"] >= SPLIT and loss["max_gap"] == pytest.approx(-0.05, abs=1e-9)
    assert loss["last_a"] == pytest.approx(runs["a"].series["train/loss"][1][-1])
    assert loss["last_b"] == pytest.approx(runs["b"].series["train/loss"][1][-1])
    assert by_key["eval/paloma/macro_loss"]["separates_at"] is None       # B changed its training loss only
    assert doc["metrics"][0]["separates_at"] is not None                  # parting keys first


def test_runs_with_their_own_noise_separate_where_the_change_is(cli, mc):
    at, _ = mc
    doc = cli_json(at(cli), "diff", "diff-a-synthetic", "diff-c-synthetic", "--keys", "train/loss", "--json")
    (loss,) = doc["metrics"]
    assert SPLIT_OTHER <= loss["separates_at"] < SPLIT_OTHER + 5, loss
    assert loss["max_gap_step"] >= SPLIT_OTHER


def test_aligned_by_tokens(cli, mc):
    at, runs = mc
    doc = cli_json(at(cli), "diff", "diff-a-synthetic", "diff-b-synthetic", "--x", "tokens", "--keys", "train/loss",
                   "--json")
    (loss,) = doc["metrics"]
    steps, tokens = runs["a"].series["throughput/total_tokens"]
    assert loss["separates_at"] == pytest.approx(float(tokens[np.searchsorted(steps, SPLIT)]))
    assert loss["separates_at_step"] == SPLIT and doc["x"] == "tokens"


def test_human_output_names_where_they_part(cli, mc):
    at, _ = mc
    _, out, _ = run_cli(at(cli), "diff", "diff-a-synthetic", "diff-b-synthetic", "--keys", "train/loss,eval/paloma/macro_loss")
    assert "optimizer.learning_rate" in out and "only_in_a" in out
    line = next(x for x in out.splitlines() if x.startswith("train/loss"))
    assert str(SPLIT) in line.split()[1]


@pytest.mark.parametrize("args,named", [
    (["diff-a-synthetic", "diff-b-synthetic", "--x", "time"], "--x must be step or tokens"),
    (["diff-a-synthetic", "no-such-run"], "unknown run 'no-such-run'"),
    (["diff-a-synthetic", "diff-b-synthetic", "--keys", "no/such/key"], "neither run logged no/such/key"),
])
def test_bad_input_exit_2(cli, mc, args, named):
    at, _ = mc
    code, out, err = at(cli)("diff", *args)
    assert code == 2 and out == "" and named in stderr_lines(err)[0] and len(stderr_lines(err)) == 2, err
