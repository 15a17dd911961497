"""The watch TUI driven by Textual's Pilot on a real DuckDB file of SYNTHETIC runs.

Covers keys, the `/` filter, cursor movement and readout, the explain panel on `e`,
overlay toggles, log-y, a slow sync that must not block keys, sync failures as
notifications, and the advisory sync lock shared with `marinctl sync`.
"""

from __future__ import annotations

import re
import sys
import threading

import pytest

from marinctl.errors import RuntimeFailure, Unreachable
from marinctl.tui.app import WatchApp
from marinctl.tui.options import WatchOptions
from marinctl.tui.widgets.chart import MetricChart
from tests.tui_store import EVENT_STEP, SPIKE_STEP
from tests.watch_pilot import settle, until, wait_for_text

SIZE = (150, 48)
pytestmark = pytest.mark.asyncio


def run_test(app):
    """The screen a person sees at SIZE, toasts included."""
    return app.run_test(size=SIZE, notifications=True)


async def loaded(pilot) -> str:
    """The first view with the run's key list in (the page count is known), settled."""
    await wait_for_text(pilot, "▏step", " keys")
    return await settle(pilot)


def running(app, group):
    return any(w.group == group and w.is_running for w in app.workers)


def view_line(text: str) -> str:
    return next((line for line in text.splitlines() if "smoothing:" in line), "")


def readout(text: str) -> str:
    return next((line for line in text.splitlines() if "▏step" in line), "")


def cursor(text: str) -> int | None:
    m = re.search(r"▏step ([\d,]+)", readout(text))
    return int(m.group(1).replace(",", "")) if m else None


def window(text: str) -> tuple[int, int] | None:
    m = re.search(r"steps ([\d,]+)–([\d,]+)", view_line(text))
    return (int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))) if m else None


def charts(app) -> list[MetricChart]:
    return list(app.query(MetricChart))


