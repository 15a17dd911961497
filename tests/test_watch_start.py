"""`marinctl watch` started as a person starts it: the real CLI in a real terminal (a pty).

The first view is planned and read, and a local run never synced is caught up, by a helper
process forked before Textual is imported (tui/first_read.py); the app's follower tails on from
where the helper stopped. These tests hold what a person relies on: the run is on screen, every
logged value ends up stored exactly once (helper and follower split the file between them), `q`
leaves no process behind, and a watch killed while the helper is reading loses nothing a later
`sync` cannot finish. The run is SYNTHETIC, written by the real wandb SDK.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import textwrap
import time
from pathlib import Path

import pytest

from tests.blackbox import ROOT, assert_same_values, logged_values, sdk_env, sdk_write, strict_json

STEPS = 3000


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> tuple[Path, dict]:
    """A finished offline run of 3,000 steps × 12 keys (~3 MB: the helper reads it in several windows)."""
    out = tmp_path_factory.mktemp("start-run")
    logged = sdk_write(out, f'''
        run = wandb.init(mode="offline", dir=out, id="start-synthetic", settings=S(),
                         config={{"synthetic": True, "num_train_steps": {STEPS}}})
        rows = []
        for s in range({STEPS}):
            row = {{"train/loss": 8.0 / (1 + s / 300), "grad/norm/total": 1.0 + (s % 97) / 97,
                   "optim/learning_rate": 3e-3 * min(1, s / 30)}}
            row.update({{f"synthetic/k{{i}}": math.sin(s / 50 + i) for i in range(9)}})
            run.log(row, step=s)
            rows.append({{"_step": s, **row}})
        run.finish()
        logged["rows"] = rows
    ''')
    return out / "wandb", logged


def _env(home: Path) -> dict[str, str]:
    return {**sdk_env(), "MARINCTL_HOME": str(home), "TERM": "xterm-256color"}


class Terminal:
    """`marinctl ARGS` on a pty of 160×50, its own session (so the whole group can be killed)."""

    def __init__(self, args: list[str], home: Path) -> None:
        self.main, secondary = pty.openpty()
        fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
        self.proc = subprocess.Popen([sys.executable, "-m", "marinctl", *args], stdin=secondary, stdout=secondary,
                                     stderr=secondary, cwd=ROOT, env=_env(home), start_new_session=True)
        os.close(secondary)
        self.seen = b""

    def read_until(self, needle: bytes, timeout: float = 60.0) -> bool:
        deadline = time.monotonic() + timeout
        while needle not in self.seen and time.monotonic() < deadline:
            ready, _, _ = select.select([self.main], [], [], 0.1)
            if ready:
                try:
                    self.seen += os.read(self.main, 65536)
                except OSError:
                    break
        return needle in self.seen

    def press(self, key: bytes) -> None:
        os.write(self.main, key)

    def drain_until_exit(self, timeout: float = 30.0) -> int | None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.read_until(b"\x00never", timeout=0.2)
        return self.proc.poll()

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)
        os.close(self.main)


def _group_alive(pgid: int) -> list[int]:
    """Processes still in the process group `pgid` (the watch's session)."""
    alive = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(entry.name))
    return alive


def _gone(pgid: int, timeout: float = 10.0) -> list[int]:
    """Wait for the group to be empty; the processes still in it after `timeout`."""
    deadline = time.monotonic() + timeout
    while _group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return _group_alive(pgid)


def _stored_values(home: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "marinctl", "export", "start-synthetic"], capture_output=True,
                         text=True, cwd=ROOT, env=_env(home), timeout=120)
    assert out.returncode == 0, out.stderr
    got = {}
    for line in out.stdout.splitlines()[1:]:
        step, key, value = line.split(",")
        if not key.startswith("_"):
            assert (int(step), key) not in got, f"duplicate row {step} {key}"
            got[(int(step), key)] = float(value)
    return got


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper process needs fork")
def test_watch_on_a_run_never_synced_shows_it_stores_it_once_and_q_leaves_nothing(run_dir, tmp_path):
    wandb_dir, logged = run_dir
    home = tmp_path / "home"
    term = Terminal(["watch", str(wandb_dir)], home)
    try:
        # a narrow chart's title keeps the key's end ("…norm/total"): which width the grid gives depends on
        # whether the helper or the app drew the first page
        assert term.read_until(b"norm/total"), term.seen[-2000:].decode(errors="replace")
        assert term.read_until(f"{STEPS - 1:,} / {STEPS:,}".encode()), "the last step never reached the header"
        # the helper lists the run's keys with its view: no frame waits on a second read for the page count
        assert "page 1/…".encode() not in term.seen and re.search(rb"page 1/\d", term.seen)
        term.press(b"q")
        assert term.drain_until_exit() == 0
        assert _gone(term.proc.pid) == [], "a process of the watch outlived it"
    finally:
        term.close()
    assert_same_values(_stored_values(home), logged_values(logged["rows"]))
    runs = strict_json(subprocess.run([sys.executable, "-m", "marinctl", "runs", "--json"], capture_output=True,
                                      text=True, cwd=ROOT, env=_env(home), timeout=120).stdout)
    assert [r["last_step"] for r in runs] == [STEPS - 1]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper process needs fork")
