"""Keeping the view current: a local run within a second, a remote one politely, an idle one for free.

- A local `.wandb` target is tailed by a follower thread (the sync pipeline's `FileSync`, as
  `sync --follow` uses it): a stat every FOLLOW_S, new records written to the store window by
  window, and a `StoreChanged` message as soon as a window lands. `r` wakes it at once. When
  `watch` was started on it from the CLI, the first-read helper (tui/first_read.py) has caught
  the file up in its own process first; the follower waits for it and tails from where it stopped.
- A W&B target is synced every `--interval` seconds (shown in the header); `r` syncs now.
- Whatever else writes the store (a `sync` in another terminal) is noticed by a ~1 ms check
  of the store's data version every CHECK_S; nothing is re-read while it stays the same.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from marinctl.tui import messages as msg

if TYPE_CHECKING:
    from marinctl.tui.app import WatchApp

FOLLOW_S = 0.5          # seconds between stats of a followed file
CHECK_S = 2.0           # seconds between data-version checks when nothing else tells us
FIRST_PAINT_WAIT_S = 5.0   # the most the follower waits for the first view to be painted
PROGRESS_EVERY_S = 2.0  # during a long first read: after the first window (drawn at once), how often
                        # to show what has landed (more often would slow the read with redraws)


class Live:
    """Mixed into WatchApp: the follower, the poller and the data-version check."""

    def start_live(self: WatchApp, local: list[str], remote: list[str]) -> None:
        if getattr(self, "_live_stopped", False):
            return      # a plan that lands as the app closes: a follower started now would never be told to stop
        header = self._header
        if local and self.autosync:
            header.mode = "follow"
            self._follow_stop = threading.Event()
            self._follow_wake = threading.Event()
            for path in local:
                self.run_worker(lambda p=path: self._follow_worker(p), thread=True, group="follow",
                                exit_on_error=False, name=f"follow {path}")
        elif remote and self.autosync:
            header.mode, header.interval = "poll", self.interval
            self.sync_now()
            self.set_interval(self.interval, self.sync_now)
        self.set_interval(CHECK_S if not local else 5 * CHECK_S, self.check_store)
        header.redraw()

    def stop_live(self: WatchApp) -> None:
        self._live_stopped = True
        stop = getattr(self, "_follow_stop", None)
        if stop is not None:
            stop.set()
            self._follow_wake.set()
        if self._first_read_early is not None:
            self._first_read_early.stop()

    def on_helper(self: WatchApp, message: tuple) -> None:
        """What the first-read helper (tui/first_read.py) says while it catches a local run up
        (called on its receiving thread): the same messages the follower posts."""
        kind = message[0]
        if kind == "changed":
            self.post_message(msg.StoreChanged(message[1]))
        elif kind in ("progress", "warn"):
            self.post_message(msg.FollowStatus(message[1], problem=kind == "warn"))

    def wake_follower(self: WatchApp) -> bool:
        wake = getattr(self, "_follow_wake", None)
        if wake is None:
            return False
        wake.set()
        return True

    def check_store(self: WatchApp) -> None:
        """Re-read only when the store's data version moved (another process, a sync pass).

        A write changes the DuckDB file or its WAL: while neither's size and mtime moved, nothing
        is opened at all (opening a connection every CHECK_S was most of an idle view's CPU).
        """
        if self._loading or self.view is None:
            return
        stamp = _file_stamp(self.store.path)
        if stamp == getattr(self, "_file_stamp", None):
            return
        self._file_stamp = stamp
        self.run_worker(self._version_worker, thread=True, group="version", exclusive=True, exit_on_error=False)

    # -- threads -----------------------------------------------------------------------------
    def _version_worker(self: WatchApp) -> None:
        from marinctl.store.series import data_version

        try:
            with self.store.connect() as con:
                version = data_version(con)
        except Exception:  # noqa: BLE001 — a busy store: try again at the next check
            return
        if version != self._version:
            self.post_message(msg.StoreChanged([]))

    def _follow_worker(self: WatchApp, target: str) -> None:
        """Tail every `.wandb` file under `target` until the app stops (holding its sync lock)."""
        from marinctl.errors import RuntimeFailure
        from marinctl.store import synclock

        path = Path(target).expanduser()
        stop, wake = self._follow_stop, self._follow_wake
        early = self._first_read_early
        if early is not None:
            while not stop.is_set() and not early.wait_done(FOLLOW_S):
                pass    # the first-read helper is catching the run up under the sync lock: tail from where it stops
            early.retire()
            # the follower's first pass imports the sync pipeline (~0.15 s of CPU): on the GIL that
            # is time the first paint would wait for, and the helper has just caught the file up
            self.first_painted.wait(FIRST_PAINT_WAIT_S)
        while not stop.is_set() and not path.exists():
            self.post_message(msg.FollowStatus(f"waiting for {path.name}"))
            wake.wait(FOLLOW_S)
            wake.clear()
        try:
            with synclock.acquire(self.store.path, target, owner="watch"):
                self._follow_loop(path, stop, wake)
        except RuntimeFailure as exc:
            # another marinctl (`sync --follow`) tails it: show what it writes, checking often
            self.post_message(msg.FollowStatus(exc.message + "; showing what it writes", problem=True))
            while not stop.is_set():
                self._version_worker()
                stop.wait(FOLLOW_S)

    def _follow_loop(self: WatchApp, path: Path, stop: threading.Event, wake: threading.Event) -> None:
        """`sync --follow`'s loop (sync/local.py `follow`), woken early by `r`, reporting to the header."""
        from marinctl.sync.local import follow

        last_post = [0.0]          # the first window that lands is drawn at once, then every PROGRESS_EVERY_S
        said = [""]

        def say(text: str, problem: bool = False) -> None:
            if text != said[0]:
                said[0] = text
                self.post_message(msg.FollowStatus(text, problem))

        def progress(run: str, done: int, total: int) -> None:
            now = time.monotonic()
            if now - last_post[0] >= PROGRESS_EVERY_S:    # a long first read: show what has landed so far
                last_post[0] = now
                say(f"reading {run}: {done * 100 // max(1, total)}%")
                self.post_message(msg.StoreChanged([]))

        def polled(_seconds: float) -> None:
            self.follow_polled_at = time.time()
            say(f"following {path.name} every {FOLLOW_S:g} s")

        follow(self.store, path, interval=FOLLOW_S, stop=_Clock(stop, wake, polled),
               on_update=lambda changed: self.post_message(msg.StoreChanged(changed)),
               progress=progress, warn=lambda text: say(text, True))


class _Clock(threading.Event):
    """The follow loop's stop event: `wait` between polls notes the poll and wakes early on `r`."""

    def __init__(self, stop: threading.Event, wake: threading.Event, polled) -> None:
        super().__init__()
        self._stop, self._wake, self._polled = stop, wake, polled

    def is_set(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        self._polled(timeout or 0.0)
        self._wake.wait(timeout)
        self._wake.clear()
        return self._stop.is_set()


def _file_stamp(db: Path) -> tuple:
    out = []
    for p in (Path(db), Path(f"{db}.wal")):
        try:
            st = p.stat()
            out.append((st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)