async def test_first_frame_shows_default_panels_header_and_sidebar(watch_store):
    app = WatchApp(WatchOptions(None, 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        text = await loaded(pilot)
        first = ["train/loss", "eval/paloma/macro_loss", "grad/norm/total", "params/norm/total"]
        titles = [line for line in text.splitlines() if any(f"{k}  " in line for k in first)]
        assert [k for line in titles for k in first if f"{k}  " in line] == first, titles   # row by row
        assert "step 799 / 800" in text
        assert "hero (stitched)" in text and "rung1 d768" in text


@pytest.mark.parametrize("size,cols", [(SIZE, 2), ((151, 47), 3), ((97, 40), 1), ((160, 50), 4)])
async def test_first_frames_are_built_in_the_worker_at_the_size_the_grid_gives(watch_store, monkeypatch, size, cols):
    """The worker guesses each chart's size before the charts exist (Textual's grid gives the
    later columns the spare cells); a wrong guess made the UI thread build every chart again
    before the first chart could be shown."""
    from marinctl.tui import settings
    from tests.watch_pilot import frames_built, on_ui

    settings.save(watch_store.settings_key, settings.Layout(cols=cols))
    built = frames_built(monkeypatch)
    app = WatchApp(WatchOptions(None, 30, autosync=False), store=watch_store)
    async with app.run_test(size=size) as pilot:
        await loaded(pilot)
        shown = charts(app)
        assert shown and all(c.frame is not None for c in shown)
        assert [(c.key, c.frame.size) for c in shown] == [(c.key, (c.size.width, c.size.height)) for c in shown]
        assert on_ui(built) == [], f"built again on the UI thread: {on_ui(built)}"


async def test_a_read_that_changes_nothing_draws_no_chart_again(watch_store, monkeypatch):
    """Once the key list is in, the view is read again (for the page count); charts whose picture did
    not change keep their frames. Before, every chart was drawn again (while a person starts pressing
    keys), and at hero scale also whenever DuckDB's parallel bucket sums differed in the last bit
    between two reads of the same rows."""
    from tests.watch_pilot import frames_built

    built = frames_built(monkeypatch)
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)             # the key list's read came after the first view's
        shown = [c for c in charts(app) if c.frame is not None]
        assert len(shown) >= 8, len(shown)
        assert sorted((key, size) for key, size, _ in built) == sorted((c.key, c.frame.size) for c in shown)


async def test_keys_toggle_logy_smoothing_and_x_axis(watch_store):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        text = await loaded(pilot)
        assert "log-y: off" in view_line(text) and "smoothing: ema" in view_line(text) and "x: step" in view_line(text)
        await pilot.press("y")
        await until(pilot, lambda t: "log-y: on" in view_line(t), "y turns log-y on")
        await pilot.press("s")
        await until(pilot, lambda t: "smoothing: debiased" in view_line(t), "s: the next smoothing")
        await pilot.press("x")
        text = await until(pilot, lambda t: "x: tokens" in view_line(t), "x: the tokens axis")
        assert "log-y: on" in view_line(text)


async def test_slash_filter_over_all_keys_and_escape_clears(watch_store):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("slash")
        await pilot.press(*"drop_fraction|layer_0/routing_entropy")
        await pilot.press("enter")
        text = await until(pilot, lambda t: "2 of " in view_line(t), "the filter matches two keys")
        text = await settle(pilot)
        shown = sorted(c.key for c in charts(app))
        assert shown == ["moe/drop_fraction", "train/router/layer_0/routing_entropy"]
        assert all(f"{k}  " in text for k in shown)
        await pilot.press("escape")
        text = await until(pilot, lambda t: "filter" not in view_line(t) and "▾ overview (8 keys)" in t,
                           "escape clears the filter")
        assert "moe/drop_fraction  " in text and "train/loss  " in text


async def test_cursor_moves_by_buckets_and_reads_out_values(watch_store):
    """The cursor steps a bucket at a time, lands on bucket ends and reads the value logged there,
    with its bucket's [min…max] beside it: checked against what the store holds for train/loss
    (logged every step of the SYNTHETIC hero)."""
    from marinctl import numbers as N
    from marinctl.store import metrics as M
    from marinctl.store.lineage import resolve_target

    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("home")
        await until(pilot, lambda t: cursor(t) == 0, "home puts the cursor on step 0")
        ends = []
        for _ in range(3):
            await pilot.press("right")
            text = await until(pilot, lambda t, n=len(ends): (cursor(t) or 0) > (ends[-1] if ends else 0),
                               "→ moves the cursor on")
            ends.append(cursor(text))
        widths = [b - a for a, b in zip(ends, ends[1:])]
        assert abs(widths[0] - widths[1]) <= 1 and widths[0] > 1, ends       # one bucket each
        text = await settle(pilot)
        with watch_store.connect() as con:
            steps, values = M.series(con, resolve_target(con, "hero", stitched=True).segments, "train/loss",
                                     lo=ends[1] + 1, hi=ends[2] + 1)
        assert list(steps) == list(range(ends[1] + 1, ends[2] + 1))         # the cursor's bucket
        shown = f"{N.sig(values[-1])} [{N.sig(min(values))}…{N.sig(max(values))}]"
        assert f"loss {shown}" in readout(text), readout(text)            # the value at the step, its envelope
        assert f"train/loss  {N.sig(values[-1])}" in text                  # the chart's title says the same value


async def test_n_jumps_to_marker_and_e_opens_explain_for_it(watch_store, cli):
    """`e` on the anomaly marker shows what `marinctl explain step N` prints for that step."""
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("home", "n")
        await until(pilot, lambda t: cursor(t) == SPIKE_STEP, "n: the anomaly marker")
        await pilot.press("e")
        text = await until(pilot, lambda t: "explain step" in t, "e opens the explain panel")
        assert f"explain step {SPIKE_STEP} · hero" in text
        assert "train/loss · spike at step 250" in text and "data_batch" in text
        assert "data mix     phase 2 (main) since step 221" in text      # the synthetic hero's own 800 steps
        await pilot.press("end")                                          # the markers close the text: scroll to them
        await until(pilot, lambda t: "anomaly @250: train/loss spike" in t, "the markers near the step")
        await pilot.press("escape")
        await until(pilot, lambda t: "explain step" not in t, "escape closes the panel")
        await pilot.press("n")
        await until(pilot, lambda t: cursor(t) == EVENT_STEP, "n: the GitHub event marker")
    code, out, err = cli("--db", str(watch_store.path), "explain", "step", str(SPIKE_STEP))
    assert code == 0, err
    assert "train/loss · spike at step 250" in out and "phase 2 (main) since step 221" in out


async def test_explain_failure_stays_in_the_panel(watch_store, monkeypatch):
    """Explaining fails (here: SYNTHETIC, the explain function raises): the panel says why instead
    of the app failing, and the screen goes on."""
    from marinctl.analysis.explain import explain as explain_module

    def broken(con, target, step):
        raise RuntimeError(f"synthetic failure at step {step}")

    monkeypatch.setattr(explain_module, "explain", broken)
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("home", "e")
        text = await until(pilot, lambda t: "could not explain step 0" in t, "the panel says why")
        assert "synthetic failure at step 0" in text
        await pilot.press("escape")
        await until(pilot, lambda t: "could not explain" not in t, "escape closes the panel")
        assert app.is_running


async def test_overlay_toggle_draws_rungs_on_fraction_axis(watch_store):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("o")
        text = await until(pilot, lambda t: "overlays on" in view_line(t) and "━ d768" in t, "o: overlays")
        assert "x: fraction" in view_line(text)
        legend = next(line for line in text.splitlines() if "━ d768" in line)
        assert all(f"━ {name}" in legend for name in ("d768", "d1024", "d1536", "d2048")), legend
        await pilot.press("o")
        await until(pilot, lambda t: "overlays on" not in view_line(t) and "━ d768" not in t, "o again: off")


async def test_zoom_and_pan_change_the_window(watch_store):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("home", *["right"] * 40)
        text = await until(pilot, lambda t: (cursor(t) or 0) > 200, "→ ×40 moves the cursor")
        centre = cursor(text)
        await pilot.press("plus")
        lo, hi = window(await until(pilot, lambda t: window(t) is not None, "+ zooms in"))
        assert hi - lo == pytest.approx(400, abs=2)                   # half of the 800 steps
        assert lo <= centre <= hi
        await pilot.press("right_square_bracket")
        await until(pilot, lambda t: window(t) == (lo + 100, hi + 100), "] pans a quarter to the right")
        await pilot.press("0")
        await until(pilot, lambda t: "full range" in view_line(t), "0 resets the zoom")


async def test_help_screen_on_question_mark(watch_store):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda t: "explain the step under the cursor" in t, "? opens the help")


