"""What an alert pass raises for one run: candidates, before the store says which are new.

The built-in sources:
- **incidents** (analysis/detect/incidents.py, explain's grouping): every one of `high`
  severity — the rule explain ranks by — and every throughput collapse (tokens/s or step
  time below the run's own recent range, detectors.throughput) whatever its level. One per
  run, cause and episode; an incident that began at or before the follow's baseline step is
  history and raises nothing.
- **non-finite values**: rows in a row where a logged metric is NaN/Inf, per metric
  (conditions.py). Detection stores one NaN finding per metric and pass, so a run that keeps
  logging NaN would look like a new incident at every pass; an episode of rows does not.
- **liveness**: a run turning stale (no heartbeat for `stale_after`) or crashed (its source
  says crashed, failed or killed). Local runs are stale and crashed by the `.wandb` file's
  age as W&B's LEET reads it (sync/local.py stores that state); a W&B run is stale when it
  says running but its heartbeat is older than STALE_AFTER_S, as watch's header reads it. A
  `[liveness] stale_after` in alerts.toml overrides both.
- **rules** from alerts.toml and presets (rules.py, conditions.py): window episodes of a metric,
  and a run gone `silent` or `stalled` for a rule's `after` seconds (one alert per step it
  stopped at). A `nonfinite` rule gives the built-in NaN/Inf alert of its metric its priority.
- **the hero leaving the ladder's band** (analysis/scaling/hero_band.py): one per episode of
  evals outside the interval the ladder gives one run at that point of the schedule.

Every candidate has a priority (priority.py): a rule's own, else its severity's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from marinctl.analysis.alerts import priority as P
from marinctl.analysis.alerts.conditions import Episode
from marinctl.analysis.alerts.rules import Rule
from marinctl.analysis.detect import incidents as inc_mod
from marinctl.store import Connection
from marinctl.store import anomalies as anomalies_store
from marinctl.store.lineage import single

STALE_AFTER_S = 15 * 60          # a W&B run's heartbeat this old: stale (views/run_header.py reads it the same way)
ALWAYS = ("throughput_collapse",)   # incident kinds that alert at any severity
CONTEXT = 2_000                  # steps of stored detections read before the baseline (incidents straddling it)


@dataclass
class Candidate:
    """One alert a pass may fire: its episode identity (run, `cause`, `start`) and what it says."""

    cause: str                     # a cause class, 'stale', 'crashed', 'nonfinite:<key>', 'rule:<name>'
    start: int
    end: int
    step: int                      # the step to explain
    kind: str
    cause_class: str
    severity: str
    metric: str | None = None
    gap: int = 0                   # a stored alert within this many steps is the same episode (0: same start)
    details: dict[str, Any] = field(default_factory=dict)
    priority: str = ""             # emergency | high | normal | low ('' : its severity's)

    def __post_init__(self) -> None:
        self.priority = self.priority or P.from_severity(self.severity)


# --- incidents -----------------------------------------------------------------------------------

def from_incidents(con: Connection, run: dict[str, Any], since: int) -> list[Candidate]:
    """High-severity incidents (and slowdowns) of `run` that began after step `since`."""
    rows = anomalies_store.stored(con, single(run), since - CONTEXT)
    detections = [inc_mod.as_anomaly(r) for r in rows]
    out = []
    for inc in inc_mod.incidents(detections):
        if inc.start <= since or inc.kind == "nonfinite":
            continue
        if inc.severity != "high" and inc.kind not in ALWAYS:
            continue
        interval = max((int(a.details.get("interval") or 1) for a in detections
                        if a.cause_class == inc.cause_class and inc.start <= a.step <= inc.end), default=1)
        out.append(Candidate(inc.cause_class, inc.start, inc.end, inc.step, inc.kind, inc.cause_class, inc.severity,
                             inc.metric, gap=inc_mod.GROUP_ROWS * interval,
                             details={"score": inc.score, "steps": list(inc.steps[:50]), "detections": inc.detections}))
    return out


def from_hero_band(con: Connection, run: dict[str, Any], since: int) -> list[Candidate]:
    """The hero's episodes outside the ladder's band that began after step `since`."""
    from marinctl.analysis.scaling.hero_band import CAUSE, episodes_for

    return [Candidate(CAUSE, ep.start, ep.end, ep.start, CAUSE, "none", "medium", ep.figures["metric"], gap=ep.gap,
                      details=ep.figures) for ep in episodes_for(con, run, since)]


# --- non-finite values and rules -----------------------------------------------------------------

def from_nonfinite(key: str, ep: Episode) -> Candidate:
    return Candidate(f"nonfinite:{key}", ep.start, ep.end, ep.start, "nonfinite", "numerics", "high", key,
                     details={"value": _spelled(ep.figure)})


def from_rule(rule: Rule, ep: Episode) -> Candidate:
    details = {"rule": rule.name, "rule_kind": rule.kind, "window": rule.window, "figure": _spelled(ep.figure)}
    if rule.kind != "zscore" or rule.recent > 1:
        details["stat"] = rule.stat
    for k in ("above", "below", "relative", "absolute", "z", "baseline"):
        if getattr(rule, k) is not None:
            details[k] = getattr(rule, k)
    if rule.kind == "zscore":
        details.update(recent=rule.recent, min_rise=rule.min_rise)
    if rule.kind != "threshold":
        details["direction"] = rule.direction
    if rule.source:
        details["source"] = rule.source
    return Candidate(f"rule:{rule.name}", ep.start, ep.end, ep.start, rule.kind, rule.cause_class or "none",
                     rule.severity, rule.metric, details=details, priority=rule.priority)


def with_rule(c: Candidate, rule: Rule) -> Candidate:
    """A built-in NaN/Inf candidate at a `nonfinite` rule's priority, naming the rule."""
    c.priority, c.severity = rule.priority, rule.severity
    c.details.update(rule=rule.name, **({"source": rule.source} if rule.source else {}))
    return c


