"""The one place the tests build marinctl's `watch` app for Textual's Pilot, and read its screen.

Tests press keys and assert on what the terminal shows (`screen(app)`), never on the app's
attributes; when the TUI is restructured, only `open_watch` changes.
"""

from __future__ import annotations

import time
from pathlib import Path

SIZE = (120, 40)


def open_watch(store_path: Path, target: str | None = None, *, interval: float = 30.0, autosync: bool = False,
               store=None):
    """`marinctl watch TARGET` on the DuckDB file at `store_path` (or on `store`, a team's lake), as an
    App for `app.run_test()`."""
    from marinctl.store import Store
    from marinctl.tui.app import WatchApp
    from marinctl.tui.options import WatchOptions

    return WatchApp(WatchOptions(target, interval, autosync=autosync), store=store or Store(Path(store_path)))


def run_test(app):
    """`async with run_test(app) as pilot:` — the screen a person sees, toasts included."""
    return app.run_test(size=SIZE, notifications=True)


def screen(app) -> str:
    """What the terminal shows now, as plain text (modal screens included)."""
    from marinctl.tui.capture import screen_text

    return screen_text(app).rstrip("\n")


# workers that run as long as the view follows (a file's tail) or as long as a sync takes: what is
# shown does not wait for them, and a settled screen is one whose reads and drawing are done
BACKGROUND = frozenset({"follow", "sync"})


def busy(app) -> bool:
    """A read or a drawing is under way (the follower and a sync pass go on in the background)."""
    return any(w.is_running and w.group not in BACKGROUND for w in app.workers)


async def settle(pilot, *, timeout: float = 60.0) -> str:
    """Wait until nothing is left to do, and return the screen: no worker runs, every message
    posted has been handled (`pilot.pause()`), and handling them changed nothing on screen since
    the last look. A fixpoint of the app's own events, never a quiet spell of wall-clock time
    (which a loaded machine can produce before the work it waits for has even started)."""
    app = pilot.app
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if busy(app):
            last = None
            await pilot.pause(0.02)          # a thread worker runs: give it the GIL
            continue
        await pilot.pause()
        now = _stable_part(screen(app))
        if now == last and not busy(app):
            break
        last = now
    return screen(app)


def _stable_part(text: str) -> str:
    # the sync-age clock in the header ticks every second; ignore it when deciding "settled"
    import re

    return re.sub(r"synced \d+ s ago", "synced", text)


async def wait_for_text(pilot, *needles: str, timeout: float = 60.0) -> str:
    """Wait until every needle is on screen; returns the screen (fails with it if not)."""
    app = pilot.app
    deadline = time.monotonic() + timeout
    text = screen(app)
    while time.monotonic() < deadline:
        text = screen(app)
        if all(n in text for n in needles):
            return text
        await pilot.pause(0.05)
    missing = [n for n in needles if n not in text]
    raise AssertionError(f"not on screen: {missing}\n{text}")


async def until(pilot, pred, what: str, timeout: float = 60.0) -> str:
    """Poll the screen until `pred(screen)` holds (returns the screen) or fail saying `what`."""
    deadline = time.monotonic() + timeout
    text = screen(pilot.app)
    while time.monotonic() < deadline:
        text = screen(pilot.app)
        if pred(text):
            return text
        await pilot.pause(0.05)
    raise AssertionError(f"{what}: not seen within {timeout:.0f} s\n{text}")


def header(text: str) -> str:
    """The header strip: the screen's first lines, down to the view line (x: … · smoothing: …)."""
    lines = text.splitlines()
    out = []
    for line in lines[:6]:
        out.append(line)
        if "smoothing:" in line:
            break
    return "\n".join(out)


def frames_built(monkeypatch) -> list[tuple[str, tuple[int, int], bool]]:
    """(key, size, on the UI thread) of every chart frame built from now on."""
    import threading

    import marinctl.tui.widgets.chart as charts
    import marinctl.tui.frames as frames

    built, real = [], frames.build_frame

    def spy(fig, panel, axis, spec, size):
        built.append((panel.key, size, threading.current_thread() is threading.main_thread()))
        return real(fig, panel, axis, spec, size)

    monkeypatch.setattr(frames, "build_frame", spy)     # the workers' (Figures.frame)
    monkeypatch.setattr(charts, "build_frame", spy)     # a chart's own, on a resize
    return built


def on_ui(built: list[tuple[str, tuple[int, int], bool]]) -> list[tuple[str, tuple[int, int]]]:
    """The frames of `frames_built` built on the UI thread (frames belong to the workers: one built
    while painting stalls every key press)."""
    return [(key, size) for key, size, ui in built if ui]
