"""The watch TUI driven by Textual's Pilot on a real DuckDB file of SYNTHETIC runs.

Covers keys, the `/` filter, cursor movement and readout, the explain panel on `e`,
overlay toggles, log-y, a slow sync that must not block keys, sync failures as
notifications, and the advisory sync lock shared with `marinctl sync`.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest

from marinctl.errors import RuntimeFailure
from marinctl.tui.app import WatchApp
from marinctl.tui.capture import screen_text
from marinctl.tui.readout import bucket_width
from tests.tui_store import EVENT_STEP, SPIKE_STEP, build_watch_store

SIZE = (150, 48)
pytestmark = pytest.mark.asyncio


@pytest.fixture
def watch_store(store):
    build_watch_store(store)
    return store


async def wait_for(pilot, cond, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.05)
        if cond():
            return
    raise AssertionError("condition not reached in time")


async def loaded(pilot, app, refreshes=1):
    await wait_for(pilot, lambda: app.view is not None and app.refreshes >= refreshes and not running(app, "load"))
    await pilot.pause(0.1)


def running(app, group):
    return any(w.group == group and w.is_running for w in app.workers)


async def test_first_frame_shows_default_panels_header_and_sidebar(watch_store):
    app = WatchApp(None, 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        keys = [p.key for p in app.view.panels]
        assert keys[:4] == ["train/loss", "eval/paloma/macro_loss", "grad/norm/total", "params/norm/total"]
        text = screen_text(app)
        assert "step 799 / 800" in text
        assert "hero (stitched)" in text and "rung1 d768" in text
        assert "train/loss" in text


@pytest.mark.parametrize("size,cols", [(SIZE, 2), ((151, 47), 3), ((97, 40), 1), ((160, 50), 4)])
async def test_first_frames_are_built_in_the_worker_at_the_size_the_grid_gives(watch_store, monkeypatch, size, cols):
    """The worker guesses each chart's size before the charts exist (Textual's grid gives the
    later columns the spare cells); a wrong guess made the UI thread build every chart again
    before the first chart could be shown (~30 ms each)."""
    from marinctl.tui import settings
    from tests.watch_pilot import frames_built, on_ui

    settings.save(watch_store.path, settings.Layout(cols=cols))
    built = frames_built(monkeypatch)
    app = WatchApp(None, 30, store=watch_store, autosync=False)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot, app)
        # the key list's read can rebuild the page just after `loaded`: compare once it is laid out
        await wait_for(pilot, lambda: not any(w.is_running for w in app.workers)
                       and all(c.size.width > 0 for c in app._page.charts.values()))
        await pilot.pause(0.1)
        shown = list(app._page.charts.values())
        assert shown and all(c._frame is not None for c in shown)
        assert [(c.key, c._frame.size) for c in shown] == [(c.key, (c.size.width, c.size.height)) for c in shown]
        assert on_ui(built) == [], f"built again on the UI thread: {on_ui(built)}"


async def test_a_read_that_changes_nothing_draws_no_chart_again(watch_store, monkeypatch):
    """Once the key list is in, the view is read again (for the page count); charts whose picture did
    not change keep their frames. Before, every chart was drawn again (~20 ms each at hero scale,
    while a person starts pressing keys), and at hero scale also whenever DuckDB's parallel bucket sums
    differed in the last bit between two reads of the same rows."""
    from tests.watch_pilot import frames_built

    built = frames_built(monkeypatch)
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        deadline = time.monotonic() + 30
        while not (app.view is not None and app.view.total_keys is not None and app.refreshes >= 2
                   and not any(w.is_running for w in app.workers)) and time.monotonic() < deadline:
            await pilot.pause(0.05)
        await pilot.pause(0.3)
        shown = [c for c in app._page.charts.values() if c._frame is not None]
        assert app.refreshes >= 2 and len(shown) >= 8, (app.refreshes, len(shown))
        assert sorted((key, size) for key, size, _ in built) == sorted((c.key, c._frame.size) for c in shown)


async def test_keys_toggle_logy_smoothing_and_x_axis(watch_store):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("y")
        assert app.chart_state.logy is True
        await pilot.press("s")
        await loaded(pilot, app, 2)
        assert app.view.params.smoothing == "debiased"
        await pilot.press("x")
        await loaded(pilot, app, 3)
        assert app.view.axis.mode == "tokens"
        assert "log-y: on" in screen_text(app) and "smoothing: debiased" in screen_text(app)


async def test_slash_filter_over_all_keys_and_escape_clears(watch_store):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await wait_for(pilot, lambda: app.params.all_keys is not None)
        await pilot.press("slash")
        await pilot.press(*"drop_fraction|layer_0/routing_entropy")
        await pilot.press("enter")
        await wait_for(pilot, lambda: app.view.params.pattern is not None and not running(app, "load"))
        await pilot.pause(0.1)
        keys = [p.key for p in app.view.panels]
        assert keys == ["moe/drop_fraction", "train/router/layer_0/routing_entropy"]
        await pilot.press("escape")
        await wait_for(pilot, lambda: app.view.params.pattern is None and not running(app, "load"))
        await pilot.pause(0.1)
        assert len(app.view.panels) == 8


async def test_cursor_moves_by_buckets_and_reads_out_values(watch_store):
    """The cursor steps a bucket at a time, lands on bucket ends and reads the value logged there."""
    from marinctl.store.lineage import resolve_target
    from marinctl.store.series import values_at_or_before

    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        width = bucket_width(app.view)
        await pilot.press("home")
        assert app.chart_state.cursor_step == 0
        await pilot.press("right", "right", "right")
        step = app.view.bucket_end(3 * width)
        assert app.chart_state.cursor_step == step
        await wait_for(pilot, lambda: not running(app, "paint"))
        await pilot.pause(0.1)
        readout = str(app.query_one("#readout").render())
        label = app.view.labels["train/loss"]
        assert f"step {step:,}" in readout and f"{label} " in readout
        with watch_store.connect() as con:
            logged = values_at_or_before(con, resolve_target(con, "hero", stitched=True).segments,
                                         ["train/loss"], step)["train/loss"]
        assert logged[0] == step                      # train/loss is logged every step: read at the cursor
        from marinctl import numbers as N
        assert f"{label} {N.sig(logged[1])}" in readout
        # the chart's title says the same value
        assert f"train/loss  {N.sig(logged[1])}" in screen_text(app)


async def test_n_jumps_to_marker_and_e_opens_explain_for_it(watch_store, cli):
    """`e` on the anomaly marker shows what `marinctl explain step N` prints for that step."""
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("home", "n")
        assert app.chart_state.cursor_step == SPIKE_STEP
        await pilot.press("e")
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ExplainScreen" and "explain step" in screen_text(app))
        text = screen_text(app)
        assert f"explain step {SPIKE_STEP} · hero" in text
        assert "train/loss · spike at step 250" in text and "data_batch" in text
        assert "data mix     phase 2 (main) since step 221" in text      # the synthetic hero's own 800 steps
        await pilot.press("end")                                          # the markers close the text: scroll to them
        await pilot.pause(0.2)
        assert "anomaly @250: train/loss spike" in screen_text(app)
        await pilot.press("escape")
        assert type(app.screen).__name__ != "ExplainScreen"
        await pilot.press("n")
        assert app.chart_state.cursor_step == EVENT_STEP
    code, out, err = cli("--db", str(watch_store.path), "explain", "step", str(SPIKE_STEP))
    assert code == 0, err
    assert "train/loss · spike at step 250" in out and "phase 2 (main) since step 221" in out


async def test_explain_failure_stays_in_the_panel(watch_store):
    """A step the run never reached: the panel says why instead of the app failing."""
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        app.explain_step("no-such-run", 5, [])
        await wait_for(pilot, lambda: type(app.screen).__name__ == "ExplainScreen" and "explain" in screen_text(app))
        text = screen_text(app)
        assert "could not explain step 5" in text and "no-such-run" in text
        await pilot.press("escape")
        assert app.is_running


async def test_overlay_toggle_draws_rungs_on_fraction_axis(watch_store):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("o")
        await loaded(pilot, app, 2)
        assert app.view.axis.mode == "fraction"
        assert {o.name for o in app.view.panels[0].overlays} == {"d768", "d1024", "d1536", "d2048"}
        await pilot.press("o")
        await loaded(pilot, app, 3)
        assert app.view.panels[0].overlays == []


async def test_zoom_and_pan_change_the_window(watch_store):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("home", *["right"] * 40)
        centre = app.chart_state.cursor_step
        await pilot.press("plus")
        await loaded(pilot, app, 2)
        assert app.view.hi - app.view.lo == pytest.approx(400, abs=2)
        assert app.view.lo <= centre <= app.view.hi
        lo = app.view.lo
        await pilot.press("right_square_bracket")
        await loaded(pilot, app, 3)
        assert app.view.lo == lo + 100
        await pilot.press("0")
        await loaded(pilot, app, 4)
        assert (app.view.lo, app.view.hi) == (0, 799)


async def test_help_screen_on_question_mark(watch_store):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        assert type(app.screen).__name__ == "HelpScreen"
        assert "explain the step under the cursor" in screen_text(app)


async def test_ui_stays_responsive_while_a_sync_is_slow(watch_store):
    release = threading.Event()
    started = threading.Event()

    def slow_sync(store, targets):
        started.set()
        release.wait(20)
        return {"runs": [], "events_added": 0}

    app = WatchApp("marin", 3600, store=watch_store, sync_fn=slow_sync)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await loaded(pilot, app)
            await wait_for(pilot, started.is_set)
            assert running(app, "sync")
            before = app.chart_state.logy
            t0 = time.monotonic()
            await pilot.press("y")
            await pilot.press("question_mark")
            await pilot.pause(0.05)
            assert app.chart_state.logy is not before
            assert type(app.screen).__name__ == "HelpScreen"
            assert time.monotonic() - t0 < 2.0
            assert running(app, "sync") and not release.is_set()     # the sync is still going
            assert "syncing" in screen_text(app)
            assert "W&B every 3600 s" in screen_text(app)          # the polite poll interval, in the header
            release.set()
            await wait_for(pilot, lambda: not running(app, "sync"))
            await wait_for(pilot, lambda: app._header.synced_at is not None)
    finally:
        release.set()


async def test_sync_failure_is_a_notification_and_offline_header(watch_store):
    def failing(store, targets):
        raise RuntimeFailure("cannot reach api.wandb.ai", "check the network")

    app = WatchApp("marin", 3600, store=watch_store, sync_fn=failing)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await wait_for(pilot, lambda: app._header.offline_since is not None)
        # the header names the time of the store's last sync, even when W&B failed before the first frame
        await wait_for(pilot, lambda: "offline — showing cache from 20" in screen_text(app))
        assert any("cannot reach api.wandb.ai" in str(n.message) for n in app._notifications)
        assert len(app.view.panels) == 8          # the cached view stays up


async def test_watch_holds_the_sync_lock_so_cli_sync_is_told(watch_store):
    from marinctl.store import synclock

    release = threading.Event()
    started = threading.Event()

    def slow_sync(store, targets):
        started.set()
        release.wait(20)
        return {"runs": []}

    app = WatchApp("marin", 3600, store=watch_store, sync_fn=slow_sync)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, started.is_set)
            with pytest.raises(RuntimeFailure) as err:
                with synclock.acquire(watch_store.path, "marin", owner="sync"):
                    pass
            assert "watch (pid" in err.value.message and "marin" in err.value.message
            # readers in "another terminal" still work while watch is up and syncing
            import json
            import subprocess

            out = subprocess.run([sys.executable, "-m", "marinctl", "--db", str(watch_store.path), "runs", "--json"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert len(json.loads(out.stdout)) == 7
            release.set()
            await wait_for(pilot, lambda: not running(app, "sync"))
        with synclock.acquire(watch_store.path, "marin", owner="sync"):
            pass
    finally:
        release.set()


async def test_bad_regex_is_a_notification(watch_store):
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("slash", "(", "enter")
        await pilot.pause(0.2)
        assert any("bad regex" in str(n.message) for n in app._notifications)
        assert app.view.params.pattern is None


@pytest.mark.slow
async def test_watch_a_local_wandb_dir_end_to_end(store, tmp_path):
    """The `demo` path: a real offline wandb run (SDK in a subprocess), synced by watch itself."""
    from tests.test_wandb_local import write_runs

    logged = write_runs(tmp_path / "runs", steps=120, runs=1)
    run_id = next(iter(logged))
    app = WatchApp(str(tmp_path / "runs" / "wandb"), 1.0, store=store)
    async with app.run_test(size=SIZE) as pilot:
        await wait_for(pilot, lambda: app.view is not None and app.view.panels and app._header.synced_at is not None,
                       timeout=60)
        await wait_for(pilot, lambda: not running(app, "load"))
        keys = [p.key for p in app.view.panels]
        assert keys[:2] == ["train/loss", "grad/norm/total"]
        assert app.view.full_hi == 119
        assert run_id in screen_text(app)


async def test_ctrl_c_quits_even_from_the_help_screen(watch_store):
    """`demo` relies on Ctrl-C ending watch (Textual's default only hints at ctrl+q)."""
    app = WatchApp("hero", 30, store=watch_store, autosync=False)
    async with app.run_test(size=SIZE) as pilot:
        await loaded(pilot, app)
        await pilot.press("question_mark")
        await pilot.pause(0.1)
        await pilot.press("ctrl+c")
        await pilot.pause(0.2)
        assert not app.is_running


async def test_the_first_frame_does_not_wait_for_a_helper_holding_the_store(watch_store):
    """While the first-read helper catches a file up it may hold the store; the readout's values the
    envelopes cannot tell (keys logged every 10 steps) are then shown as '…' instead of waiting for
    the store (up to lock_timeout, 15 s) before the first chart. Here another process holds it."""
    import subprocess
    from dataclasses import replace as dc_replace

    from marinctl.views.watch_view import ViewParams, build_view
    from marinctl.tui.first_read import bucket_guess

    class HelperStillReading:
        def __init__(self, view):
            self.view = view

        def listen(self, listener):
            pass

        def take(self, params):
            view, self.view = self.view, None
            return view

        def take_keys(self, ref):
            return None

        def take_frames(self, view, job):
            return None

        def wait_done(self, timeout=None):
            return False

        def retire(self):
            pass

        def stop(self):
            pass

    params = ViewParams(ref="hero", buckets=bucket_guess(SIZE[0]))
    view = build_view(watch_store, params)
    cursor = view.hi - 3          # not a bucket's end: only keys logged every 10 steps are told by the envelopes
    assert [p.key for p in view.panels if p.key not in view.readout(cursor)], "every key read from envelopes"
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb,time; c=duckdb.connect({str(watch_store.path)!r});"
                               " print('ok', flush=True); time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        app = WatchApp("hero", 30, store=watch_store, autosync=False, plan=("hero", []),
                       first_read=HelperStillReading(view))
        app.chart_state = dc_replace(app.chart_state, cursor_step=cursor)
        started = time.monotonic()
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: app.view is not None and app.refreshes >= 1, timeout=10)
            await wait_for(pilot, lambda: "train/loss" in screen_text(app), timeout=5)
            assert time.monotonic() - started < 10
    finally:
        holder.kill()
        holder.wait()
