"""The alert side of any follow loop, one adapter for `sync --follow` and `watch`.

`FollowAlerts` is what a follow loop holds: an `Alerter` (sync/alerts.py) and, with sinks, a
`Delivery` (sync/delivery.py) beside it. After each sync pass the loop calls `after_pass`: the
new alerts are handed to every sink, every PENDING_EVERY_S — and at once when the pass raised
an episode another follower had stored first — what this follower's sinks still owe of the
followed runs' alerts is claimed and sent too, and the caller hears of new ones through `said`. A
pass that fails (a busy store) is said once through `problem` and tried again at the next pass;
it never ends the follow (Ctrl-C inside a DuckDB query still does). The caller decides how to
say things — `sync --follow` on stderr (cli/notify.py), `watch` as messages to its screen
(tui/alerts.py) — and nothing else.

With `digest_s`, every that many seconds (at the end of the first pass past it) each followed
run's digest line (analysis/alerts/digest.py) is told through `told` and sent to the sinks that
take low priority, once, stored nowhere: a follower that is quiet because all is well says so.

Beside a local `.wandb` tail, the tail's threads `changed(results)` what each poll wrote, and the
loop beside them calls `local_pass()` every few tenths of a second: the runs that changed are
scored and checked at most every ALERT_EVERY_S, and with nothing changed every followed run is
checked for turning stale or crashed every LIVENESS_EVERY_S (`LocalChanges`).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterable, Sequence

from marinctl.analysis.alerts.rules import Rules
from marinctl.errors import is_interrupt
from marinctl.store import Store
from marinctl.store import alerts as alerts_store
from marinctl.sync.alerts import Alerter

PENDING_EVERY_S = 30.0     # how often a delivering follower looks for alerts others left undelivered
ALERT_EVERY_S = 1.0        # a local tail's changed runs: scored and checked at most this often
LIVENESS_EVERY_S = 5.0     # nothing changed: stale and crashed runs checked this often

Said = Callable[[list[dict[str, Any]]], None]
Problem = Callable[[str], None]
Told = Callable[[list[str]], None]


class FollowAlerts:
    """An Alerter and its Delivery, run after each pass of a follow loop."""

    def __init__(self, store: Store, rules: Rules | None, sinks: Sequence = (), *, said: Said | None = None,
                 problem: Problem | None = None, terminal=None, digest_s: float | None = None,
                 told: Told | None = None):
        self.store = store
        self.digest_s, self._told = digest_s, told
        self._digest_at = time.monotonic()                     # the last digest (or the follow's start)
        self._digest_wall = datetime.now(timezone.utc)
        self._moved: dict[str, tuple[int | None, float]] = {}  # run -> (newest step, when it last moved)
        self.alerter = Alerter(store, rules, sinks=sinks)
        self.delivery = None
        self._said, self._problem = said, problem
        self._failing = False
        self._pending_at: float | None = None
        self.changes = LocalChanges()
        if sinks:
            from marinctl.sync.delivery import Delivery

            self.delivery = Delivery(store, sinks, me=self.alerter.me, warn=problem, terminal=terminal).start()

    def after_pass(self, uids: Iterable[str] = (), *, detect: bool = False) -> list[dict[str, Any]]:
        """New alerts (oldest first), already said and on their way to the sinks; [] when the
        pass failed (said once, tried again at the next)."""
        try:
            new = self.alerter.after_pass(uids, detect=detect)
        except Exception as exc:  # noqa: BLE001 — a busy store: the next pass tries again
            self._failed(exc)
            return []
        owed: list[tuple[dict[str, Any], list[str] | None]] = [(a, None) for a in new]
        if self.delivery is not None and self.alerter.runs and (
                self._pending_at is None or time.monotonic() - self._pending_at >= PENDING_EVERY_S
                or self.alerter.stored_elsewhere):          # another follower stored what we raised
            try:
                owed += self.alerter.pending()
                self._pending_at = time.monotonic()
                self.alerter.stored_elsewhere = False
                self._failing = False
            except Exception as exc:  # noqa: BLE001 — what is owed stays owed: the next pass claims it
                self._failed(exc)
        else:
            self._failing = False
        if self.delivery is not None:
            self.delivery.submit(owed)
        if new and self._said is not None:
            self._said(new)
        self._digest()
        return new

    def _failed(self, exc: Exception) -> None:
        """A pass (or its claim of what is owed) met a busy store: said once until one succeeds."""
        if is_interrupt(exc):
            raise exc
        if not self._failing and self._problem is not None:
            self._problem(f"alerts not checked this pass ({type(exc).__name__}: {exc}); trying again at the next")
        self._failing = True

    def _digest(self) -> None:
        """Note which runs moved; when a digest is due, tell it and send it."""
        now = time.monotonic()
        for uid, step in self.alerter.last_steps.items():
            if uid not in self._moved or self._moved[uid][0] != step:
                self._moved[uid] = (step, now)
        if self.digest_s is None or now - self._digest_at < self.digest_s or not self._moved:
            return
        from marinctl.analysis.alerts import digest

        wall = datetime.now(timezone.utc)
        try:
            with self.store.connect() as con:
                counts = alerts_store.since(con, list(self._moved), self._digest_wall)
                found = [digest.of_run(con, uid, counts.get(uid, 0),
                                       now - moved if moved <= self._digest_at else None)
                         for uid, (_, moved) in self._moved.items()]
        except Exception as exc:  # noqa: BLE001 — a busy store: the next pass tries again
            if is_interrupt(exc):
                raise
            if self._problem is not None:
                self._problem(f"digest not made this pass ({type(exc).__name__}); trying again at the next")
            return
        self._digest_at, self._digest_wall = now, wall
        if self._told is not None:
            self._told([d.line() for d in found])
        if self.delivery is not None:
            self.delivery.submit([(digest.message(d, wall), None) for d in found])

    def changed(self, results: Iterable[dict[str, Any]]) -> None:
        """What a local tail's poll wrote (`sync.local.follow`'s `on_update` results)."""
        self.changes.add(results)

    def local_pass(self) -> list[dict[str, Any]]:
        """Beside a local tail: the pass, when one is due (see LocalChanges); else nothing."""
        if not self.changes.due():
            return []
        return self.after_pass(self.changes.take(self.store), detect=True)

    def close(self, wait_s: float | None = None) -> int:
        """Stop delivering (each sink's current try ends, bounded by `wait_s`, default one try's
        bound); returns the tries still queued."""
        if self.delivery is None:
            return 0
        waiting = self.delivery.waiting
        self.delivery.close(wait_s)
        return waiting


class LocalChanges:
    """What a `.wandb` tail changed since its last alert pass, and when the next is due: the runs
    that changed at most every ALERT_EVERY_S, and with nothing changed every LIVENESS_EVERY_S."""

    def __init__(self) -> None:
        self._names: set[str] = set()
        self._lock = threading.Lock()
        self._checked = time.monotonic()

    def add(self, results: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            self._names.update(r["run"] for r in results if r.get("run"))

    def due(self) -> bool:
        since = time.monotonic() - self._checked
        return bool(self._names) and since >= ALERT_EVERY_S or since >= LIVENESS_EVERY_S

    def take(self, store: Store) -> list[str]:
        """The uids of the runs changed since the last `take` (the clock restarts)."""
        with self._lock:
            names, self._names = sorted(self._names), set()
        self._checked = time.monotonic()
        if not names:
            return []
        with store.connect() as con:
            return alerts_store.local_uids(con, names)