@pytest.mark.parametrize("after_s", [0.3, 0.9])
def test_watch_killed_while_the_helper_reads_loses_nothing(run_dir, tmp_path, after_s):
    """SIGKILL to the whole watch (app and helper) early in the read; `sync` then finishes the
    run with every logged value once: each window was committed with its file position."""
    wandb_dir, logged = run_dir
    home = tmp_path / "home"
    term = Terminal(["watch", str(wandb_dir)], home)
    try:
        time.sleep(after_s)
    finally:
        term.close()
    assert _gone(term.proc.pid) == []
    sync = subprocess.run([sys.executable, "-m", "marinctl", "sync", str(wandb_dir)], capture_output=True, text=True,
                          cwd=ROOT, env=_env(home), timeout=120)
    assert sync.returncode == 0, sync.stderr
    assert_same_values(_stored_values(home), logged_values(logged["rows"]))


def _first_read_in_a_fresh_process(wandb_dir: Path, home: Path, body: str, timeout: float = 90):
    """`body` run in a new interpreter (one thread, as the CLI is when it forks), with `Store`,
    `first_read`, `wandb_dir` and `home` defined. The helper is never forked from this test
    runner: it has threads, and a fork copies the locks they hold."""
    script = textwrap.dedent('''
        import os, sys, time
        from marinctl.store import Store
        from marinctl.tui import first_read, first_read_work
        wandb_dir, home = sys.argv[1], sys.argv[2]
    ''') + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script, str(wandb_dir), str(home)], capture_output=True, text=True,
                          cwd=ROOT, env=_env(home), timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper process needs fork")
def test_the_helper_never_writes_to_the_terminal(run_dir, tmp_path):
    """Whatever the helper would print (a library's warning) goes nowhere: the terminal is the app's."""
    wandb_dir, _ = run_dir
    done = _first_read_in_a_fresh_process(wandb_dir, tmp_path / "home", '''
        def noisy(*args, **kwargs):
            print("helper stdout", flush=True)
            print("helper stderr", file=sys.stderr, flush=True)
            os.write(2, b"helper fd 2\\n")
            return first_read_work.plan_and_read(*args, **kwargs)
        early = first_read.FirstRead(Store(os.path.join(home, "marinctl.duckdb")), wandb_dir, work=noisy)
        assert early._pid is not None, "no helper forked"
        assert early.plan()[1] == [wandb_dir]
        assert early.wait_done(60)
        print("planned by the helper")
    ''')
    assert done.returncode == 0, done.stderr
    assert done.stdout == "planned by the helper\n" and done.stderr == "", (done.stdout, done.stderr)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper process needs fork")