async def test_ui_stays_responsive_while_a_sync_is_slow(watch_store):
    """Keys act while a sync is blocked in its worker: the screen answers them before it ends."""
    release = threading.Event()
    started = threading.Event()

    def slow_sync(store, targets):
        started.set()
        release.wait(60)
        return {"runs": [], "events_added": 0}

    app = WatchApp(WatchOptions("marin", 3600, sync_fn=slow_sync), store=watch_store)
    try:
        async with run_test(app) as pilot:
            await loaded(pilot)
            await until(pilot, lambda t: started.is_set(), "the sync starts")
            await pilot.press("y")
            await until(pilot, lambda t: "log-y: on" in view_line(t), "y acts while the sync runs")
            await pilot.press("question_mark")
            text = await until(pilot, lambda t: "marinctl watch — keys" in t, "? acts while the sync runs")
            assert running(app, "sync") and not release.is_set()     # the sync is still going
            assert "syncing" in text and "W&B every 3600 s" in text   # the polite poll interval, in the header
            release.set()
            await pilot.press("escape")
            await until(pilot, lambda t: re.search(r"synced \d+ s ago", t), "the sync ends")
    finally:
        release.set()


async def test_sync_failure_is_a_notification_and_offline_header(watch_store):
    def failing(store, targets):
        raise Unreachable("W&B at https://api.wandb.ai kept failing (cannot connect)", "check the network")

    app = WatchApp(WatchOptions("marin", 3600, sync_fn=failing), store=watch_store)
    async with run_test(app) as pilot:
        # the header names the time of the store's last sync, even when W&B failed before the first frame
        await until(pilot, lambda t: "offline — showing cache from 20" in t and "kept failing (cannot connect)" in t,
                    "the failure as a toast, the header offline")
        await until(pilot, lambda t: "▾ overview (8 keys)" in t and re.search(r"train/loss  \d", t),
                    "the cached view stays up")


async def test_a_failure_that_is_not_the_network_is_not_called_offline(watch_store):
    """Offline is the source's error class (`Unreachable`), not the wording: W&B refusing a key is a
    toast, and the header does not say offline."""
    def refused(store, targets):
        raise RuntimeFailure("W&B answered HTTP 401 at https://api.wandb.ai/graphql (cannot reach the run)")

    app = WatchApp(WatchOptions("marin", 3600, sync_fn=refused), store=watch_store)
    async with run_test(app) as pilot:
        text = await until(pilot, lambda t: "HTTP 401" in t and "▾ overview (8 keys)" in t, "the failure as a toast")
        assert "offline" not in text, text


async def test_watch_holds_the_sync_lock_so_cli_sync_is_told(watch_store):
    from marinctl.store import synclock

    release = threading.Event()
    started = threading.Event()

    def slow_sync(store, targets):
        started.set()
        release.wait(20)
        return {"runs": []}

    app = WatchApp(WatchOptions("marin", 3600, sync_fn=slow_sync), store=watch_store)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda t: started.is_set(), "the sync starts")
            with pytest.raises(RuntimeFailure) as err:
                with synclock.acquire(watch_store, "marin", owner="sync"):
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
            await until(pilot, lambda t: not running(app, "sync"), "the sync ends")
        with synclock.acquire(watch_store, "marin", owner="sync"):
            pass
    finally:
        release.set()


async def test_bad_regex_is_a_notification(watch_store):
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("slash", "(", "enter")
        text = await until(pilot, lambda t: "bad regex" in t, "a bad regex is said")
        assert "filter /" not in view_line(text)                          # and not applied


