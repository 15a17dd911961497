"""TARGET parsing: every form the contract names, and one-line exit-2 errors for the rest."""

from __future__ import annotations

import pytest

from marinctl.errors import UserError
from marinctl.sync import parse_target
from marinctl.sync.targets import local_targets


@pytest.mark.parametrize("raw, entity, project, run", [
    ("marin-community/marin_moe", "marin-community", "marin_moe", None),
    ("marin-community/marin_moe/hero-12d8b6f0-dee637", "marin-community", "marin_moe", "hero-12d8b6f0-dee637"),
    ("https://wandb.ai/marin-community/marin_moe/runs/hero-12d8b6f0-dee637", "marin-community", "marin_moe", "hero-12d8b6f0-dee637"),
    ("https://wandb.ai/marin-community/marin_moe/runs/isoflop-moe-v16-1e%2B18-d768?nw=x", "marin-community", "marin_moe", "isoflop-moe-v16-1e+18-d768"),
    ("https://forge.coreweave.com/wandb/marin-community/marin_moe/runs/ladder-d768", "marin-community", "marin_moe", "ladder-d768"),
    ("https://wandb.ai/marin-community/marin_moe", "marin-community", "marin_moe", None),
    ("https://wandb.ai/marin-community/marin_moe/workspace", "marin-community", "marin_moe", None),
])
def test_wandb_targets(raw, entity, project, run):
    (plan,) = parse_target(raw)
    assert (plan.kind, plan.entity, plan.project, plan.run_id) == ("wandb", entity, project, run)


def test_marin_default_covers_hero_and_ladder_groups():
    plans = parse_target("marin")
    wandb = [p for p in plans if p.kind == "wandb"]
    assert len(wandb) == 1
    assert wandb[0].filters == {"group": {"$in": ["moe-hero-ep", "moe-hero-ep-scaling-ladder"]}}


def test_local_targets(tmp_path):
    f = tmp_path / "run-abc.wandb"
    f.write_bytes(b"")
    (plan,) = parse_target(str(f))
    assert plan.kind == "local" and plan.path == f
    (plan,) = parse_target(str(tmp_path))
    assert plan.kind == "local"
    assert local_targets([str(f), "marin", "no/such/path/here!"]) == [str(f)]    # followed, not polled


@pytest.mark.parametrize("raw", ["", "bogus!!", "https://example.com/a/b", "./missing-dir", "x/y/z/w", "https://wandb.ai/only-entity"])
def test_bad_targets_are_user_errors(raw):
    with pytest.raises(UserError):
        parse_target(raw)


def test_cli_bad_target_exit_2_one_line(cli):
    code, out, err = cli("sync", "not a target!")
    assert code == 2
    assert err.startswith("marinctl: error: unknown sync target")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 2


def test_a_run_named_two_ways_is_one_lock_key():
    """Sync locks are keyed by the resolved run, not the text typed."""
    from marinctl.sync import lock_key

    keys = {lock_key(parse_target(raw)[0]) for raw in (
        "marin-community/marin_moe/hero-12d8b6f0-dee637",
        "https://wandb.ai/marin-community/marin_moe/runs/hero-12d8b6f0-dee637",
        "https://forge.coreweave.com/wandb/marin-community/marin_moe/runs/hero-12d8b6f0-dee637?nw=1")}
    assert keys == {"marin-community/marin_moe/hero-12d8b6f0-dee637"}