def test_a_helper_that_never_answers_does_not_hold_the_watch(run_dir, tmp_path):
    """A helper stuck before its plan (as one forked with a lock held would be) is killed after
    HELPER_WAIT_S and the plan and first view are made here; before, `plan()` waited for ever."""
    wandb_dir, _ = run_dir
    done = _first_read_in_a_fresh_process(wandb_dir, tmp_path / "home", '''
        first_read.HELPER_WAIT_S = 1.0
        early = first_read.FirstRead(Store(os.path.join(home, "marinctl.duckdb")), wandb_dir,
                                     work=lambda *a, **k: time.sleep(600))     # only the helper calls it
        pid = early._pid
        assert pid is not None, "no helper forked"
        plan = early.plan()
        assert plan[1] == [wandb_dir], plan
        assert early.wait_done(1), "the stuck helper was not reaped"
        try:
            os.kill(pid, 0)
            raise AssertionError("the stuck helper still runs")
        except ProcessLookupError:
            pass
        print("planned here")
    ''', timeout=60)                 # the stuck helper would sleep 600 s: planning here ended first
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "planned here", done.stdout


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper process needs fork")
def test_the_first_view_does_not_wait_for_the_key_list(run_dir, tmp_path):
    """Listing a run's keys (for paging and the filter) scans every stored row (seconds at hero
    scale), and the first chart waited for it. For a long run the helper sends the first view, then
    the key list, which the app's keys worker takes. Here listing waits until the view has been
    taken (a file says so), and the run is counted as long: a view that waited for the list would
    not come before the helper is given up on."""
    wandb_dir, _ = run_dir
    home = tmp_path / "home"
    synced = subprocess.run([sys.executable, "-m", "marinctl", "sync", str(wandb_dir)], capture_output=True, text=True,
                            cwd=ROOT, env=_env(home), timeout=120)
    assert synced.returncode == 0, synced.stderr
    done = _first_read_in_a_fresh_process(wandb_dir, home, '''
        from dataclasses import replace
        os.environ["OPENBLAS_NUM_THREADS"] = "1"       # as the CLI sets it: numpy's import then starts no thread
        from marinctl.store import series
        from marinctl.tui import settings
        viewed = os.path.join(home, "viewed")
        real = series.keys_of
        def after_the_view(con, run_pks):             # (in the helper) until the app has the view
            deadline = time.monotonic() + 60
            while not os.path.exists(viewed) and time.monotonic() < deadline:
                time.sleep(0.01)
            return real(con, run_pks)
        series.keys_of = after_the_view
        first_read_work.KEYS_INLINE_STEPS = 0          # as for a long run: its key list follows its view
        first_read.HELPER_WAIT_S = 20.0       # a view that waited for the list would not come in time
        store = Store(os.path.join(home, "marinctl.duckdb"))
        early = first_read.FirstRead(store, wandb_dir)
        assert early._pid is not None, "no helper forked"
        ref, _ = early.plan()
        params = replace(first_read_work.params_for(settings.load(store.settings_key), ref),
                         buckets=first_read_work.bucket_guess(first_read.terminal_size()[0]))
        view = early.take(params)
        assert view is not None and view.error is None and "train/loss" in [p.key for p in view.panels], view
        open(viewed, "w").close()
        keys = early.take_keys(view.ref)
        print(" ".join(keys or []))
        assert early.wait_done(60)
    ''')
    assert done.returncode == 0, done.stderr
    keys = done.stdout.split()
    logged = {"train/loss", "grad/norm/total", "optim/learning_rate", *(f"synthetic/k{i}" for i in range(9))}
    assert logged <= set(keys) and keys == sorted(keys), keys


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper process needs fork")
def test_a_short_run_s_key_list_does_not_wait_for_the_helper_s_frames(run_dir, tmp_path):
    """A short run's key list comes with its view; the helper then draws the first page's frames.
    The app's keys worker (the page count, the filter) waited for those frames too: the list was
    sent after them. Here drawing waits until the list has been taken (a file says so)."""
    wandb_dir, _ = run_dir
    home = tmp_path / "home"
    synced = subprocess.run([sys.executable, "-m", "marinctl", "sync", str(wandb_dir)], capture_output=True, text=True,
                            cwd=ROOT, env=_env(home), timeout=120)
    assert synced.returncode == 0, synced.stderr
    done = _first_read_in_a_fresh_process(wandb_dir, home, '''
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        from marinctl.tui import frames
        keyed = os.path.join(home, "keyed")
        real = frames.page_size_guess          # called once the helper has said it draws
        def after_the_keys(*args, **kwargs):
            deadline = time.monotonic() + 60
            while not os.path.exists(keyed) and time.monotonic() < deadline:
                time.sleep(0.01)
            return real(*args, **kwargs)
        frames.page_size_guess = after_the_keys
        first_read.HELPER_WAIT_S = 20.0        # a list sent after the frames would not come in time
        store = Store(os.path.join(home, "marinctl.duckdb"))
        early = first_read.FirstRead(store, wandb_dir)
        assert early._pid is not None, "no helper forked"
        ref, _ = early.plan()
        keys = early.take_keys(ref)
        assert early._drawing.wait(60) and not early._drawn.is_set(), "the frames were not being drawn"
        open(keyed, "w").close()
        print(" ".join(keys or []))
        early.stop()
    ''')
    assert done.returncode == 0, done.stderr
    keys = done.stdout.split()
    assert {"train/loss", "grad/norm/total", "optim/learning_rate"} <= set(keys), keys


