"""Explain's ranking rules, in one place: which findings answer a step, one per cause, in what order.

A follower scrubbing through a run asks "what is going on here?" at any step N. The answer:

1. **Episodes.** Every finding spans its episode, `start`–`end` (a window's, an event's steps,
   else its own step). It answers N when N lies inside it, when it ended within the window
   before N (`near`: 30 steps, at least 3 logged rows), or when it begins within `GROUP_ROWS`
   = 3 logged rows after N (a cursor a row before a spike, a co-spike's precursor) — at its own
   strength there, not weakened because the step it is placed at is far away.
2. **One finding per cause and moment.** Findings of the same cause class whose spans lie
   within 3 logged rows of each other are one event: the strongest stays, the others are
   listed in its evidence (`related`) and their steps join its `event_steps`.
3. **Order.** Three keys, in turn:
   a. a finding that claims no cause (`none`: a level shift) comes last, whatever else;
   b. **what happened at N first**: a finding whose change — its start — lies at or near N
      (within `near` steps) outranks a trend already under way long before N. The trend is
      still listed, below, as context (`under_way`: "already drifting since step S"): the
      question at N is what changed there; a drift since a thousand steps earlier is the
      background, and a fork, a spike or a slowdown that starts at N is the news;
   c. **strength** = severity of the kind × confidence × 1/(1 + d/10), d the distance in
      logged rows from N to the finding's span (0 inside it); ties: nearer N, then earlier.
4. **Severity of a kind, by cause class** (the weights below; most severe first):

   | cause class | kinds (weight) | why there |
   |---|---|---|
   | `numerics` | nonfinite 5, overflow 4 | a NaN ends the run (grug crashes on it); everything after is damaged |
   | `optimizer`, `logit_growth`, `data_batch` | co-spike 3, logit growth 3, sustained loss rise 3, spike 2.5 | the model itself is being damaged |
   | `infrastructure` | resume mismatch 2.5, rewind 2.2, step gap 2, resume 1.8, throughput collapse 1.8, fork 1 | the run's machinery, not the model: costly, and a resume that lost state is as bad as a spike |
   | `moe_routing` | router entropy drop, drop/overflow rise, router z-loss jump 1.8 | a router shift precedes collapse but often recovers |
   | `optimizer` (norms) | grad spike, hyperball drift, Adam-group drift 1.6, parameter-norm jump 1.4 | slow or small: worth watching |
   | below an alert's bar | throughput dip 1, resume offset 1 | unusual, worth saying at a step inside it; nobody should be paged |
   | `heuristic_parameter` | any kind × 0.5 | expected dynamics of parameters set without gradients (a QB router bias): true, but the least worrying thing there |
   | `none` | level shift 0.8 | no cause claimed |

   A fork is a planned event and weighs least of the infrastructure; what it changed in the
   config is in its evidence.
5. **Severity level** (`level`): that strength before distance, cut in three — `high` ≥ 2.0,
   `medium` ≥ 1.0, `low` below; cause `none` is never above `low`. Incidents and alerts carry
   it (detect/incidents.py); alerts fire on `high` and on throughput collapses, so a finding
   below an alert's bar is `low` by construction.
6. **Coincidence**: when two or more causes other than `infrastructure`/`none` have spans within
   3 logged rows of each other, near N, the summary says so ("Two things happened at step S:
   …", S the earliest of them), so a follower never takes the first finding for the whole story.
"""

from __future__ import annotations

from typing import Any, Sequence

from marinctl import numbers as N
from marinctl.analysis.explain.explanations import headline, under_way_line

