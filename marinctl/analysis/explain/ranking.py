"""Explain's findings made one per cause, ranked, and coincidences said out loud.

A person asking "why is there a peak near step N?" needs every cause that is there, once
each, most important first:

- **one finding per cause and moment**: findings of the same cause class whose spans (an
  event's `start`–`end`, else its step) lie within `GROUP_ROWS` = 3 logged rows of each other
  are one event — the strongest stays, the others are listed in its evidence (`related`) and
  their steps join its `event_steps`. A stored detection and the same one re-found around N
  collapse the same way.
- **rank** = severity of the kind × confidence × 1/(1 + d/10), d the distance in logged rows
  from N to the finding's span (0 inside it). Severity: non-finite values first, then the
  signatures that mean training went wrong (co-spikes, logit growth, loss rises, a resume
  whose loss does not match its parent's, spikes), then infrastructure, router and norm
  signals; a fork is a planned event and weighs least of the infrastructure. Expected
  dynamics (`heuristic_parameter`) count half: true, but the least worrying thing there.
  Level shifts (cause `none`) last.
- **severity level** (`level`): that same strength, before distance, cut in three — `high`
  ≥ 2.0 (NaN/Inf, overflow, an optimizer co-spike with its grad precursor, logit growth, a
  sustained loss excursion, a resume mismatch), `medium` ≥ 1.0 (spikes without a precursor,
  gaps and restarts, slowdowns, drifting norms, router shifts), `low` below (forks, lone grad
  spikes, expected dynamics, level shifts). Cause `none` is never above `low`. Incidents and
  alerts carry it (incidents.py).
- **coincidence**: when two or more causes other than `infrastructure`/`none` have spans
  within `GROUP_ROWS` rows of each other, near N, the summary says so: "Two things happened
  at step S: …" (S: the earliest of them) — so a follower never takes the first finding for
  the whole story.
"""

from __future__ import annotations

from typing import Any, Sequence

from marinctl import numbers as N
from marinctl.analysis.explain.explanations import headline

GROUP_ROWS = 3
SEVERITY = {"nonfinite": 5.0, "overflow": 4.0, "co_spike": 3.0, "logit_growth": 3.0, "sustained_rise": 3.0,
            "resume_mismatch": 2.5, "spike": 2.5, "rewind": 2.2, "step_gap": 2.0, "resume": 1.8,
            "throughput_collapse": 1.8, "routing_entropy_drop": 1.8, "drop_fraction_rise": 1.8, "overflow_rise": 1.8,
            "router_zloss_jump": 1.8, "grad_spike": 1.6, "hyperball_drift": 1.6, "adam_drift": 1.6,
            "param_norm_jump": 1.4, "fork": 1.0, "level_shift": 0.8}
# confidence of a detection that does not carry its own (details["confidence"])
CONFIDENCE = {"nonfinite": 0.99, "overflow": 0.9, "fork": 0.95, "rewind": 0.9, "step_gap": 0.9, "resume": 0.85,
              "resume_mismatch": 0.85, "throughput_collapse": 0.8, "hyperball_drift": 0.8, "grad_spike": 0.5,
              "sustained_rise": 0.6, "spike": 0.65}
HIGH, MEDIUM = 2.0, 1.0
QUIET_CAUSES = ("infrastructure", "none")
_COUNT_WORDS = {2: "Two", 3: "Three", 4: "Four", 5: "Five"}


def span(f: dict[str, Any]) -> tuple[int, int]:
    """The steps a finding covers: its event's start–end, else its own step."""
    d = f["evidence"]
    lo, hi = d.get("start"), d.get("end")
    steps = d.get("event_steps") or []
    if isinstance(lo, int) and isinstance(hi, int):
        return min(lo, f["step"]), max(hi, f["step"])
    if steps:
        return min(min(steps), f["step"]), max(max(steps), f["step"])
    return f["step"], f["step"]


def _distance(f: dict[str, Any], n: int) -> int:
    lo, hi = span(f)
    return 0 if lo <= n <= hi else min(abs(n - lo), abs(n - hi))


