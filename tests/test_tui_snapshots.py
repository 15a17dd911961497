"""SVG snapshots of the watch screen on a deterministic store of SYNTHETIC runs.

Regenerate after an intended visual change with
`python -m pytest tests/test_tui_snapshots.py --snapshot-update` and review the SVGs.
"""

from __future__ import annotations

import time

import pytest

from marinctl.tui.app import WatchApp
from tests.tui_store import build_watch_store

SIZE = (150, 46)


@pytest.fixture
def watch_store(store):
    build_watch_store(store)
    return store


def settle(refreshes: int = 1):
    async def run_before(pilot):
        app = pilot.app
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            await pilot.pause(0.05)
            busy = any(w.is_running for w in app.workers)
            if app.view is not None and app.refreshes >= refreshes and not busy:
                break
        await pilot.pause(0.2)
    return run_before


def keys_then_settle(*keys: str, refreshes: int = 1):
    async def run_before(pilot):
        await settle(1)(pilot)
        await pilot.press(*keys)
        await settle(refreshes)(pilot)
    return run_before


def test_snapshot_hero_default_panels(watch_store, snap_compare):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=settle())


def test_snapshot_cursor_on_anomaly_marker(watch_store, snap_compare):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("home", "n"))


def test_snapshot_filter_router_keys_log_y(watch_store, snap_compare):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    assert snap_compare(app, terminal_size=SIZE,
                        run_before=keys_then_settle("slash", *"router/layer_[01]/", "enter", "y", refreshes=2))


def test_snapshot_ladder_overlays_on_fraction_axis(watch_store, snap_compare):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("o", refreshes=2))


def test_snapshot_help_screen(watch_store, snap_compare):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("question_mark"))
