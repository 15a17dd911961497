"""SVG snapshots of the watch screen on a deterministic store of SYNTHETIC runs.

Regenerate after an intended visual change with
`python -m pytest tests/test_tui_snapshots.py --snapshot-update` and review the SVGs.
"""

from __future__ import annotations

from marinctl.tui.app import WatchApp

from marinctl.tui.options import WatchOptions
from tests.watch_pilot import settle, wait_for_text

SIZE = (150, 46)


async def _first_view(pilot):
    await wait_for_text(pilot, "▏step", " keys")       # the first chart and the key list are in
    await settle(pilot)


def keys_then_settle(*keys: str, shown: str = ""):
    async def run_before(pilot):
        await _first_view(pilot)
        await pilot.press(*keys)
        if shown:
            await wait_for_text(pilot, shown)
        await settle(pilot)
    return run_before


def test_snapshot_hero_default_panels(watch_store, snap_compare):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    assert snap_compare(app, terminal_size=SIZE, run_before=_first_view)


def test_snapshot_cursor_on_anomaly_marker(watch_store, snap_compare):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("home", "n", shown="▏step 250"))


def test_snapshot_filter_router_keys_log_y(watch_store, snap_compare):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    assert snap_compare(app, terminal_size=SIZE,
                        run_before=keys_then_settle("slash", *"router/layer_[01]/", "enter", "y", shown="log-y: on"))


def test_snapshot_ladder_overlays_on_fraction_axis(watch_store, snap_compare):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("o", shown="overlays on"))


def test_snapshot_help_screen(watch_store, snap_compare):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    assert snap_compare(app, terminal_size=SIZE, run_before=keys_then_settle("question_mark", shown="marinctl watch — keys"))
