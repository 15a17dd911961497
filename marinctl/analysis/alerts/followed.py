"""A followed run between alert passes: its baseline, its tracks, and what each pass raises.

A follow loop (sync/alerts.py) keeps one `Followed` per run. The run's first pass is its
baseline (`baseline`): what it holds then raises nothing — its liveness is noted, every rule's
track is primed with the values before the baseline step (an episode under way is known and
never fired), and so is a NaN/Inf track for each metric with a non-finite value near it. A run
created after following began has no baseline: all of it is new (since = -1). Each later pass
(`candidates`) reads only the rows its tracks have not judged and returns what the run raises
(analysis/alerts/raised.py), before the store says which of them are new.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from marinctl.analysis.alerts import raised
from marinctl.analysis.alerts.conditions import Track, nonfinite_test, rule_test
from marinctl.analysis.alerts.rules import Rule, Rules
from marinctl.store import Connection, history, metrics

PRIME_SPAN = 5_000      # steps read before a baseline for a window's first values


@dataclass
class Followed:
    """What a follow loop remembers of one run between passes."""

    since: int                                   # the baseline step: what began at or before it is history
    liveness: str | None = None
    rules: dict[str, Track] = field(default_factory=dict)
    nonfinite: dict[str, Track] = field(default_factory=dict)
    nan_checked: int = -1                        # last step looked at for NaN/Inf


def baseline(con: Connection, run: dict[str, Any], rules: Rules, now: datetime, started: datetime) -> Followed:
    """A run's first pass: its liveness and every rule's state as they are, raising nothing.
    A run created at or after `started` (when following began) has no history to keep quiet."""
    created = run.get("created_at")
    if created is not None and created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    new = created is not None and created >= started
    last = run.get("last_step")
    since = -1 if new or last is None else int(last)
    mem = Followed(since, None if new else raised.liveness(run, now, rules.stale_after), nan_checked=since)
    if new and mem.liveness is None:
        mem.liveness = "live"
    segs = _segments(run)
    for rule in rules_for(rules, run):
        track = mem.rules[rule.name] = Track(keep=rule.rows_needed)
        if since >= 0:
            track.prime(*_tail(con, segs, rule.metric, since, rule.rows_needed), rule_test(rule))
    if since >= 0:
        for key, *_ in history.nonfinite(con, segs, max(since - PRIME_SPAN, 0), since + 1):
            _nan_track(con, mem, segs, key)
    return mem


def candidates(con: Connection, run: dict[str, Any], mem: Followed, rules: Rules,
               now: datetime) -> list[raised.Candidate]:
    """What the run raises since the last pass: incidents, NaN/Inf episodes, rule episodes, a
    turn of its liveness (the store then keeps those it has no alert of)."""
    segs = _segments(run)
    out = raised.from_incidents(con, run, mem.since)
    # NaN/Inf: metrics with one among the new rows, and those whose NaN episode is still open
    last = run.get("last_step")
    if last is not None and int(last) > mem.nan_checked:
        for key, *_ in history.nonfinite(con, segs, mem.nan_checked + 1, None):
            if key not in mem.nonfinite:
                _nan_track(con, mem, segs, key)
        for key, track in list(mem.nonfinite.items()):
            steps, values = metrics.series(con, segs, key, _after(track, mem.nan_checked), None)
            out += [raised.from_nonfinite(key, ep) for ep in track.advance(steps, values, nonfinite_test)]
            if track.open is None:
                del mem.nonfinite[key]
        mem.nan_checked = int(last)
    for rule in rules_for(rules, run):
        track = mem.rules[rule.name]
        steps, values = metrics.series(con, segs, rule.metric, _after(track, mem.since), None)
        out += [raised.from_rule(rule, ep) for ep in track.advance(steps, values, rule_test(rule))]
    state = raised.liveness(run, now, rules.stale_after)
    if state != "unknown":
        turned = raised.from_liveness(run, mem.liveness, state, now, rules.stale_after)
        if turned is not None:
            out.append(turned)
        mem.liveness = state
    return out


def rules_for(rules: Rules, run: dict[str, Any]) -> list[Rule]:
    """The rules that watch `run`."""
    return [r for r in rules.rules if r.selects(run)]


def _segments(run: dict[str, Any]) -> list[tuple[int, None, None]]:
    return [(run["run_pk"], None, None)]


def _nan_track(con: Connection, mem: Followed, segs, key: str) -> None:
    """A NaN/Inf track for `key`, primed with its rows up to what was already looked at."""
    track = mem.nonfinite[key] = Track(keep=0, finite_only=False)
    if mem.nan_checked >= 0:
        steps, values = metrics.series(con, segs, key, max(mem.nan_checked - PRIME_SPAN, 0), mem.nan_checked + 1)
        track.prime(steps, values, nonfinite_test)
        track.last = mem.nan_checked


def _tail(con: Connection, segs, key: str, upto: int, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """The last values of `key` at or before `upto`: enough for a window (read further back when sparse)."""
    steps, values = metrics.series(con, segs, key, max(upto + 1 - PRIME_SPAN, 0), upto + 1)
    if np.count_nonzero(np.isfinite(values)) < rows and upto + 1 - PRIME_SPAN > 0:
        steps, values = metrics.series(con, segs, key, None, upto + 1)
    return steps, values


def _after(track: Track, otherwise: int) -> int:
    """The first step a track has not judged."""
    return (track.last if track.last is not None else otherwise) + 1