def test_a_process_with_threads_reads_the_first_view_itself(run_dir, tmp_path, monkeypatch):
    """FirstRead forks only a single-threaded process; in one with threads (this test runner, a
    library caller) it plans and reads in a thread instead, and never forks."""
    import threading

    from marinctl.store import Store
    from marinctl.tui import first_read

    def no_fork():
        raise AssertionError("forked a process with threads")

    wandb_dir, _ = run_dir
    monkeypatch.setattr(os, "fork", no_fork)
    monkeypatch.setenv("MARINCTL_HOME", str(tmp_path / "home"))
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, daemon=True)
    other.start()
    try:
        early = first_read.FirstRead(Store(tmp_path / "home" / "marinctl.duckdb"), str(wandb_dir))
        assert early.plan()[1] == [str(wandb_dir)]
        assert early.wait_done(60)
    finally:
        stop.set()
    assert early._pid is None


@pytest.mark.asyncio
async def test_a_key_charted_twice_gets_a_frame_for_each_size(run_dir, tmp_path, monkeypatch):
    """`grad/norm/total` is in the overview (second column) and in its own section (first column):
    two charts, two widths. Frames were handed out by key, so one of them was built again on the
    UI thread at every paint (~0.1 s before the first chart of this run showed, and at each
    cursor move after)."""
    from marinctl.store import Store
    from marinctl.sync.local import sync_path
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions
    from marinctl.tui.widgets.chart import MetricChart
    from tests.watch_pilot import frames_built, on_ui, settle, wait_for_text

    wandb_dir, _ = run_dir
    store = Store(tmp_path / "home" / "marinctl.duckdb")
    sync_path(store, wandb_dir)
    built = frames_built(monkeypatch)
    app = WatchApp(WatchOptions("start-synthetic", 30, autosync=False), store=store)
    async with app.run_test(size=(160, 50)) as pilot:
        await wait_for_text(pilot, " keys", "▏step")               # the view read again with the key list
        await settle(pilot)
        twice = [c for c in app.query(MetricChart) if c.key == "grad/norm/total"]
        assert len(twice) == 2 and twice[0].size != twice[1].size, [(c.slot, c.size) for c in twice]
        assert [c.frame.size for c in twice] == [(c.size.width, c.size.height) for c in twice]
        await pilot.press("right")                 # a cursor move paints every chart again
        await pilot.pause(0.5)
    assert on_ui(built) == [], f"built on the UI thread: {on_ui(built)}"


@pytest.mark.asyncio
async def test_the_collector_paused_for_the_start_runs_again_from_the_first_paint(run_dir, tmp_path, monkeypatch):
    """`watch` pauses Python's cycle collector while it starts (tui/startup.py); the first paint
    starts it again, or the app would run with it off for good (cycles never freed)."""
    import gc

    from marinctl.store import Store
    from marinctl.sync.local import sync_path
    from marinctl.tui import startup
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions
    from tests.watch_pilot import wait_for_text

    wandb_dir, _ = run_dir
    store = Store(tmp_path / "home" / "marinctl.duckdb")
    sync_path(store, wandb_dir)
    monkeypatch.setattr(startup, "RESUME_AFTER_S", 600.0)     # only the first paint may start it again
    startup.pause()
    try:
        assert not gc.isenabled()
        app = WatchApp(WatchOptions("start-synthetic", 30, autosync=False), store=store)
        async with app.run_test(size=(160, 50)) as pilot:
            await wait_for_text(pilot, "train/loss  ")             # the first paint
            deadline = time.monotonic() + 30
            while not gc.isenabled() and time.monotonic() < deadline:
                await pilot.pause(0.05)
            assert gc.isenabled(), "still paused after the first paint"
    finally:
        startup.resume()
        gc.enable()
        gc.unfreeze()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the helper process needs fork")
