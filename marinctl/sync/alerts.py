"""Alerts while following: after each sync pass, what is new becomes an alert, stored once.

`Alerter.after_pass(uids)` is the one call a follow loop makes after its sync pass (`sync
--follow`'s and `watch`'s W&B poll and local tail): it reads the store as the pass left it,
asks analysis what each followed run raises (analysis/alerts/raised.py: high-severity
incidents, slowdowns, NaN/Inf, stale and crashed runs, the user's rules), keeps those the
store has no alert of (one per run, cause and episode: store/alerts.py), words them with
explain's summary (analysis/alerts/wording.py), and returns them. A run's first pass is its
baseline: what it holds then raises nothing (a run created after following began has no
baseline: all of it is new). `detect=True` runs detection on the runs first, for loops whose
sync pass does not (the local tail; `LocalChanges` says when its pass is due and for which
runs). `FollowAlerts` pairs it with a Delivery (sync/delivery.py): the one object a follow
loop holds.

With `claim=True` (a follower that delivers), each new alert is claimed for this process in
the transaction that stores it, and `pending()` claims what earlier followers of the same
runs left undelivered (fired within PENDING_WITHIN; their claims lapsed).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

import numpy as np

from marinctl.analysis.alerts import raised, wording
from marinctl.analysis.alerts.conditions import Track, nonfinite_test, rule_test
from marinctl.analysis.alerts.rules import Rule, Rules
from marinctl.store import Connection, Store, history, metrics
from marinctl.store import alerts as alerts_store
from marinctl.sync.delivery import CLAIM_S

PENDING_WITHIN = timedelta(hours=24)   # older undelivered alerts stay listed, not sent
PENDING_EVERY_S = 30.0                 # how often a delivering follower looks for alerts others left undelivered
PRIME_SPAN = 5_000                     # steps read before a baseline for a window's first values
ALERT_EVERY_S = 1.0                    # a local tail's changed runs: scored and checked at most this often
LIVENESS_EVERY_S = 5.0                 # nothing changed: stale and crashed runs checked this often


@dataclass
class _Run:
    """What the alerter remembers of one followed run between passes."""

    since: int                                   # the baseline step: what began at or before it is history
    liveness: str | None = None
    rules: dict[str, Track] = field(default_factory=dict)
    nonfinite: dict[str, Track] = field(default_factory=dict)
    nan_checked: int = -1                        # last step looked at for NaN/Inf


class Alerter:
    def __init__(self, store: Store, rules: Rules | None = None, *, claim: bool = False):
        self.store = store
        self.rules = rules or Rules()
        self.claim = claim
        self.me = f"{socket.gethostname()}:{os.getpid()}"
        self.started = datetime.now(timezone.utc)
        self._runs: dict[str, _Run] = {}
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

    def pending(self) -> list[dict[str, Any]]:
        """Undelivered alerts of the followed runs no live follower holds: claimed for this one."""
        if not self._runs:
            return []
        now = datetime.now(timezone.utc)
        with self.store.transaction() as con:
            return alerts_store.claim_pending(con, list(self._runs), self.me, now + timedelta(seconds=CLAIM_S),
                                              now - PENDING_WITHIN)

    # -- one pass -------------------------------------------------------------------------------
    def _pass(self, con: Connection, uids: list[str]) -> list[tuple[dict[str, Any], raised.Candidate]]:
        """What the followed runs raise now that the store holds no alert of (or holds a shorter one)."""
        now = datetime.now(timezone.utc)
        out = []
        for run in alerts_store.run_facts(con, uids):
            mem = self._runs.get(run["uid"])
            if mem is None:
                mem = self._runs[run["uid"]] = self._baseline(con, run, now)
                if mem.since >= 0:
                    continue
            for c in self._candidates(con, run, mem, now):
                got = alerts_store.episode_of(con, run["uid"], c.cause, c.start, c.end, c.gap)
                if got is None or c.end > got[1]:
                    out.append((run, c))
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
            fired.append(alerts_store.insert(con, {
                "run_uid": run["uid"], "cause": c.cause, "episode_start": c.start, "episode_end": c.end,
                "step": c.step, "metric": c.metric, "kind": c.kind, "cause_class": c.cause_class,
                "severity": c.severity, "title": title, "summary": summary,
                "command": wording.command(con, run, c.step), "details": c.details},
                claimed_by=self.me if self.claim else None,
                claimed_until=now + timedelta(seconds=CLAIM_S) if self.claim else None))
        return fired

    def _baseline(self, con: Connection, run: dict[str, Any], now: datetime) -> _Run:
        """A run's first pass: its liveness and every rule's state as they are, raising nothing.
        A run created after following began has no history to keep quiet (since = -1)."""
        created = run.get("created_at")
        if created is not None and created.tzinfo is None:
            created = created.replace(tzinfo=timezone.utc)
        new = created is not None and created >= self.started
        last = run.get("last_step")
        since = -1 if new or last is None else int(last)
        mem = _Run(since, None if new else raised.liveness(run, now, self.rules.stale_after), nan_checked=since)
        if new and mem.liveness is None:
            mem.liveness = "live"
        segs = [(run["run_pk"], None, None)]
        for rule in self._rules_for(run):
            track = mem.rules[rule.name] = Track(keep=rule.rows_needed)
            if since >= 0:
                track.prime(*self._tail(con, segs, rule.metric, since, rule.rows_needed), rule_test(rule))
        if since >= 0:
            for key, *_ in history.nonfinite(con, segs, max(since - PRIME_SPAN, 0), since + 1):
                self._nan_track(con, mem, segs, key)
        return mem

    def _candidates(self, con: Connection, run: dict[str, Any], mem: _Run, now: datetime) -> list[raised.Candidate]:
        segs = [(run["run_pk"], None, None)]
        out = raised.from_incidents(con, run, mem.since) + raised.from_hero_band(con, run, mem.since)
        # NaN/Inf: metrics with one among the new rows, and those whose NaN episode is still open
        last = run.get("last_step")
        if last is not None and int(last) > mem.nan_checked:
            for key, *_ in history.nonfinite(con, segs, mem.nan_checked + 1, None):
                if key not in mem.nonfinite:
                    self._nan_track(con, mem, segs, key)
            for key, track in list(mem.nonfinite.items()):
                steps, values = metrics.series(con, segs, key, _after(track, mem.nan_checked), None)
                out += [raised.from_nonfinite(key, ep) for ep in track.advance(steps, values, nonfinite_test)]
                if track.open is None:
                    del mem.nonfinite[key]
            mem.nan_checked = int(last)
        for rule in self._rules_for(run):
            track = mem.rules[rule.name]
            steps, values = metrics.series(con, segs, rule.metric, _after(track, mem.since), None)
            out += [raised.from_rule(rule, ep) for ep in track.advance(steps, values, rule_test(rule))]
        state = raised.liveness(run, now, self.rules.stale_after)
        if state != "unknown":
            turned = raised.from_liveness(run, mem.liveness, state, now, self.rules.stale_after)
            if turned is not None:
                out.append(turned)
            mem.liveness = state
        return out

    def _rules_for(self, run: dict[str, Any]) -> list[Rule]:
        return [r for r in self.rules.rules if r.selects(run)]

    def _nan_track(self, con: Connection, mem: _Run, segs, key: str) -> None:
        """A NaN/Inf track for `key`, primed with its rows up to what was already looked at."""
        track = mem.nonfinite[key] = Track(keep=0, finite_only=False)
        if mem.nan_checked >= 0:
            steps, values = metrics.series(con, segs, key, max(mem.nan_checked - PRIME_SPAN, 0), mem.nan_checked + 1)
            track.prime(steps, values, nonfinite_test)
            track.last = mem.nan_checked

    @staticmethod
    def _tail(con: Connection, segs, key: str, upto: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The last values of `key` at or before `upto`: enough for a window (read further back when sparse)."""
        steps, values = metrics.series(con, segs, key, max(upto + 1 - PRIME_SPAN, 0), upto + 1)
        if np.count_nonzero(np.isfinite(values)) < rows and upto + 1 - PRIME_SPAN > 0:
            steps, values = metrics.series(con, segs, key, None, upto + 1)
        return steps, values


