"""The runs sidebar of `watch`: two older faults (a lone run compared with itself; the no-hero screen
listing keys for ever).

Stores of SYNTHETIC runs (tests/fakes/synth.py) written straight into DuckDB; keys pressed
through Pilot; every assertion reads the screen.
"""

from __future__ import annotations

import pytest

from tests.fakes.load import load_into_store
from tests.fakes.synth import marin_run
from tests.watch_pilot import open_watch, run_test, settle, wait_for_text

pytestmark = pytest.mark.asyncio

SMALL = dict(steps=120, layers=1, experts=2, norm_every=10, eval_every=50, entity="synthetic-lab", project="runs")


def sweep(store, n: int = 5) -> list[str]:
    """`n` SYNTHETIC runs of no hero lineage, widths alternating: odd ones in group sweep-d512."""
    runs = [marin_run(f"synthetic-sweep-{i}", seed=i, group=f"sweep-d{512 if i % 2 else 768}", **SMALL)
            for i in range(n)]
    load_into_store(store, runs)
    return [r.run_id for r in runs]


async def test_the_no_hero_screen_lists_no_keys_for_ever(store):
    sweep(store, 3)
    async with run_test(open_watch(store.path)) as pilot:
        text = await wait_for_text(pilot, "no hero lineage")
        text = await settle(pilot, quiet=1.0)
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
