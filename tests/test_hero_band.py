"""The hero held to the ladder's band, as a person meets it: `ladder` scoring each of the hero's
evals against the interval for one run at the compute spent so far, the band on the hero's eval
chart (`plot`, `watch`), and `sync --follow` raising one alert per episode the hero spends outside
it and none while it stays inside.

A SYNTHETIC ladder (four rungs named as Marin's, each logging eval/paloma/macro_loss every 5% of
its schedule, drawn from L = 1.6 + 95·C^−0.094 with 0.3% noise, later fractions lower) and a
SYNTHETIC hero are served by the loopback W&B fake and synced through the real CLI. The hero's
evals are planted against the band `ladder --json` reports (at its middle: inside; past its top
edge by twice its half-width: outside), so the tests hold whatever the fits give.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.blackbox import cli_json, marinctl_run, sdk_env, strict_json, sync_served
from tests.fakes.synth import LADDER, LADDER_GROUP, marin_run

ENTITY, PROJECT = "synthetic-lab", "hero-band"
HERO = "hero-synthetic-band"
HERO_STEPS = 2000            # its schedule: the band's fractions 0.05 … 1 at steps 100 … 2000
START = 149                  # logged before anything is synced: no eval inside the band's range yet
KEY = "eval/paloma/macro_loss"
RUNG_FLOPS = (5.5e19, 2.7e20, 1.8e21, 9.2e21)      # Marin's published rungs' compute (repro/rungs.json)


def _rungs() -> list:
    """SYNTHETIC rungs: 200 steps each, an eval every 10 (5% of the schedule) on the law, 0.3% noise."""
    rng = np.random.default_rng(7)
    out = []
    for (name, hidden, _), flops in zip(LADDER, RUNG_FLOPS):
        run = marin_run(f"ladder-{name}-synthetic", steps=200, layers=1, experts=2, hidden_dim=hidden, eval_every=10,
                        norm_every=100, entity=ENTITY, project=PROJECT, group=LADDER_GROUP, tags=["ladder"],
                        num_train_steps=200)
        steps = np.arange(10, 201, 10)
        steps[-1] = 199
        f = steps / 200
        law = 1.6 + 95.0 * flops ** -0.094 * (1.0 + 0.6 * (1.0 - f))
        run.set_values(KEY, steps, law * (1.0 + 0.003 * rng.standard_normal(len(steps))))
        out.append(run)
    return out


def _hero():
    run = marin_run(HERO, steps=START + 1, layers=1, experts=2, norm_every=10, eval_every=100_000, entity=ENTITY,
                    project=PROJECT, state="running", num_train_steps=HERO_STEPS, tags=["hero"])
    return run


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The ladder and the hero's first steps synced into a store; the band `ladder --json` reports."""
    home = tmp_path_factory.mktemp("hero-band")
    rungs, hero = _rungs(), _hero()
    env = {**sdk_env(), "MARINCTL_HOME": str(home)}
    done = sync_served([*rungs, hero], f"{ENTITY}/{PROJECT}", env=env)
    assert done.returncode == 0, done.stderr
    got = marinctl_run(["ladder", "--pin", "1.6", "--json"], env=env)
    assert got.returncode == 0, got.stderr
    doc = strict_json(got.stdout)
    assert doc["source"] == "rungs" and doc["hero"] == []     # a hero with no eval in the band's range yet
    band = doc["hero_band"]
    assert band["steps"][0] == 100 and band["steps"][-1] == HERO_STEPS
    return {"home": home, "band": band, "rungs": rungs}


def _home(world, tmp_path):
    """A copy of the module's synced home (its store) for this test alone."""
    home = tmp_path / "band-home"
    shutil.copytree(world["home"], home)
    return home


def planted(band: dict, steps, outside=()) -> list[float]:
    """The hero's loss at each step: the band's middle, or past its top edge by twice its half-width."""
    bs = np.asarray(band["steps"], float)
    out = []
    for s in steps:
        mid, hi = (float(np.interp(s, bs, band[k])) for k in ("mid", "hi"))
        out.append(hi + 2 * (hi - mid) if s in outside else mid)
    return out


