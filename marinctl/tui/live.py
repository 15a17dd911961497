"""Keeping the view current: a local run within a second, a remote one politely, an idle one for free.

- A local `.wandb` target is tailed by a follower thread (the sync pipeline's `FileSync`, as
  `sync --follow` uses it): a stat every FOLLOW_S, new records written to the store window by
  window, and a `StoreChanged` message as soon as a window lands. `r` wakes it at once. When
  `watch` was started on it from the CLI, the first-read helper (tui/first_read.py) has caught
  the file up in its own process first; the follower waits for it and tails from where it stopped.
- A W&B target is synced every `--interval` seconds (shown in the header); `r` syncs now, under
  the per-target sync lock `marinctl sync` also takes.
- Whatever else writes the store (a `sync` in another terminal) is noticed by a check of the
  store's data version every CHECK_S; nothing is re-read while it stays the same.
- Each sync pass is followed by the alert pass `sync --follow` runs (tui/alerts.py), in the
  same thread: after a W&B poll, and beside a local tail with its runs scored first.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from textual.dom import DOMNode

from marinctl.errors import MarinctlError, SyncBusy, Unreachable
from marinctl.tui import messages as msg

if TYPE_CHECKING:
    from marinctl.store import Store
    from marinctl.tui.alerts import AlertPasses
    from marinctl.tui.first_read import FirstRead
    from marinctl.tui.options import SyncFn

FOLLOW_S = 0.5          # seconds between stats of a followed file
CHECK_S = 2.0           # seconds between data-version checks when nothing else tells us
FIRST_PAINT_WAIT_S = 5.0   # the most the follower waits for the first view to be painted
PROGRESS_EVERY_S = 2.0  # during a long first read: after the first window (drawn at once), how often
                        # to show what has landed (more often would slow the read with redraws)


class Live:
    """The follower, the poller and the data-version check of one screen (`node`), which gets
    `StoreChanged`, `FollowStatus` and `SyncFinished` / `SyncFailed` messages."""

    def __init__(self, node: DOMNode, store: Store, sync_fn: SyncFn, *, interval: float, autosync: bool,
                 shown_version: Callable[[], Any], busy: Callable[[], bool], early: FirstRead | None = None,
                 alerts: AlertPasses | None = None) -> None:
        """`shown_version()`: the store's data version the view on screen was read at; `busy()`: no
        view yet, or a read under way (nothing to check); `early`: the first-read helper; `alerts`:
        the alert pass after each sync pass (None: none)."""
        self._node, self._store, self._sync_fn, self._alerts = node, store, sync_fn, alerts
        self.interval, self._autosync, self._early = interval, autosync, early
        self._shown_version, self._busy = shown_version, busy
        self.targets: list[str] = []        # what `r` and the poller sync (planned from TARGET)
        self.syncing = False
        self.polled_at: float | None = None     # wall clock of the follower's last look at the file
        self.first_painted = threading.Event()   # the first view is on the screen
        self._stopped = threading.Event()
        self._wake = threading.Event()
        self._following = False
        self._stamp: tuple | None = None
        if early is not None:
            early.listen(self._helper)

    def start(self, local: list[str], remote: list[str]) -> str:
        """Follow `local` files, or poll `remote` targets; returns how: 'follow', 'poll' or 'store'."""
        if self._stopped.is_set():
            return "store"     # a plan that lands as the screen closes: a follower now would never be told to stop
        mode = "store"
        if local and self._autosync:
            mode, self._following = "follow", True
            for path in local:
                self._node.run_worker(lambda p=path: self._follow(p), thread=True, group="follow",
                                      exit_on_error=False, name=f"follow {path}")
        elif remote and self._autosync:
            mode = "poll"
            self.sync_now()
            self._node.set_interval(self.interval, self.sync_now)
        self._node.set_interval(CHECK_S if not local else 5 * CHECK_S, self._check)
        return mode

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        if self._early is not None:
            self._early.stop()
        if self._alerts is not None:
            self._alerts.close()

    def wake(self) -> bool:
        """`r` on a followed file: read it now. False when nothing is followed."""
        if not self._following:
            return False
        self._wake.set()
        return True

    def sync_now(self, asked: bool = False) -> None:
        """Sync the planned targets now (`asked`: the user pressed `r`)."""
        if self.syncing or not self.targets:
            return
        self.syncing = True
        self._node.post_message(msg.SyncStarted())
        targets = list(self.targets)
        self._node.run_worker(lambda: self._sync(targets, asked), thread=True, group="sync", exit_on_error=False)

    def _helper(self, message: tuple) -> None:
        """What the first-read helper says while it catches a local run up (on its receiving
        thread): the same messages the follower posts."""
        kind = message[0]
        if kind == "changed":
            self._node.post_message(msg.StoreChanged(message[1]))
        elif kind in ("progress", "warn"):
            self._node.post_message(msg.FollowStatus(message[1], problem=kind == "warn"))

    def _check(self) -> None:
        """Re-read only when the store's data version moved (another process, a sync pass).

        The store's stamp moves with every write (the DuckDB file's or its WAL's size and mtime, a
        DuckLake's newest snapshot): while it stays, nothing is read at all (an idle view would
        otherwise open a connection every CHECK_S).
        """
        if self._busy():
            return
        if self._store.kind != "embedded":    # a lake's stamp is a catalog query: asked off the UI thread
            self._node.run_worker(self._version, thread=True, group="version", exclusive=True, exit_on_error=False)
            return
        stamp = self._store.stamp()
        if stamp == self._stamp:
            return
        self._stamp = stamp
        self._node.run_worker(self._version, thread=True, group="version", exclusive=True, exit_on_error=False)

    # -- threads -----------------------------------------------------------------------------
    def _version(self) -> None:
        from marinctl.store.series import data_version

        if self._store.kind != "embedded":
            try:
                stamp = self._store.stamp()
            except Exception:  # noqa: BLE001 — the catalog away: try again at the next check
                return
            if stamp == self._stamp:
                return
            self._stamp = stamp
        try:
            with self._store.connect() as con:
                version = data_version(con)
        except Exception:  # noqa: BLE001 — a busy store: try again at the next check
            return
        if version != self._shown_version():
            self._node.post_message(msg.StoreChanged([]))

    def _sync(self, targets: list[str], asked: bool) -> None:
        from marinctl.store import synclock

        def failed(error: str, reason: str) -> None:
            self._node.post_message(msg.SyncFailed(error, reason, asked=asked))

        try:
            with synclock.acquire_all(self._store, targets, owner="watch"):
                report = self._sync_fn(self._store, targets)
                if self._alerts is not None:
                    self._alerts.after_sync((report or {}).get("synced") or [])
        except SyncBusy as exc:
            return failed(exc.message, "busy")
        except Unreachable as exc:
            return failed(exc.message, "offline")
        except MarinctlError as exc:
            return failed(exc.message, "failed")
        except Exception as exc:  # noqa: BLE001 — e.g. a network error class the sources did not map
            return failed(f"{type(exc).__name__}: {exc}", "offline")
        runs = (report or {}).get("runs") or []
        self._node.post_message(msg.SyncFinished(sum(int(r.get("rows_added") or 0) for r in runs),
                                                 runs[-1].get("run") if runs else None))

    def _follow(self, target: str) -> None:
        """Tail every `.wandb` file under `target` until the screen closes (holding its sync lock)."""
        from marinctl.store import synclock

        path = Path(target).expanduser()
        stop, wake, early = self._stopped, self._wake, self._early
        if early is not None:
            while not stop.is_set() and not early.wait_done(FOLLOW_S):
                pass    # the first-read helper is catching the run up under the sync lock: tail from where it stops
            early.retire()
            # the follower's first pass imports the sync pipeline: on the GIL that is time the first
            # paint would wait for, and the helper has just caught the file up
            self.first_painted.wait(FIRST_PAINT_WAIT_S)
        while not stop.is_set() and not path.exists():
            self._node.post_message(msg.FollowStatus(f"waiting for {path.name}"))
            wake.wait(FOLLOW_S)
            wake.clear()
        try:
            with synclock.acquire(self._store, target, owner="watch"):
                self._follow_loop(path)
        except SyncBusy as exc:
            # another marinctl (`sync --follow`) tails it: show what it writes, checking often
            self._node.post_message(msg.FollowStatus(exc.message + "; showing what it writes", problem=True))
            while not stop.is_set():
                self._version()
                stop.wait(FOLLOW_S)

    def _follow_loop(self, path: Path) -> None:
        """`sync --follow`'s loop (sync/local.py `follow`), woken early by `r`, reporting to the header."""
        from marinctl.sync.local import follow

        post = self._node.post_message
        last_post = [0.0]          # the first window that lands is drawn at once, then every PROGRESS_EVERY_S
        said = [""]

        def say(text: str, problem: bool = False) -> None:
            if text != said[0]:
                said[0] = text
                post(msg.FollowStatus(text, problem))

        def progress(run: str, done: int, total: int) -> None:
            now = time.monotonic()
            if now - last_post[0] >= PROGRESS_EVERY_S:    # a long first read: show what has landed so far
                last_post[0] = now
                say(f"reading {run}: {done * 100 // max(1, total)}%")
                post(msg.StoreChanged([]))

        caught_up = threading.Event()       # the first poll is done: the alert pass's baseline

        def polled(_seconds: float) -> None:
            self.polled_at = time.time()
            caught_up.set()
            say(f"following {path.name} every {FOLLOW_S:g} s")

        changed = self._alerts.tail(self._stopped, caught_up, lambda: _runs_under(self._store, path)) \
            if self._alerts is not None else None

        def on_update(results: list[dict]) -> None:
            post(msg.StoreChanged(results))
            if changed is not None:
                changed(results)

        follow(self._store, path, interval=FOLLOW_S, stop=_Clock(self._stopped, self._wake, polled),
               on_update=on_update, progress=progress, warn=lambda text: say(text, True))


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


def _runs_under(store: Store, path: Path) -> list[str]:
    """The uids of the runs mirrored from `.wandb` files under `path`."""
    from marinctl.store.runs import uids_at_path

    with store.connect() as con:
        return uids_at_path(con, str(path.resolve()))