GROUP_ROWS = 3
LOSS = "train/loss"
SEVERITY = {"nonfinite": 5.0, "overflow": 4.0, "co_spike": 3.0, "logit_growth": 3.0, "sustained_rise": 3.0,
            "resume_mismatch": 2.5, "spike": 2.5, "rewind": 2.2, "step_gap": 2.0, "resume": 1.8,
            "throughput_collapse": 1.8, "routing_entropy_drop": 1.8, "drop_fraction_rise": 1.8, "overflow_rise": 1.8,
            "router_zloss_jump": 1.8, "grad_spike": 1.6, "hyperball_drift": 1.6, "adam_drift": 1.6,
            "param_norm_jump": 1.4, "fork": 1.0, "throughput_dip": 1.0, "resume_offset": 1.0, "level_shift": 0.8}
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


def ahead(interval: int) -> int:
    """How far after N a finding may begin and still answer N (rule 1)."""
    return GROUP_ROWS * max(interval, 1)


def relevant(f: dict[str, Any], n: int, interval: int, near: int) -> bool:
    """Whether a finding answers step N: its episode holds N, ended within `near` before it, or
    begins within GROUP_ROWS logged rows after it (rule 1)."""
    lo, hi = span(f)
    return lo - ahead(interval) <= n <= hi + near


def under_way(f: dict[str, Any], n: int, near: int) -> bool:
    """A trend that began more than `near` steps before N (rule 3b): context at N, not its news."""
    return span(f)[0] < n - near


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
    """'high' | 'medium' | 'low' from the strength explain ranks by (rule 5)."""
    w = weight(kind, cause_class, conf)
    if cause_class == "none" or w < MEDIUM:
        return "low"
    return "high" if w >= HIGH else "medium"


def rank_score(f: dict[str, Any], n: int, interval: int) -> float:
    return strength(f) / (1.0 + _distance(f, n) / max(interval, 1) / 10.0)


def merge(findings: Sequence[dict[str, Any]], n: int, interval: int) -> list[dict[str, Any]]:
    """Same-cause findings close together become one (the strongest, listing the rest): rule 2."""
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
            # ties (one NaN in the loss and in the cross-entropy): the loss, then the earliest
            best = max(run, key=lambda f: (rank_score(f, n, interval), f["metric"] == LOSS, -f["step"]))
            others = [f for f in run if f is not best]
            ev = dict(best["evidence"])
            if others:
                ev["related"] = [{"kind": f["kind"], "metric": f["metric"], "step": f["step"]} for f in others]
                steps = set(ev.get("event_steps") or [best["step"]])
                for f in others:
                    steps |= set(f["evidence"].get("event_steps") or [f["step"]])
                ev["event_steps"] = sorted(steps)
            out.append({**best, "evidence": ev})
    return out


def ranked(findings: Sequence[dict[str, Any]], n: int, interval: int, near: int) -> list[dict[str, Any]]:
    """Most important first (rule 3): a cause claimed, then what changed at or near N, then strength."""
    return sorted(findings, key=lambda f: (f["cause_class"] == "none", under_way(f, n, near),
                                           -rank_score(f, n, interval), _distance(f, n), f["step"]))


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
    """One line naming every cause at the step (or the one that stands out), then the trends
    already under way before it; None when nothing does."""
    if not findings:
        return None
    news = [f for f in findings if not under_way(f, n, near)]
    trends = [f for f in findings if under_way(f, n, near) and f["cause_class"] != "none"]
    together = coincidence(news, n, interval, near)
    if together:
        at = min(span(f)[0] for f in together)
        count = _COUNT_WORDS.get(len(together), str(len(together)))
        parts = [headline(f) for f in together]
        listed = "; and ".join(["; ".join(parts[:-1]), parts[-1]]) if len(parts) > 1 else parts[0]
        text = f"{count} things happened at step {N.count(at)}: {listed}."
    elif news and (news[0]["cause_class"] != "none" or not trends):
        text = f"What stands out near step {N.count(n)}: {headline(news[0])}."
    else:
        return f"Under way at step {N.count(n)}: " + "; ".join(under_way_line(f) for f in trends[:2]) + "."
    if trends:
        text += " Already under way: " + "; ".join(under_way_line(f) for f in trends[:2]) + "."
    return text