def from_quiet(rule: Rule, run: dict[str, Any], step: int, quiet_s: float) -> Candidate:
    """A run `silent` (no heartbeat) or `stalled` (no new step) for `quiet_s` ≥ the rule's `after`:
    one alert per step it stopped at."""
    details = {"rule": rule.name, "rule_kind": rule.kind, "after_s": rule.after, "quiet_s": round(quiet_s, 1),
               "state": run.get("state"), **({"source": rule.source} if rule.source else {})}
    return Candidate(f"rule:{rule.name}", step, step, max(step, 0), rule.kind, rule.cause_class or "infrastructure",
                     rule.severity, None, details=details, priority=rule.priority)


def _spelled(x: float) -> float | str:
    if x != x:
        return "NaN"
    if x in (float("inf"), float("-inf")):
        return "Infinity" if x > 0 else "-Infinity"
    return x


# --- liveness ------------------------------------------------------------------------------------

def liveness(run: dict[str, Any], now: datetime, stale_after: float | None = None) -> str:
    """'live' | 'stale' | 'crashed' | 'finished' | 'unknown' (see the module doc)."""
    state = (run.get("state") or "").lower()
    if state in ("crashed", "failed", "killed"):
        return "crashed"
    if state == "finished":
        return "finished"
    if state not in ("running", "stale"):
        return "unknown"
    local = run.get("source") != "wandb"
    if stale_after is None and local:
        return "stale" if state == "stale" else "live"
    beat = run.get("heartbeat_at")
    if beat is None:
        return "unknown"
    beat = beat if beat.tzinfo else beat.replace(tzinfo=timezone.utc)
    limit = stale_after if stale_after is not None else STALE_AFTER_S
    return "stale" if (now - beat).total_seconds() >= limit else "live"


def from_liveness(run: dict[str, Any], before: str | None, now_is: str, now: datetime,
                  stale_after: float | None) -> Candidate | None:
    """An alert when a run turns stale (from live) or crashed (from live or stale)."""
    turned = (now_is == "stale" and before == "live") or (now_is == "crashed" and before in ("live", "stale"))
    if not turned:
        return None
    last = run.get("last_step")
    step = int(last) if last is not None else -1
    beat = run.get("heartbeat_at")
    age = None
    if beat is not None:
        beat = beat if beat.tzinfo else beat.replace(tzinfo=timezone.utc)
        age = max((now - beat).total_seconds(), 0.0)
    details = {"state": run.get("state"), "was": before, "silent_s": age,
               "stale_after_s": stale_after if stale_after is not None else (None if run.get("source") != "wandb"
                                                                            else STALE_AFTER_S)}
    return Candidate(now_is, step, step, max(step, 0), now_is, "infrastructure",
                     "high" if now_is == "crashed" else "medium", None, details=details)
