"""`explain` answers at every step of an episode, black-box, on labelled SYNTHETIC runs.

Each incident kind marinctl knows (a loss spike, a parameter-norm jump, an Adam-group drift, a
resume whose loss does not match its parent's, a throughput drop, a router collapse, NaN, logit
growth) is injected into a small Marin-shaped run (tests/fakes/incidents.py, runbook.py), served
by the loopback W&B fake and mirrored with `marinctl sync ENTITY/PROJECT`; every check reads what
a person types: `marinctl explain --range A:B --json`, `explain step N --json`, `anomalies --json`.
The store is built once for the module. Nothing here imports marinctl's analysis code.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.blackbox import home_json
from tests.fakes import incidents as I
from tests.fakes import synth
from tests.fakes.wandb_server import WandbServer

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "explain-episodes"


@dataclass
class World:
    home: Path
    runs: dict[str, synth.SynthRun]
    cache: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"World({str(self.home)!r}, {len(self.runs)} runs)"


def _evals_every_3() -> synth.SynthRun:
    """A short run that evaluates every 3 steps: dozens of evals within explain's window."""
    return synth.marin_run("synthetic-episodes-evals", steps=120, layers=1, experts=2, norm_every=10, eval_every=3,
                           entity=I.ENTITY, project=PROJECT, group="synthetic-episodes")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    """Every SYNTHETIC run of this module, synced over W&B's GraphQL into one store."""
    runs = {r.run_id: r for r in [_evals_every_3()]}
    home = tmp_path_factory.mktemp("episodes-home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "GITHUB_", "GH_"))}
    env.update(NETRC=str(home / "netrc-none"), WANDB_CONFIG_DIR=str(home / "wandb-config"), MARINCTL_HOME=str(home),
               PYTHONPATH=str(ROOT))
    with WandbServer(list(runs.values()), verbose=False) as server:
        report = home_json(home, "sync", f"{I.ENTITY}/{PROJECT}", "--json", env={**env, "WANDB_BASE_URL": server.url})
    assert {r["run"] for r in report["runs"]} == set(runs)
    return World(home, runs)


def cli_in(cli, world: World, *args: str) -> str:
    if args not in world.cache:
        code, out, err = cli("--home", str(world.home), *args)
        assert code == 0, err
        world.cache[args] = out
    return world.cache[args]


def explain(cli, world: World, run: str, step: int) -> dict:
    return json.loads(cli_in(cli, world, "explain", "step", str(step), "--run", run, "--json"))


# --- the context: the evals around the step, not the run's first ----------------------------------------

def test_the_context_lists_the_evals_around_the_step(cli, world):
    run = "synthetic-episodes-evals"
    assert explain(cli, world, run, 40)["context"]["evals"] == [33, 36, 39, 42, 45, 48]
    assert explain(cli, world, run, 39)["context"]["evals"] == [33, 36, 39, 42, 45, 48]
    text = cli_in(cli, world, "explain", "step", "40", "--run", run)
    assert "evals        at steps 33, 36, 39, 42, 45, 48\n" in text, text
    # at the run's start there is nothing before: the first evals after it
    assert explain(cli, world, run, 1)["context"]["evals"] == [0, 3, 6, 9]
