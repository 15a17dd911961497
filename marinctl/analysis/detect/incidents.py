"""Incidents: detections made into one episode each — what a person and an alert need.

Detection scores rows: a router collapse crosses its bar at ~150 logged rows, an optimizer
co-spike at three or four. `anomalies` lists each of them under `--detail`; a person reading
what happened, and an alert that must fire once per run, cause and episode, need one record
per incident instead — where it started, its peak, where it ended, its cause, how severe, and
the detected steps as evidence.

The grouping is explain's (ranking.merge), so `anomalies` and `explain step N` tell the same
story:
- **same cause, a few logged rows apart**: detections of one run with the same cause class
  whose spans (a detection's `start`–`end`, else its step) lie within `GROUP_ROWS` = 3 logged
  rows of each other are one incident. A co-spike over three steps is one; so is a router
  collapse scored at 150 consecutive rows. The logged interval is each detection's own
  (`details["interval"]`, stamped by detectors.scan: a run logging every 10 steps groups 30
  steps apart); without one, every step.
- **one incident per window**: a window detection (throughput collapse, logit growth,
  Adam-group drift, sustained loss excursion, resume mismatch: those carrying `start` and
  `end`) is one incident over its window; per-step detections of its cause inside it (or
  within the gap) join it, but two windows of different kinds stay apart — a slowdown and a
  restart inside it are two things that happened, not one.
- **its peak**: the incident's kind and metric are those of its window (the strongest, when
  several of one kind), else of its strongest detection (kind severity × confidence,
  explain/ranking.py); its `step` is the highest-scored detection of that kind (scores of different
  kinds do not compare: a z-score, a ratio, a percentage).
- **severity**: ranking.level of its strongest detection — the rule explain ranks by.
- **below an alert's bar** (a throughput dip, a resume offset: `BELOW_BAR`): incidents of their
  own, grouped among themselves only — never joined by another detection, never joining one —
  so every other incident, and so every alert, is what it would be without them (they are
  `low`: no alert fires on them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from marinctl.analysis.explain import ranking
from marinctl.domain import Anomaly

GROUP_ROWS = ranking.GROUP_ROWS
LOSS = "train/loss"
BELOW_BAR = ("throughput_dip", "resume_offset")


@dataclass(frozen=True)
class Incident:
    """One episode: what a person and an alert need."""

    run_pk: int
    metric: str
    kind: str
    cause_class: str
    start: int             # first step of the episode
    step: int              # its peak (highest score)
    end: int               # last step
    score: float           # the peak's score
    severity: str          # "high" | "medium" | "low": the same rule explain ranks by
    steps: tuple[int, ...] # the detected steps, as evidence
    detections: int = 1    # how many stored detections it groups

    @property
    def key(self) -> tuple[int, str, int]:
        """(run_pk, cause_class, start): an episode's identity while it grows (its start stays)."""
        return self.run_pk, self.cause_class, self.start


def severity(kind: str, cause_class: str, confidence: float | None = None) -> str:
    """'high' | 'medium' | 'low' for a detection of `kind` and `cause_class` (ranking.level);
    without a confidence, the kind's own default (ranking.CONFIDENCE)."""
    conf = ranking.confidence(kind, {}) if confidence is None else float(confidence)
    return ranking.level(kind, cause_class, conf)


def span(a: Anomaly) -> tuple[int, int]:
    """The steps a detection covers: its `start`–`end` (or its event's steps), else its step."""
    d = a.details
    lo, hi = d.get("start"), d.get("end")
    if isinstance(lo, int) and isinstance(hi, int):
        return min(lo, a.step), max(hi, a.step)
    steps = [s for s in d.get("event_steps") or [] if isinstance(s, int)]
    if steps:
        return min(min(steps), a.step), max(max(steps), a.step)
    return a.step, a.step


def is_window(a: Anomaly) -> bool:
    d = a.details
    return isinstance(d.get("start"), int) and isinstance(d.get("end"), int) and "event_steps" not in d


def _interval(a: Anomaly) -> int:
    got = a.details.get("interval")
    return max(int(got), 1) if isinstance(got, (int, float)) and got == got else 1


def _strength(a: Anomaly) -> float:
    return ranking.weight(a.kind, a.cause_class, ranking.confidence(a.kind, a.details))


def _evidence_steps(a: Anomaly) -> set[int]:
    d = a.details
    steps = {a.step}
    for key in ("event_steps", "tail_steps", "grad_steps", "loss_steps"):
        steps |= {int(s) for s in d.get(key) or [] if isinstance(s, int)}
    return steps


def _incident(group: list[Anomaly]) -> Incident:
    lead = [a for a in group if is_window(a)] or group
    best = max(lead, key=lambda a: (_strength(a), a.score if a.score == a.score else float("-inf")))
    peak = max((a for a in group if a.kind == best.kind),   # ties: the loss before other keys, then the earliest
               key=lambda a: (a.score if a.score is not None and a.score == a.score else float("-inf"),
                              a.metric == LOSS, -a.step))
    spans = [span(a) for a in group]
    level = max((ranking.level(a.kind, a.cause_class, ranking.confidence(a.kind, a.details)) for a in group),
                key=("low", "medium", "high").index)
    steps: set[int] = set()
    for a in group:
        steps |= _evidence_steps(a)
    return Incident(peak.run_pk, peak.metric, peak.kind, peak.cause_class, min(s[0] for s in spans), peak.step,
                    max(s[1] for s in spans), float(peak.score) if peak.score is not None else float("nan"), level,
                    tuple(sorted(steps)), len(group))


def incidents(detections: Sequence[Anomaly]) -> list[Incident]:
    """One Incident per episode (see the module doc), ordered by (run_pk, start)."""
    by: dict[tuple[int, str, bool], list[Anomaly]] = {}
    for a in detections:
        by.setdefault((a.run_pk, a.cause_class, a.kind in BELOW_BAR), []).append(a)
    out: list[Incident] = []
    for group in by.values():
        group.sort(key=lambda a: (span(a), a.step, a.kind))
        open_: list[tuple[list[Anomaly], list[int], set[str]]] = []   # (members, [end], window kinds)
        for a in group:
            lo, hi = span(a)
            gap = GROUP_ROWS * _interval(a)
            home = next((g for g in open_ if lo - g[1][0] <= gap
                         and not (is_window(a) and g[2] and a.kind not in g[2])), None)
            if home is None:
                home = ([], [hi], set())
                open_.append(home)
            home[0].append(a)
            home[1][0] = max(home[1][0], hi)
            if is_window(a):
                home[2].add(a.kind)
        out += [_incident(members) for members, _, _ in open_]
    return sorted(out, key=lambda i: (i.run_pk, i.start, i.step, i.cause_class))


def as_anomaly(row: dict[str, Any]) -> Anomaly:
    """A stored detection (store/anomalies.stored's dict) as the Anomaly it was stored from."""
    return Anomaly(row["run_pk"], row["step"], row["metric"], row["kind"],
                   row["score"] if row["score"] is not None else float("nan"), row["cause_class"], row["details"] or {})