@pytest.mark.slow
async def test_watch_a_local_wandb_dir_end_to_end(store, tmp_path):
    """The `demo` path: a real offline wandb run (SDK in a subprocess), synced by watch itself."""
    from tests.test_wandb_local import write_runs

    logged = write_runs(tmp_path / "runs", steps=120, runs=1)
    run_id = next(iter(logged))
    app = WatchApp(WatchOptions(str(tmp_path / "runs" / "wandb"), 1.0), store=store)
    async with run_test(app) as pilot:
        text = await until(pilot, lambda t: run_id in t and "▏step 119" in t and "updated" in t
                           and re.search(r"train/loss  \S.*grad/norm/total  \S", t), "the run read, followed and drawn",
                           timeout=60)
        titles = [line for line in text.splitlines() if "train/loss  " in line or "grad/norm/total  " in line]
        assert titles and titles[0].index("train/loss") < titles[0].index("grad/norm/total"), titles


async def test_ctrl_c_quits_even_from_the_help_screen(watch_store):
    """`demo` relies on Ctrl-C ending watch (Textual's default only hints at ctrl+q)."""
    app = WatchApp(WatchOptions("hero", 30, autosync=False), store=watch_store)
    async with run_test(app) as pilot:
        await loaded(pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda t: "marinctl watch — keys" in t, "? opens the help")
        await pilot.press("ctrl+c")
        await pilot.pause(0.2)
        assert not app.is_running


async def test_the_first_frame_does_not_wait_for_a_helper_holding_the_store(watch_store):
    """While the first-read helper catches a file up it may hold the store; the readout's values the
    envelopes cannot tell (keys logged every 10 steps) are then shown as '…' instead of waiting for
    the store. Here another process holds it for the whole test, and the app's store would wait
    for it 600 s: the first frame comes with '…' long before."""
    import subprocess

    from marinctl.store import Store
    from marinctl.views.watch_view import ViewParams, build_view
    from marinctl.tui.first_read_work import bucket_guess

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

    view = build_view(watch_store, ViewParams(ref="hero", buckets=bucket_guess(SIZE[0])))
    # at the first step, inside the first bucket, the envelopes cannot tell what was logged
    assert [p.key for p in view.panels if p.key not in view.readout(view.lo)], "every key read from envelopes"
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb,time; c=duckdb.connect({str(watch_store.path)!r});"
                               " print('ok', flush=True); time.sleep(600)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ok"
        app = WatchApp(WatchOptions("hero", 30, autosync=False, plan=("hero", []), first_read=HelperStillReading(view)), store=Store(watch_store.path, lock_timeout=600))
        async with run_test(app) as pilot:
            await until(pilot, lambda t: re.search(r"train/loss  \d", t), "the first frame", timeout=60)
            await pilot.press("home")
            # the frames for the new cursor are drawn without the store: the loss chart's title has
            # no value to show (a read waiting for the store would leave the old frames up)
            text = await until(pilot, lambda t: cursor(t) == 0 and not re.search(r"train/loss  \d", t),
                               "frames at step 0", timeout=60)
            assert re.search(r"loss …", readout(text)), readout(text)
            assert holder.poll() is None                          # the store was held all along
            holder.kill()                                          # (the key list's read waits for it)
            holder.wait()
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("first", [0, 1])
async def test_a_finished_run_reads_every_step_done_and_its_tokens(store, first):
    """A finished SYNTHETIC 60-step run (as `marinctl demo` trains one) that logged no token count:
    the header reads 100% and 60 steps' tokens (it read 59 / 60 (98.3%) and 59 steps' worth), and
    the run pane 60 of 60 steps; counting its steps from 0 or, as some trainers do, from 1."""
    from marinctl import numbers as N
    from marinctl.domain import RunInfo
    from marinctl.store.runs import upsert_run

    steps, batch, seq = 60, 4, 16
    last = first + steps - 1
    config = {"trainer": {"num_train_steps": steps, "train_batch_size": batch}, "model": {"seq_len": seq}}
    with store.transaction() as con:
        pk = upsert_run(con, RunInfo(source="local", run_id="finished-synthetic", name="finished-synthetic",
                                     state="finished", config=config))
        con.execute("INSERT INTO metric_keys (key) VALUES ('train/loss')")
        con.execute(f"INSERT INTO metrics SELECT ?, 1, s, 5.0 - s / 50 FROM range({first}, {last + 1}) t(s)", [pk])
        con.execute("UPDATE runs SET last_step = ? WHERE run_pk = ?", [last, pk])
    app = WatchApp(WatchOptions("finished-synthetic", 30, autosync=False), store=store)
    async with run_test(app) as pilot:
        text = await loaded(pilot)
        assert f"step {last} / {steps} (100.0%)" in text, text
        assert f"tokens {N.si(steps * batch * seq)}" in text, text
        await pilot.press("i")
        text = await until(pilot, lambda t: "Config (" in t, "i opens the run pane")
        assert re.search(rf"steps\s+{steps} of {steps}\b", text), text