def confidence(kind: str, details: dict[str, Any]) -> float:
    """A detection's confidence: its own when it carries one, else its kind's."""
    if "confidence" in details:
        return float(details["confidence"])
    if kind == "co_spike":
        return 0.8 if details.get("precursor_steps") else 0.55
    return CONFIDENCE.get(kind, 0.6)


def weight(kind: str, cause_class: str, conf: float) -> float:
    """Severity of the kind × confidence; expected dynamics count half."""
    return SEVERITY.get(kind, 1.0) * (0.5 if cause_class == "heuristic_parameter" else 1.0) * conf


def strength(f: dict[str, Any]) -> float:
    """Severity × confidence, before distance."""
    return weight(f["kind"], f["cause_class"], f["confidence"])


def level(kind: str, cause_class: str, conf: float) -> str:
    """'high' | 'medium' | 'low' from the strength explain ranks by (see the module doc)."""
    w = weight(kind, cause_class, conf)
    if cause_class == "none" or w < MEDIUM:
        return "low"
    return "high" if w >= HIGH else "medium"


def rank_score(f: dict[str, Any], n: int, interval: int) -> float:
    return strength(f) / (1.0 + _distance(f, n) / max(interval, 1) / 10.0)


def merge(findings: Sequence[dict[str, Any]], n: int, interval: int) -> list[dict[str, Any]]:
    """Same-cause findings close together become one (the strongest, listing the rest)."""
    gap = GROUP_ROWS * max(interval, 1)
    out: list[dict[str, Any]] = []
    by_cause: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by_cause.setdefault(f["cause_class"], []).append(f)
    for group in by_cause.values():
        group = sorted(group, key=lambda f: span(f))
        runs: list[list[dict[str, Any]]] = []
        for f in group:
            if runs and span(f)[0] - max(span(g)[1] for g in runs[-1]) <= gap:
                runs[-1].append(f)
            else:
                runs.append([f])
        for run in runs:
            best = max(run, key=lambda f: rank_score(f, n, interval))
            others = [f for f in run if f is not best]
            if others:
                ev = dict(best["evidence"])
                ev["related"] = [{"kind": f["kind"], "metric": f["metric"], "step": f["step"]} for f in others]
                steps = set(ev.get("event_steps") or [best["step"]])
                for f in others:
                    steps |= set(f["evidence"].get("event_steps") or [f["step"]])
                ev["event_steps"] = sorted(steps)
                best = {**best, "evidence": ev}
            out.append(best)
    return out


def ranked(findings: Sequence[dict[str, Any]], n: int, interval: int) -> list[dict[str, Any]]:
    """Most important first (ties: nearer N, then earlier)."""
    return sorted(findings, key=lambda f: (-rank_score(f, n, interval), _distance(f, n), f["step"]))


def coincidence(findings: Sequence[dict[str, Any]], n: int, interval: int, near: int) -> list[dict[str, Any]]:
    """The best finding of each cause (not infrastructure/none) that coincides with another near N."""
    gap = GROUP_ROWS * max(interval, 1)
    best: dict[str, dict[str, Any]] = {}
    for f in findings:   # already ranked: the first of each cause is its best
        if f["cause_class"] not in QUIET_CAUSES and _distance(f, n) <= near and f["cause_class"] not in best:
            best[f["cause_class"]] = f
    picks = list(best.values())
    together = [f for f in picks if any(g is not f and _close(span(f), span(g), gap) for g in picks)]
    return together if len(together) >= 2 else []


def _close(a: tuple[int, int], b: tuple[int, int], gap: int) -> bool:
    return a[0] - b[1] <= gap and b[0] - a[1] <= gap


def summary(findings: Sequence[dict[str, Any]], n: int, interval: int, near: int) -> str | None:
    """One line naming every cause at the step (or the one that stands out); None when nothing does."""
    if not findings:
        return None
    together = coincidence(findings, n, interval, near)
    if together:
        at = min(span(f)[0] for f in together)
        count = _COUNT_WORDS.get(len(together), str(len(together)))
        parts = [headline(f) for f in together]
        listed = "; and ".join(["; ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else parts[0]
        return f"{count} things happened at step {N.count(at)}: {listed}."
    return f"What stands out near step {N.count(n)}: {headline(findings[0])}."
