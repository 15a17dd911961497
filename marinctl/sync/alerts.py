"""Alerts while following: after each sync pass, what is new becomes an alert, stored once.

`Alerter.after_pass(uids)` is the one call a follow loop makes after its sync pass (through
sync/follow_alerts.py's `FollowAlerts`, which `sync --follow` and `watch` both hold): it reads
the store as the pass left it, asks analysis what each followed run raises
(analysis/alerts/followed.py, its baseline and tracks between passes; raised.py, what counts),
keeps those the store has no alert of (one per run, cause and episode: store/alerts.py), words
them with explain's summary (analysis/alerts/wording.py), and returns them. `detect=True` runs
detection on the runs first, for loops whose sync pass does not (the local tail).

With `sinks` (a follower that delivers, sync/sinks.py), each new alert's delivery to every one
of them that takes its priority is claimed for this process in the transaction that stores it,
and `pending()` claims what earlier followers of the same runs left undelivered to these sinks
(fired within PENDING_WITHIN, not acknowledged; their claims lapsed), sink by sink.
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Sequence

from marinctl.analysis.alerts import followed, raised, wording
from marinctl.analysis.alerts import priority as P
from marinctl.analysis.alerts.rules import Rules
from marinctl.store import Connection, Store
from marinctl.store import alerts as alerts_store
from marinctl.sync.delivery import CLAIM_S
from marinctl.sync.sinks import Sink

PENDING_WITHIN = timedelta(hours=24)   # older undelivered alerts stay listed, not sent


class Alerter:
    def __init__(self, store: Store, rules: Rules | None = None, *, sinks: Sequence[Sink] = ()):
        self.store = store
        self.rules = rules or Rules()
        self.sinks = list(sinks)
        self.me = f"{socket.gethostname()}:{os.getpid()}"
        self.started = datetime.now(timezone.utc)
        self._runs: dict[str, followed.Followed] = {}
        self.last_steps: dict[str, int | None] = {}       # each followed run's newest step at the last pass
        self.stored_elsewhere = False     # a pass found an episode another follower had stored: its sinks may owe it
        self._known: set[int] = set()     # alerts this follower fired or saw stored
        self._unsaved: list[tuple[dict[str, Any], raised.Candidate]] = []
        self._lock = threading.Lock()

    @property
    def runs(self) -> list[str]:
        """Uids of the runs followed so far."""
        return list(self._runs)

    def after_pass(self, uids: Iterable[str] = (), *, detect: bool = False) -> list[dict[str, Any]]:
        """New alerts after a sync pass over `uids` (and every run followed so far), oldest first.

        The pass reads; only when it has something to store does it write (an idle follower
        does not take the store's write lock every pass). What it could not store (a busy store)
        is stored at the next pass."""
        with self._lock:
            changed = list(dict.fromkeys(uids))
            if detect and changed:
                from marinctl.sync import derive

                derive.after_sync(self.store, changed, realign=False)
            with self.store.connect() as con:
                self._unsaved += self._pass(con, list(dict.fromkeys([*self._runs, *changed])))
            if not self._unsaved:
                return []
            with self.store.transaction() as con:
                fired = self._store(con, self._unsaved)
            self._unsaved = []
            if not fired:
                return []
            with self.store.connect() as con:
                return alerts_store.get(con, fired)

    def pending(self) -> list[tuple[dict[str, Any], list[str]]]:
        """Alerts of the followed runs that this follower's sinks still owe, no live follower
        delivering them: claimed for this one, each with the ids of the sinks it owes."""
        if not self._runs or not self.sinks:
            return []
        now = datetime.now(timezone.utc)
        by_id = {s.id: s for s in self.sinks}
        with self.store.transaction() as con:
            return alerts_store.claim_pending(con, list(self._runs), [(s.id, s.kind) for s in self.sinks], self.me,
                                              now + timedelta(seconds=CLAIM_S), now - PENDING_WITHIN, gone=holder_gone,
                                              takes=lambda sink, alert: by_id[sink].takes(alert))

    # -- one pass -------------------------------------------------------------------------------
    def _pass(self, con: Connection, uids: list[str]) -> list[tuple[dict[str, Any], raised.Candidate]]:
        """What the followed runs raise now that the store holds no alert of (or holds a shorter one)."""
        now = datetime.now(timezone.utc)
        out = []
        for run in alerts_store.run_facts(con, uids):
            self.last_steps[run["uid"]] = run.get("last_step")
            mem = self._runs.get(run["uid"])
            if mem is None:
                mem = self._runs[run["uid"]] = followed.baseline(con, run, self.rules, now, self.started)
                if mem.since >= 0:
                    continue
            for c in followed.candidates(con, run, mem, self.rules, now):
                got = alerts_store.episode_of(con, run["uid"], c.cause, c.start, c.end, c.gap)
                if got is None or c.end > got[1]:
                    out.append((run, c))
                if got is not None and got[0] not in self._known:
                    self._known.add(got[0])
                    self.stored_elsewhere = True
        return out

    def _store(self, con: Connection, found: list[tuple[dict[str, Any], raised.Candidate]]) -> list[int]:
        """Store each new episode's alert (looked up again: another follower may have stored it since)."""
        now = datetime.now(timezone.utc)
        fired: list[int] = []
        for run, c in found:
            got = alerts_store.episode_of(con, run["uid"], c.cause, c.start, c.end, c.gap)
            if got is not None:
                if c.end > got[1]:
                    alerts_store.extend(con, got[0], c.end)
                continue
            title, summary = wording.words(con, run, c)
            alert_id = alerts_store.insert(con, {
                "run_uid": run["uid"], "cause": c.cause, "episode_start": c.start, "episode_end": c.end,
                "step": c.step, "metric": c.metric, "kind": c.kind, "cause_class": c.cause_class,
                "severity": c.severity, "priority": c.priority, "title": title, "summary": summary,
                "command": wording.command(con, run, c.step), "details": c.details})
            takes = [(s.id, s.kind) for s in self.sinks if P.at_least(c.priority, s.min_level)]
            if takes:
                alerts_store.add_deliveries(con, alert_id, takes, self.me, now + timedelta(seconds=CLAIM_S))
            fired.append(alert_id)
            self._known.add(alert_id)
        return fired


def holder_gone(holder: str) -> bool:
    """Whether a delivery claim's holder ('host:pid') is a process of this machine that has ended
    (a follower killed mid-delivery: its claims need not wait out CLAIM_S). Other machines' claims
    lapse by time alone."""
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:          # alive, another user's
        return False
    return False
