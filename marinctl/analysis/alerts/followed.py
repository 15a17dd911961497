"""A followed run between alert passes: its baseline, its tracks, and what each pass raises.

A follow loop (sync/alerts.py) keeps one `Followed` per run. The run's first pass is its
baseline (`baseline`): what it holds then raises nothing — its liveness is noted, every rule's
track is primed with the values before the baseline step (an episode under way is known and
never fired), so is a NaN/Inf track for each metric with a non-finite value near it, and so is
every `silent`/`stalled` rule that holds already. A run created after following began has no
baseline: all of it is new (since = -1) — but a fork child's parent rows up to its fork step are
history all the same. Each later pass (`candidates`) reads only the rows its tracks have not
judged and returns what the run raises (analysis/alerts/raised.py), before the store says which
of them are new.

Restores are not incidents. A rule reads a run through its lineage: a resumed fork child's rows
are judged against its parent's up to the fork step — the steps it replays — never against the
parent's last steps before the restore. A rewind (rows the track already judged, rewritten) is
seen by comparing the values a track holds with the store's: the track is primed again with the
rows before the first one that differs, and the replayed rows are judged anew against them, so
a replay that matches raises nothing and one that does not still alerts. A loss, step-counter
or `_runtime` reset moves no window: windows count logged rows, and `stalled` reads the newest
row's own `_timestamp`. A mismatch between a fork child and its parent is explain's finding
(analysis/detect/resume.py), raised with the incidents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import numpy as np

from marinctl.analysis.alerts import raised
from marinctl.analysis.alerts.conditions import Track, nonfinite_test, rule_test
from marinctl.analysis.alerts.rules import TIME_KINDS, Rule, Rules
from marinctl.store import Connection, history, lineage, metrics

PRIME_SPAN = 5_000      # steps read before a baseline for a window's first values
PACE_ROWS = 50          # rows of `_timestamp` read for the newest step's time


@dataclass
class Followed:
    """What a follow loop remembers of one run between passes."""

    since: int                                   # the baseline step: what began at or before it is history
    liveness: str | None = None
    rules: dict[str, Track] = field(default_factory=dict)
    nonfinite: dict[str, Track] = field(default_factory=dict)
    nan_checked: int = -1                        # last step looked at for NaN/Inf
    quiet: dict[str, int | None] = field(default_factory=dict)   # silent/stalled rule -> the step it holds at
    segments: list | None = None                 # the run's lineage, once its own rows are known


def baseline(con: Connection, run: dict[str, Any], rules: Rules, now: datetime, started: datetime) -> Followed:
    """A run's first pass: its liveness and every rule's state as they are, raising nothing.
    A run created at or after `started` (when following began) has no history to keep quiet."""
    created = run.get("created_at")
    if created is not None and created.tzinfo is None:
        created = created.replace(tzinfo=timezone.utc)
    new = created is not None and created >= started
    last = run.get("last_step")
    since = -1 if new or last is None else int(last)
    fork = run.get("fork_step") if run.get("fork_parent") else None
    history_to = since if since >= 0 else int(fork) if fork is not None else -1   # what is history
    mem = Followed(since, None if new else raised.liveness(run, now, rules.stale_after), nan_checked=history_to)
    if new and mem.liveness is None:
        mem.liveness = "live"
    segs = _segments(con, run, mem)
    for rule in rules_for(rules, run):
        if rule.kind in TIME_KINDS:
            held = _quiet(con, run, segs, rule, now) is not None
            mem.quiet[rule.name] = _last(run) if held and since >= 0 else None
            continue
        if rule.kind == "nonfinite":
            continue
        track = mem.rules[rule.name] = Track(keep=rule.rows_needed)
        if history_to >= 0:
            track.prime(*_tail(con, segs, rule.metric, history_to, rule.rows_needed), rule_test(rule))
            track.last = max(track.last if track.last is not None else -1, history_to)
    if history_to >= 0:
        for key, *_ in history.nonfinite(con, segs, max(history_to - PRIME_SPAN, 0), history_to + 1):
            _nan_track(con, mem, segs, key)
    return mem


def candidates(con: Connection, run: dict[str, Any], mem: Followed, rules: Rules,
               now: datetime) -> list[raised.Candidate]:
    """What the run raises since the last pass: incidents, NaN/Inf episodes, rule episodes, a
    turn of its liveness (the store then keeps those it has no alert of)."""
    segs = _segments(con, run, mem)
    out = raised.from_incidents(con, run, mem.since) + raised.from_hero_band(con, run, mem.since)
    # NaN/Inf: metrics with one among the new rows, and those whose NaN episode is still open
    last = run.get("last_step")
    if last is not None and int(last) > mem.nan_checked:
        for key, *_ in history.nonfinite(con, segs, mem.nan_checked + 1, None):
            if key not in mem.nonfinite:
                _nan_track(con, mem, segs, key)
        for key, track in list(mem.nonfinite.items()):
            steps, values = metrics.series(con, segs, key, _after(track, mem.nan_checked), None)
            found = [raised.from_nonfinite(key, ep) for ep in track.advance(steps, values, nonfinite_test)]
            rule = next((r for r in rules_for(rules, run) if r.kind == "nonfinite" and r.metric == key), None)
            out += [raised.with_rule(c, rule) for c in found] if rule is not None else found
            if track.open is None:
                del mem.nonfinite[key]
        mem.nan_checked = int(last)
    for rule in rules_for(rules, run):
        if rule.kind in TIME_KINDS:
            quiet_s = _quiet(con, run, segs, rule, now)
            step = _last(run)
            if quiet_s is not None and mem.quiet.get(rule.name) != step:
                out.append(raised.from_quiet(rule, run, step, quiet_s))
            mem.quiet[rule.name] = step if quiet_s is not None else None
            continue
        if rule.kind == "nonfinite":
            continue
        track = mem.rules[rule.name]
        test = rule_test(rule)
        steps, values = _unjudged(con, segs, rule, track, mem.since, test)
        out += [raised.from_rule(rule, ep) for ep in track.advance(steps, values, test)]
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


def _unjudged(con: Connection, segs, rule: Rule, track: Track, since: int, test) -> tuple[np.ndarray, np.ndarray]:
    """The rows `track` has not judged — after a rewind, the replayed ones again. The rows it holds
    (the window's tail) are read back with the new ones: where the store's differ, history was
    rewritten from that step, and the track is primed afresh with the rows before it."""
    held = track.steps
    lo = int(held[0]) if len(held) else _after(track, since)
    steps, values = metrics.series(con, segs, rule.metric, lo, None)
    if len(held) and track.last is not None:
        old = steps <= track.last
        now_s, now_v = steps[old], values[old]
        if track.finite_only:
            keep = np.isfinite(now_v)
            now_s, now_v = now_s[keep], now_v[keep]
        n = min(len(now_s), len(held))
        wrong = np.nonzero((now_s[:n] != held[:n]) | (now_v[:n] != track.values[:n]))[0]
        if len(wrong):
            differs = int(min(now_s[wrong[0]], held[wrong[0]]))
        elif len(now_s) != len(held):        # rows gone from the judged steps, or new ones among them
            differs = int(held[n]) if len(held) > n else int(now_s[n])
        else:
            differs = None
        if differs is not None:
            track.open, track.last = None, None
            track.steps, track.values = track.steps[:0], track.values[:0]
            track.prime(*_tail(con, segs, rule.metric, differs - 1, rule.rows_needed), test)
            track.last = differs - 1
    return steps, values


def _quiet(con: Connection, run: dict[str, Any], segs, rule: Rule, now: datetime) -> float | None:
    """How long a running run has been `silent` (no heartbeat) or `stalled` (no new step, its
    heartbeat newer) when that is at least the rule's `after`, else None."""
    if (run.get("state") or "").lower() not in ("running", "stale"):
        return None
    beat = run.get("heartbeat_at")
    beat_age = (now - (beat if beat.tzinfo else beat.replace(tzinfo=timezone.utc))).total_seconds() if beat else None
    if rule.kind == "silent":
        return beat_age if beat_age is not None and beat_age >= rule.after else None
    last = run.get("last_step")
    if last is None:
        return None
    _, stamps = metrics.series(con, segs, "_timestamp", max(int(last) - PACE_ROWS, 0), None)
    stamps = stamps[np.isfinite(stamps)]
    if not len(stamps):
        return None
    step_age = now.timestamp() - float(stamps.max())
    alive = beat_age is None or beat_age < rule.after
    return step_age if step_age >= rule.after and alive else None


def _last(run: dict[str, Any]) -> int:
    return int(run["last_step"]) if run.get("last_step") is not None else -1


def _segments(con: Connection, run: dict[str, Any], mem: Followed | None) -> list:
    """The run's rows as its rules read them: its own, after its lineage's up to its fork step."""
    if mem is not None and mem.segments is not None:
        return mem.segments
    if not run.get("fork_parent"):
        segs = [(run["run_pk"], None, None)]
    else:
        chain = lineage.chain(con, run)
        segs = lineage.segments_for(chain)
        if len(chain) > 1 and chain[-1].get("first_step") is None:
            return segs                      # no own row yet: read the lineage again next pass
    if mem is not None:
        mem.segments = segs
    return segs


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