def _after(track: Track, otherwise: int) -> int:
    """The first step a track has not judged."""
    return (track.last if track.last is not None else otherwise) + 1


class FollowAlerts:
    """What a follow loop holds for alerts: an Alerter and, with sinks, a Delivery beside it.

    `sync --follow` (cli/notify.py) and `watch` (tui/alerts.py) call `after_pass` after each sync pass:
    new alerts are handed to every sink, and every PENDING_EVERY_S what earlier followers of the
    same runs left undelivered is claimed and sent too. Errors are the caller's (a busy store:
    the next pass tries again); `warn` hears of failed deliveries.
    """

    def __init__(self, store: Store, rules: Rules | None, sinks=(), *, warn=None, terminal=None):
        self.alerter = Alerter(store, rules, claim=bool(sinks))
        self.delivery = None
        self._pending_at: float | None = None
        if sinks:
            from marinctl.sync.delivery import Delivery

            self.delivery = Delivery(store, sinks, me=self.alerter.me, warn=warn, terminal=terminal).start()

    def after_pass(self, uids: Iterable[str] = (), *, detect: bool = False) -> list[dict[str, Any]]:
        """New alerts (oldest first), already on their way to the sinks."""
        new = self.alerter.after_pass(uids, detect=detect)
        pending: list[dict[str, Any]] = []
        if self.delivery is not None and self.alerter.runs and (
                self._pending_at is None or time.monotonic() - self._pending_at >= PENDING_EVERY_S):
            pending = self.alerter.pending()
            self._pending_at = time.monotonic()
        if self.delivery is not None:
            self.delivery.submit(new + pending)
        return new

    def close(self, wait_s: float | None = None) -> int:
        """Stop delivering (each sink's current try ends, bounded by `wait_s`, default one try's
        bound); returns the tries still queued."""
        if self.delivery is None:
            return 0
        waiting = self.delivery.waiting
        self.delivery.close(wait_s)
        return waiting


class LocalChanges:
    """What a `.wandb` tail changed since its last alert pass, and when the next is due.

    The tail's threads `add` what each poll wrote (`sync.local.follow`'s `on_update` results);
    the loop beside them asks `due()` every few tenths of a second and then runs
    `after_pass(take(store), detect=True)`: the runs that changed at most every ALERT_EVERY_S, and
    with nothing changed every LIVENESS_EVERY_S (every followed run turning stale or crashed).
    """

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
