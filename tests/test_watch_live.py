"""`watch` on a `.wandb` run while it is being written: a new step reaches the
screen while the run goes on, `r` reads the file at once, and the run pane shows what the run
printed.

A real wandb SDK run (offline, SYNTHETIC) is written by a subprocess that pauses on a signal
file; the app tails the file through the sync pipeline's follower. No clock is asserted on (a
loaded machine would break it): the test waits, bounded, for the step to show.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.watch_pilot import open_watch, run_test, screen, wait_for_text

pytestmark = pytest.mark.asyncio

LATE_STEP = 1000

WRITER = textwrap.dedent(r'''
    import os, sys, time
    import wandb
    out = sys.argv[1]
    run = wandb.init(mode="offline", dir=out, project="synthetic-live", name="synthetic-live",
                     config={"trainer": {"num_train_steps": 2000}},
                     settings=wandb.Settings(x_disable_stats=True, x_transaction_log_flush_interval=0.1))
    for s in range(30):
        run.log({"train/loss": 5.0 - s * 0.01, "grad/norm/total": 1.0}, step=s, commit=True)
    print("synthetic console line: warm-up done", flush=True)
    def wait(name):
        deadline = time.time() + 60
        while not os.path.exists(os.path.join(out, name)) and time.time() < deadline:
            time.sleep(0.02)
    wait("go")
    run.log({"train/loss": 4.0, "grad/norm/total": 0.5}, step=%d, commit=True)
    wait("stop")
    run.finish()
    from repro.wandb_log import teardown  # bounded: wandb's own can wait for ever
    teardown()
''' % LATE_STEP)


def run_file(out: Path) -> Path | None:
    found = sorted(out.glob("wandb/*/*.wandb"))
    return found[0] if found else None


async def test_a_step_written_live_reaches_the_screen(store, tmp_path):
    out = tmp_path / "live"
    out.mkdir()
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    # stderr to a file, not a pipe: wandb-core, the writer's child, keeps a pipe open after the
    # writer is gone, and reading it to its end would then never return
    err_file = tmp_path / "writer.err"
    with err_file.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], env=env, stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 90
        while (run_file(out) is None or run_file(out).stat().st_size < 2000) and time.monotonic() < deadline:
            assert proc.poll() is None, err_file.read_text()
            time.sleep(0.1)
        path = run_file(out)
        assert path is not None, "the SDK wrote no .wandb file"
        app = open_watch(store.path, str(out / "wandb"), autosync=True)
        async with run_test(app) as pilot:
            text = await wait_for_text(pilot, "▏step 29", "following", timeout=30)
            assert "every 0.5 s" in text                     # the header says how it stays current
            size = path.stat().st_size
            (out / "go").touch()
            while path.stat().st_size == size:              # the new step's record reaches the file
                assert time.monotonic() < deadline and proc.poll() is None
                await pilot.pause(0.01)
            assert f"step {LATE_STEP:,}" not in screen(app)
            await wait_for_text(pilot, f"▏step {LATE_STEP:,}", timeout=60)    # the run still writing
            assert proc.poll() is None
            (out / "stop").touch()
            assert proc.wait(timeout=60) == 0, err_file.read_text()
            await pilot.press("r")                           # `r`: read the file now (the run finished)
            await wait_for_text(pilot, "reading the run's file now")
            await wait_for_text(pilot, "finished", timeout=60)
            assert f"step {LATE_STEP:,}" in screen(app)
            await pilot.press("i")                           # the run pane ends with what the run printed
            await wait_for_text(pilot, "Console (", "warm-up done", timeout=60)
    finally:
        (out / "go").touch()
        (out / "stop").touch()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)


async def test_demo_first_frame_says_what_is_starting_until_steps_arrive(store, tmp_path):
    """`marinctl demo` opens watch before its trainer has written anything."""
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions

    out = tmp_path / "demo"
    out.mkdir()
    app = WatchApp(WatchOptions(str(out / "wandb"), 30, starting="starting the rung1 proxy…"), store=store)
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    proc = None
    try:
        async with run_test(app) as pilot:
            text = await wait_for_text(pilot, "starting the rung1 proxy…", "as soon as the first steps are written")
            assert "holds no runs" not in text and "marinctl demo" not in text
            proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            text = await wait_for_text(pilot, "▏step 29", timeout=90)
            assert "starting the rung1 proxy" not in text
    finally:
        (out / "go").touch()
        (out / "stop").touch()
        if proc is not None:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=60)


async def test_a_plan_that_lands_as_the_screen_closes_starts_no_follower(store, tmp_path):
    """`Live` is told to stop when its screen unmounts; a follower started after that (its plan landing
    late) would tail the file for ever, and the process would wait for its thread at exit."""
    from marinctl.tui.live import Live

    local = tmp_path / "wandb"
    local.mkdir()
    app = open_watch(store.path, str(local), autosync=True)
    async with run_test(app) as pilot:
        await wait_for_text(pilot, "following")
        before = [w for w in app.workers if w.group == "follow" and w.is_running]
        live = Live(app.screen, store, lambda s, t: {}, interval=30, autosync=True, shown_version=lambda: None,
                    busy=lambda: True)
        live.stop()                                  # what unmounting its screen does
        assert live.start([str(local)], []) == "store"
        await pilot.pause(0.5)
        assert [w for w in app.workers if w.group == "follow" and w.is_running] == before
        assert not live.wake()                       # nothing of its own to wake
