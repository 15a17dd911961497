"""Alerts delivered to sinks beside a follow loop, never holding it up.

`Delivery` owns one thread per sink (a Slack outage never delays the webhook). Each thread
keeps its own queue of (alert, attempt) and tries the earliest due one: a try is bounded by
TRY_TIMEOUT_S (sinks.py), and one that fails is tried again after BACKOFF_S[attempt] seconds
(the last value repeating) for as long as the follower runs — that sink alone: the others are
not sent it again. Every try is written to the store, on the sink's own delivery row —
`tries`, `last_error`, the claim renewed, when it accepted (store/alerts.py). What a sink still
owes when the follower stops is sent by the next follower of the run with that sink; until
one sink accepts it, `marinctl alerts` lists the alert `"delivered": false`.

A sink's try and the store's record of it are two steps: a follower killed between them
resends the alert to that sink once its claim lapses (CLAIM_S), with the same idempotency key
(sinks.py), so delivery is at least once per sink and a receiver that keeps keys sees it once.

Any follow loop uses it (sync/follow_alerts.py `FollowAlerts`): `sync --follow` and `watch`. `submit`
only queues; `close` lets each sink finish the try it is in (bounded).
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Collection, Sequence

from marinctl.domain import Warn
from marinctl.store import Store
from marinctl.store import alerts as alerts_store
from marinctl.sync import sinks as sinks_mod
from marinctl.sync.sinks import Sink, Terminal

TRY_TIMEOUT_S = 5.0
BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
CLAIM_S = 180.0          # a claim outlives the longest wait between tries (60 s) with room to spare
WRITE_TRIES = 5          # a store write that meets another thread's transaction is tried again


class Delivery:
    def __init__(self, store: Store, sinks: Sequence[Sink], *, me: str, warn: Warn | None = None,
                 terminal: Terminal | None = None, timeout: float = TRY_TIMEOUT_S,
                 backoff: Sequence[float] = BACKOFF_S):
        self.store, self.sinks, self.me = store, list(sinks), me
        self.timeout, self.backoff = timeout, tuple(backoff)
        self._warn, self._terminal = warn, terminal
        self._hidden = sinks_mod.secrets(self.sinks)
        self._stop = threading.Event()
        self._workers = [_Worker(self, s) for s in self.sinks]
        self._said: set[tuple[str, int]] = set()

    def start(self) -> "Delivery":
        for w in self._workers:
            w.thread.start()
        return self

    def submit(self, owed: Sequence[tuple[dict[str, Any], Collection[str] | None]]) -> None:
        """Queue alerts (claimed by this process), each for the sinks (ids) that owe it (None: every
        sink that takes its priority). A message with no `alert_id` (a digest) is tried once, stored nowhere."""
        for alert, sinks in owed:
            for w in self._workers:
                if (w.sink.id in sinks) if sinks is not None else w.sink.takes(alert):
                    w.inbox.put(alert)

    def close(self, wait_s: float | None = None) -> None:
        """Stop after each sink's current try (at most `wait_s`, default one try's bound).

        The claims are not given back here: a follower stops on Ctrl-C, and a store connection
        opened after a query Ctrl-C interrupted can block for good in DuckDB 1.5 (a follower that
        said "stopped" then hung, until SIGKILL). They need not be: once this process is gone, a
        follower of the same machine takes them at once (sync/alerts.py `holder_gone`); elsewhere
        they lapse after CLAIM_S."""
        self._stop.set()
        for w in self._workers:
            w.inbox.put(None)
        deadline = time.monotonic() + (self.timeout + 1.0 if wait_s is None else wait_s)
        for w in self._workers:
            w.thread.join(timeout=max(deadline - time.monotonic(), 0.05))

    def _acked(self, alert: dict[str, Any]) -> bool:
        """Whether `marinctl alerts ack` stopped the alert (a read; a busy store: not known, not stopped)."""
        try:
            with self.store.connect() as con:
                return alerts_store.acked(con, alert["alert_id"])
        except Exception:  # noqa: BLE001 — the next try asks again
            return False

    @property
    def waiting(self) -> int:
        """Alert tries queued (not yet accepted) over every sink."""
        return sum(len(w.heap) + w.inbox.qsize() for w in self._workers)

    # -- called from the workers --------------------------------------------------------------
    def _write(self, fn, *args) -> None:
        for attempt in range(WRITE_TRIES):
            try:
                with self.store.transaction() as con:
                    fn(con, *args)
                return
            except Exception:  # noqa: BLE001 — a write conflict with the sync's own transaction: again
                if attempt == WRITE_TRIES - 1 or self._stop.is_set():
                    return
                time.sleep(0.05 * (attempt + 1))

    def _tried(self, sink: Sink, alert: dict[str, Any], error: str | None, attempt: int,
               receipt: str | None = None) -> None:
        if alert.get("alert_id") is None:        # a digest: said once if it failed, never stored
            if error is not None and self._warn is not None:
                self._warn(f"digest not delivered to {sink.label}: {error}")
            return
        until = datetime.now(timezone.utc) + timedelta(seconds=CLAIM_S)
        self._write(alerts_store.tried, alert["alert_id"], sink.id, sink.kind, error and f"{sink.label}: {error}",
                    self.me, until, receipt)
        if receipt is not None and self._acked(alert):        # acknowledged while it was on its way
            from marinctl.sync import phones

            if phones.cancel(receipt, timeout=self.timeout) is None:
                self._write(alerts_store.cancelled, alert["alert_id"], sink.id)
        said = (sink.label, attempt)
        if error is not None and self._warn is not None and said not in self._said and attempt in (0, 3, 6):
            self._said.add(said)
            wait = self.backoff[min(attempt, len(self.backoff) - 1)]
            self._warn(f"alert not delivered to {sink.label}: {error}; trying again in {wait:g} s")


class _Worker:
    """One sink's queue and thread."""

    def __init__(self, owner: Delivery, sink: Sink):
        self.owner, self.sink = owner, sink
        self.inbox: queue.Queue = queue.Queue()
        self.heap: list[tuple[float, int, int, dict[str, Any]]] = []   # (due, order, attempt, alert)
        self._order = itertools.count()
        self.queued: set[int] = set()
        self.thread = threading.Thread(target=self._run, name=f"alerts → {sink.kind}", daemon=True)

    def _run(self) -> None:
        o = self.owner
        while not o._stop.is_set():
            wait = max(self.heap[0][0] - time.monotonic(), 0.0) if self.heap else None
            try:
                item = self.inbox.get(timeout=wait) if wait != 0.0 else self.inbox.get_nowait()
            except queue.Empty:
                item = False
            if item is None:
                return
            if item is not False:
                key = item.get("alert_id")
                if key is None or key not in self.queued:      # one chain of tries per alert
                    if key is not None:
                        self.queued.add(key)
                    heapq.heappush(self.heap, (time.monotonic(), next(self._order), 0, item))
                continue
            if not self.heap or self.heap[0][0] > time.monotonic():
                continue
            _, _, attempt, alert = heapq.heappop(self.heap)
            if attempt and o._acked(alert):                    # acknowledged meanwhile: no more tries
                self.queued.discard(alert["alert_id"])
                continue
            try:
                error, receipt = sinks_mod.deliver(self.sink, alert, hidden=o._hidden, timeout=o.timeout,
                                                   terminal=o._terminal)
            except Exception as exc:  # noqa: BLE001 — a sink's failure is a failed try, never the loop's end
                error, receipt = f"{type(exc).__name__}", None
            o._tried(self.sink, alert, error, attempt, receipt)
            if alert.get("alert_id") is None:
                continue
            if error is None:
                self.queued.discard(alert["alert_id"])
            else:
                wait_s = o.backoff[min(attempt, len(o.backoff) - 1)]
                heapq.heappush(self.heap, (time.monotonic() + wait_s, next(self._order), attempt + 1, alert))