def test_the_helper_draws_the_first_page_and_the_app_shows_its_frames(run_dir, tmp_path):
    """The helper draws the first page's frames while the app imports Textual (in the app they took
    60–150 ms of the CPU it starts on). The app shows them, recoloured from the helper's stand-in
    colours to its theme, and draws none of them itself: each is what the app would have drawn."""
    wandb_dir, _ = run_dir
    home = tmp_path / "home"
    synced = subprocess.run([sys.executable, "-m", "marinctl", "sync", str(wandb_dir)], capture_output=True, text=True,
                            cwd=ROOT, env=_env(home), timeout=120)
    assert synced.returncode == 0, synced.stderr
    done = _first_read_in_a_fresh_process(wandb_dir, home, '''
        import asyncio, threading
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        os.environ["COLUMNS"], os.environ["LINES"] = "160", "50"     # the helper's terminal: the app's size
        store = Store(os.path.join(home, "marinctl.duckdb"))
        early = first_read.FirstRead(store, wandb_dir)
        assert early._pid is not None, "no helper forked"
        plan = early.plan()
        from marinctl.tui import frames
        from marinctl.tui.widgets import chart as charts
        from marinctl.tui.app import WatchApp
        from marinctl.tui.options import WatchOptions
        built, real = [], frames.build_frame
        def spy(fig, panel, axis, spec, size):
            built.append((panel.key, size))
            return real(fig, panel, axis, spec, size)
        frames.build_frame = charts.build_frame = spy
        async def main():
            app = WatchApp(WatchOptions(wandb_dir, 30, plan=plan, first_read=early, autosync=False), store=store)
            async with app.run_test(size=(160, 50)) as pilot:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:        # every chart of the first page shows a frame
                    charts_ = list(app.query(charts.MetricChart))
                    if len(charts_) >= 3 and all(c.frame is not None for c in charts_):
                        break
                    await pilot.pause(0.05)
                await pilot.pause(0.3)             # laid out
                first = list(built)
                charts_ = list(app.query(charts.MetricChart))
                assert len(charts_) >= 3 and all(c.frame is not None for c in charts_), charts_
                for c in charts_:
                    assert c.frame.size == (c.size.width, c.size.height), (c.slot, c.frame.size, c.size)
                    again = real(frames.PlotextFigure(), c.panel, c.axis, c.spec, c.frame.size)
                    assert again.text == c.frame.text, c.slot
                print("first page built here:", first, "charts:", len(charts_))
            early.stop()
        asyncio.run(main())
    ''')
    assert done.returncode == 0, done.stderr
    assert "first page built here: [] charts:" in done.stdout, done.stdout


@pytest.mark.asyncio
@pytest.mark.parametrize("size, panes", [((160, 50), {}), ((120, 40), {"run_pane": True}),
                                         ((200, 60), {"system_pane": True, "pane_width": 60})])
async def test_the_page_size_the_helper_draws_for_is_the_page_the_app_lays_out(run_dir, tmp_path, monkeypatch,
                                                                              size, panes):
    """The helper sizes the first page's frames before the app exists (`frames.page_size_guess`, the
    sidebar and the lines around the page as app.tcss sets them); a frame of another size is drawn again."""
    from marinctl.store import Store
    from marinctl.sync.local import sync_path
    from marinctl.tui import settings
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions
    from marinctl.tui.frames import page_size_guess
    from marinctl.tui.widgets.grid import ChartPage
    from tests.watch_pilot import wait_for_text

    wandb_dir, _ = run_dir
    monkeypatch.setenv("MARINCTL_HOME", str(tmp_path / "home"))
    store = Store(tmp_path / "home" / "marinctl.duckdb")
    sync_path(store, wandb_dir)
    layout = settings.Layout(**panes)
    settings.save(store.settings_key, layout)
    app = WatchApp(WatchOptions("start-synthetic", 30, autosync=False), store=store)
    async with app.run_test(size=size) as pilot:
        await wait_for_text(pilot, "▏step")                        # the first page, laid out
        page = app.query_one(ChartPage)
        assert (page.size.width, page.size.height) == page_size_guess(size, settings.load(store.settings_key))


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light", "nord", "gruvbox"])
def test_a_frame_drawn_in_stand_in_colours_recoloured_is_the_theme_s_own(run_dir, tmp_path, theme):
    """The helper draws before Textual's themes are imported; swapping its stand-in canvas and tick
    colours for a theme's gives the very frame drawn in that theme (every character, every style)."""
    from dataclasses import replace
    from types import SimpleNamespace

    from textual.theme import BUILTIN_THEMES

    from marinctl.views.watch_view import ViewParams, build_view
    from marinctl.store import Store
    from marinctl.sync.local import sync_path
    from marinctl.tui import frames
    from marinctl.tui.widgets.chart import register_theme
    from marinctl.tui.paint import ChartState, spec_for

    wandb_dir, _ = run_dir
    store = Store(tmp_path / "home" / "marinctl.duckdb")
    sync_path(store, wandb_dir)
    view = build_view(store, ViewParams(ref="start-synthetic", buckets=120))
    known = BUILTIN_THEMES[theme]
    name = register_theme(SimpleNamespace(theme=theme, theme_variables={**known.to_color_system().generate(),
                                                                       **known.variables}))
    state = ChartState(cursor_step=float(view.hi) - 7, logy_keys=frozenset({"train/loss"}))
    for panel in view.panels:
        spec = spec_for(view, panel.key, state, {}, name)
        direct = frames.build_frame(frames.PlotextFigure(), panel, view.axis, spec, (61, 11))
        stand_in = frames.build_frame(frames.PlotextFigure(), panel, view.axis,
                                      replace(spec, theme=frames.stand_in_theme()), (61, 11))
        assert stand_in.text != direct.text
        assert frames.recoloured(stand_in.text, name) == direct.text, panel.key
