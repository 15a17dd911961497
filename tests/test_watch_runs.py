"""The runs sidebar of `watch`: filtered with `runs --where`'s language, a compared
run's diff one key away, and two older faults (a lone run compared with itself; the no-hero screen
listing keys for ever).

Stores of SYNTHETIC runs (tests/fakes/synth.py) written straight into DuckDB; keys pressed
through Pilot; every assertion reads the screen.
"""

from __future__ import annotations

import re

import pytest

from tests.fakes.load import load_into_store
from tests.fakes.synth import marin_run
from tests.watch_pilot import open_watch, run_test, settle, wait_for_text

pytestmark = pytest.mark.asyncio

SMALL = dict(steps=120, layers=1, experts=2, norm_every=10, eval_every=50, entity="synthetic-lab", project="runs")
SPLIT = 137          # where run B's training loss leaves run A's (SYNTHETIC)


def sweep(store, n: int = 5) -> list[str]:
    """`n` SYNTHETIC runs of no hero lineage, widths alternating: odd ones in group sweep-d512."""
    runs = [marin_run(f"synthetic-sweep-{i}", seed=i, group=f"sweep-d{512 if i % 2 else 768}", **SMALL)
            for i in range(n)]
    load_into_store(store, runs)
    return [r.run_id for r in runs]


def sidebar(text: str) -> list[str]:
    """The run ids listed in the runs box."""
    return re.findall(r"synthetic-sweep-\d+", "\n".join(line[:36] for line in text.splitlines()))


async def type_text(pilot, text: str) -> None:
    await pilot.press(*[{" ": "space"}.get(c, c) for c in text])


async def test_the_filter_narrows_the_sidebar_says_a_bad_term_and_is_remembered(store):
    ids = sweep(store)
    async with run_test(open_watch(store.path)) as pilot:
        text = await settle(pilot)
        assert sorted(sidebar(text)) == sorted(ids)
        await pilot.press("w")                               # anywhere: the filter box over the sidebar
        await type_text(pilot, "group~d512 -name~sweep-3")
        await pilot.press("enter")
        text = await wait_for_text(pilot, "1 of 5 runs")
        assert sidebar(text) == ["synthetic-sweep-1"]

        await pilot.press("f")                               # the sidebar has focus again: f opens it there
        await pilot.press(*["backspace"] * 30)
        await type_text(pilot, "state:finished lr>=1e-3")
        await pilot.press("enter")
        text = await wait_for_text(pilot, "bad filter term 'lr>=1e-3':", "unknown field 'lr'")
        assert "cfg.KEY" in text and sidebar(text) == ["synthetic-sweep-1"]     # the filter in force stays
        await pilot.press("escape")
        text = await settle(pilot)
        assert "bad filter term" not in text and "1 of 5 runs" in text

    async with run_test(open_watch(store.path)) as pilot:      # a later launch on this store
        text = await wait_for_text(pilot, "1 of 5 runs")
        assert sidebar(text) == ["synthetic-sweep-1"]
        await pilot.press("w", *["backspace"] * 30, "enter")   # empty: every run again
        text = await settle(pilot)
        assert sorted(sidebar(text)) == sorted(ids) and " of 5 runs" not in text


async def test_the_no_hero_screen_lists_no_keys_for_ever(store):
    sweep(store, 3)
    async with run_test(open_watch(store.path)) as pilot:
        text = await wait_for_text(pilot, "no hero lineage")
        text = await settle(pilot)           # nothing left in flight: what it says now, it says for ever
    assert "listing keys" not in text and "listing the run's keys" not in text, text


async def test_a_lone_run_is_not_compared_with_itself(store):
    sweep(store, 1)
    async with run_test(open_watch(store.path)) as pilot:     # no TARGET: the only run stored is shown
        await settle(pilot)
        await pilot.click("#sidebar")
        await pilot.press("home", "space")
        text = await settle(pilot)
        assert "that is the run on screen" in text
        assert "comparing" not in text and "━" not in "\n".join(line[:36] for line in text.splitlines())


def diverging(store) -> None:
    """Runs A and B: same seed, so the same noise, until B's training loss rises by 0.05 at SPLIT."""
    small = {**SMALL, "steps": 300, "norm_every": 50, "eval_every": 25, "group": "synthetic-diff"}
    a = marin_run("synthetic-diff-a", seed=3, **small)
    b = marin_run("synthetic-diff-b", seed=3, **small)
    s, v = b.series["train/loss"]
    b.set_values("train/loss", s[s >= SPLIT], v[s >= SPLIT] + 0.05)
    a.config["optimizer"] = {"learning_rate": 1e-3}
    b.config["optimizer"] = {"learning_rate": 2e-3}
    load_into_store(store, [a, b])


async def test_the_diff_panel_shows_where_the_compared_run_separates(store):
    diverging(store)
    async with run_test(open_watch(store.path, "synthetic-diff-a")) as pilot:
        await settle(pilot)
        await pilot.press("d")
        text = await wait_for_text(pilot, "No run is compared")
        assert "press space" in text
        await pilot.press("escape")
        await pilot.click("#sidebar")
        await pilot.press("home", "space")             # B is listed first or second: compare it, not A
        if "that is the run on screen" in await settle(pilot):
            await pilot.press("down", "space")
        await wait_for_text(pilot, "comparing with synthetic-lab/runs/synthetic-diff-b")
        await pilot.press("d")
        text = await wait_for_text(pilot, "metrics aligned by step")
    assert "A = synthetic-diff-a" in text and "B = synthetic-diff-b" in text
    assert re.search(r"optimizer\.learning_rate\s+0\.001\s+0\.002", text), text
    row = next(line for line in text.splitlines() if re.search(r"\btrain/loss\b", line))
    assert re.search(rf"train/loss\s+{SPLIT}\s+-0\.05\s", row), row