def test_ladder_scores_each_hero_eval_against_the_band(world, tmp_path, cli):
    home = _home(world, tmp_path)
    hero = _hero()
    hero.extend(999)
    steps = [200, 300, 500, 700, 900]
    hero.set_values(KEY, steps, planted(world["band"], steps, outside={500, 700}))
    done = sync_served([*world["rungs"], hero], f"{ENTITY}/{PROJECT}/{HERO}", env={**sdk_env(), "MARINCTL_HOME": str(home)})
    assert done.returncode == 0, done.stderr
    mine = lambda *args: cli("--home", str(home), *args)  # noqa: E731
    evals = cli_json(mine, "ladder", "--pin", "1.6", "--json")["hero"]
    assert [e["step"] for e in evals] == steps
    assert [e["inside"] for e in evals] == [True, True, False, False, True]
    for e in evals:
        assert set(e) >= {"step", "compute", "loss", "lo", "hi", "inside"}
        assert e["compute"] == pytest.approx(2.7e24 * e["step"] / HERO_STEPS)   # the compute spent so far
        assert e["lo"] < e["hi"] and (e["lo"] <= e["loss"] <= e["hi"]) == e["inside"]
    code, out, err = mine("ladder", "--pin", "1.6")
    assert code == 0, err
    assert "3 of 5 evals inside" in out
    assert "outside the band: steps 500–700 (2 evals, above)" in out
    code, out, err = mine("plot", KEY, "--run", "hero", "--width", "100", "--height", "20")
    assert code == 0 and "ladder 90% band" in out, err            # the band on the hero's eval chart
    code, out, err = mine("plot", "train/loss", "--run", "hero", "--width", "100", "--height", "20")
    assert code == 0 and "ladder 90% band" not in out, err        # and on no other


@pytest.mark.asyncio
async def test_watch_draws_the_band_on_the_heros_eval_chart(world, tmp_path):
    from tests.watch_pilot import open_watch, run_test, settle, wait_for_text

    home = _home(world, tmp_path)
    app = open_watch(home / "marinctl.duckdb", "hero")
    async with run_test(app) as pilot:
        await wait_for_text(pilot, KEY)
        text = await settle(pilot)
    assert "ladder 90% band" in text, text


def test_follow_alerts_once_per_episode_outside_the_band_and_never_inside(world, tmp_path):
    from tests.fakes.growing import Feed
    from tests.fakes.wandb_server import WandbServer
    from tests.test_alerts_follow import follow, listed

    home = _home(world, tmp_path)
    env = {**os.environ, "MARINCTL_HOME": str(home)}
    band = world["band"]
    hero = _hero()

    def evals(*steps, outside=()):
        return lambda run, first, last: run.set_values(KEY, list(steps), planted(band, steps, outside=set(outside)))

    with WandbServer([*world["rungs"], hero], verbose=False) as server:
        env["WANDB_BASE_URL"] = server.url
        feed = Feed(server, hero)
        with follow(f"{ENTITY}/{PROJECT}/{HERO}", env) as f:
            f.passes(server)                                                # the baseline pass (nothing new)
            f.synced(feed.grow(250, then=evals(200, 300)))                  # inside
            f.synced(feed.grow(200, then=evals(400, 500)))
            assert [a for a in listed(env) if a["kind"] == "hero_band"] == []
            f.synced(feed.grow(200, then=evals(600, 700, outside=(600, 700))))   # leaves the band
            f.synced(feed.grow(200, then=evals(800, 900, outside=(800, 900))))   # and stays out: the same episode
            f.synced(feed.grow(200, then=evals(1000, 1100)))                # back inside for two evals
            f.synced(feed.grow(200, then=evals(1200, 1300, outside=(1300,))))    # out again: a new episode
            assert f.stop() in (0, 130), f.err[-2000:]
    fired = [a for a in listed(env) if a["kind"] == "hero_band"]
    assert sorted(a["step"] for a in fired) == [600, 1300], fired
    first = next(a for a in fired if a["step"] == 600)
    assert first["metric"] == KEY and first["run"] == HERO
    assert "above the ladder's 90% band" in first["title"], first["title"]
    assert first["summary"].startswith(f"The hero's {KEY} is ")
