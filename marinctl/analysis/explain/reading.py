"""What explain reads for a span of steps, once: the detections whose episodes reach into it, and
the run's logging interval there — `explain step N` reads the span [N, N], `explain --range A:B`
the span [A, B], and both answer each step from the same reading (ranking.py's rules).

Where sync's detection has settled over a span (detection.settled) what it stored is read; else
the detectors are re-run on the full-resolution history around it — so explain works before
detection has run, and at the live edge — and merged with what was stored (episodes that began
earlier; a window, however long ago it began, that reaches into the span). A single fork child
is read with its lineage (its parent up to the fork gives its first steps a baseline), as
detection reads it; a stitched lineage is read run by run, each over its own segment. The forks
the lineage knows of are findings too, with what each fork changed in its parent's config.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from marinctl.analysis.detect import detection
from marinctl.analysis.detect import detectors as D
from marinctl.analysis.diff import fork_changes
from marinctl.analysis.explain import ranking
from marinctl.store import Connection
from marinctl.store import anomalies as anomalies_store
from marinctl.store import metrics as M
from marinctl.store.lineage import Target

NEAR = 30            # steps before N whose episodes are still news at N (at least 3 logged rows)
INTERVAL_STEPS = 300 # steps either side of N whose loss rows give its logging interval
STORED_BEFORE = 2000 # steps before the span whose stored detections are read (episodes reaching it)
WINDOW_KINDS = D.WINDOW_KINDS
# kinds that last: an episode of one of these reaching the last logged row is still open
LASTING = (*WINDOW_KINDS, "hyperball_drift", "routing_entropy_drop", "drop_fraction_rise", "overflow_rise",
           "router_zloss_jump")


@dataclass
class Piece:
    """One run's part of the span, and the target it is read as (a fork child: with its lineage)."""

    run: dict[str, Any]
    reading: Target
    lo: int
    hi: int


@dataclass
class Reading:
    """Every detection that may answer a step of [lo, hi], as ranking's light findings, and the
    loss's logged steps around the span (the logging interval at each step)."""

    target: Target
    pieces: list[Piece]
    lo: int
    hi: int
    last_step: int
    findings: list[dict[str, Any]] = field(default_factory=list)
    loss_steps: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __post_init__(self) -> None:
        self.findings.sort(key=lambda f: f["start"])
        self._starts = [f["start"] for f in self.findings]

    def piece_at(self, step: int) -> Piece:
        return next((p for p in self.pieces if p.lo <= step <= p.hi), self.pieces[-1])

    def interval_at(self, step: int) -> int:
        """The loss's usual logging interval around `step` (1 when it logs every step)."""
        s = self.loss_steps
        i, j = np.searchsorted(s, step - INTERVAL_STEPS), np.searchsorted(s, step + INTERVAL_STEPS + 1)
        return max(int(np.median(np.diff(s[i:j]))), 1) if j - i > 2 else 1

    def near_at(self, step: int) -> int:
        return max(NEAR, 3 * self.interval_at(step))

    def at(self, step: int, metric: str | None = None) -> list[dict[str, Any]]:
        """The findings that answer `step` (ranking.relevant), one per cause and moment, ranked, each
        stamped with its episode (`start`, `end`, `open`), its `severity` and whether it was
        `under_way` long before the step."""
        return self._answer(step, self.findings[:bisect_right(self._starts, step + ranking.ahead(self.interval_at(step)))],
                            metric)

    def each(self, steps: range) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """`at` for every step of an increasing range, keeping only the findings that may still
        answer (a sweep line: a long span of per-step detections is not re-read at every step)."""
        # no step's window reaches further back than 3 × the widest gap between logged rows
        far = max(NEAR, 3 * int(np.diff(self.loss_steps).max())) if len(self.loss_steps) > 1 else NEAR
        active: list[dict[str, Any]] = []
        k = 0
        for n in steps:
            ahead = ranking.ahead(self.interval_at(n))
            while k < len(self.findings) and self._starts[k] <= n + ahead:
                active.append(self.findings[k])
                k += 1
            active = [f for f in active if f["end"] >= n - far]   # past every step still to come
            yield n, self._answer(n, active, None)

    def _answer(self, step: int, pool: list[dict[str, Any]], metric: str | None) -> list[dict[str, Any]]:
        interval, near = self.interval_at(step), self.near_at(step)
        cands = [f for f in pool if ranking.relevant(f, step, interval, near)]
        if metric is not None:
            cands = [f for f in cands if f["metric"] == metric or f["metric"] in ("_lineage", "_step")] or cands
        out = ranking.ranked(ranking.merge(cands, step, interval), step, interval, near)
        for f in out:
            lo, hi = ranking.span(f)
            every = max(interval, int(f["evidence"].get("interval") or 1))   # a watch key logs every few steps
            f.update(start=lo, end=hi, severity=ranking.level(f["kind"], f["cause_class"], f["confidence"]),
                     open=bool(f["evidence"].get("ongoing")) or (f["kind"] in LASTING and hi >= self.last_step - every),
                     under_way=ranking.under_way(f, step, near))
        return out


def light(a: dict[str, Any]) -> dict[str, Any]:
    """A detection (stored or found here) as ranking reads it: its evidence, confidence and span."""
    f = {"run_pk": a.get("run_pk"), "metric": a["metric"], "kind": a["kind"], "step": a["step"],
         "cause_class": a["cause_class"], "confidence": round(ranking.confidence(a["kind"], a["details"]), 3),
         "score": a["score"], "evidence": dict(a["details"])}
    f["start"], f["end"] = ranking.span(f)
    return f


def pieces_of(con: Connection, target: Target, lo: int, hi: int) -> list[Piece]:
    """[lo, hi] cut where the run changes (a stitched lineage), each part with the target it is read as."""
    cuts = sorted({lo, *[s for _, s, _ in target.segments if s is not None and lo < s <= hi]})
    out = []
    for a, b in zip(cuts, [*cuts[1:], hi + 1]):
        run = target.run_at(a)
        out.append(Piece(run, _lineage_of(con, target, run), a, b - 1))
    return out


def _lineage_of(con: Connection, target: Target, run: dict[str, Any]) -> Target:
    """The target, or for a single fork child its whole lineage, as detection reads it."""
    from marinctl.store.lineage import stitched_target

    if not target.stitched and run.get("fork_parent"):
        lineage = stitched_target(run["run_id"], run, con)
        if len(lineage.runs) > 1:
            return lineage
    return target


def read(con: Connection, target: Target, lo: int, hi: int, last_step: int) -> Reading:
    """Every detection that may answer a step of [lo, hi] (see the module doc)."""
    pieces = pieces_of(con, target, lo, hi)
    found: dict[tuple, dict[str, Any]] = {}
    loss_steps = []
    for p in pieces:
        loss_steps.append(M.series(con, p.reading.segments, D.LOSS, p.lo - INTERVAL_STEPS, p.hi + INTERVAL_STEPS + 1)[0])
        near = max(NEAR, 3 * _interval(loss_steps[-1]))
        _read_piece(con, p, near, found)
    steps = np.unique(np.concatenate(loss_steps)) if loss_steps else np.empty(0, np.int64)
    return Reading(target, pieces, lo, hi, last_step, [light(a) for a in found.values()], steps)


def _interval(steps: np.ndarray) -> int:
    return max(int(np.median(np.diff(steps))), 1) if len(steps) > 2 else 1


def _read_piece(con: Connection, p: Piece, near: int, found: dict[tuple, dict[str, Any]]) -> None:
    """One run's part of the span: detections found here (unless detection settled there), stored
    ones, and the lineage's forks, into `found` (keyed so that the same detection is kept once)."""
    fr = D.frame_of(con, p.run)
    fr.segments, fr.own_lo = list(p.reading.segments), 0
    owner = lambda s: p.reading.run_at(s)["run_pk"]  # noqa: E731
    local = [] if _settled(con, p, near) else D.scan(
        con, fr, max(p.lo - near, 0), p.hi + near + 1, overlap=True, owner=owner, refs=detection.saved_refs(con, p.run["uid"]))
    for a in local:
        found[_key(a.metric, a.kind, a.step)] = {"run_pk": a.run_pk, "step": a.step, "metric": a.metric, "kind": a.kind,
                                                 "score": a.score, "cause_class": a.cause_class, "details": a.details}
    nearby = [a for a in anomalies_store.stored(con, p.reading, p.lo - STORED_BEFORE, p.hi + near)
              if a["kind"] not in WINDOW_KINDS]
    # a window stored by sync reaches the span however long ago it began (a collapse, a drift: one
    # finding), and is placed where its test first held, which may lie after the span: windows are
    # read by their extent (a run has a handful)
    windows = anomalies_store.stored(con, p.reading, kinds=WINDOW_KINDS)
    for a in nearby + windows:
        d = a["details"]
        end = d.get("end", a["step"])
        begin = d.get("start", a["step"])
        if isinstance(end, int) and end < p.lo - near or isinstance(begin, int) and begin > p.hi + near:
            continue
        if not (a["step"] >= p.lo - near or (d.get("start") is not None and end >= p.lo - near)):
            continue
        key = _key(a["metric"], a["kind"], a["step"])
        have = found.get(key)
        # the same window found here and stored: the longer reading of it (here it ends where the read ended)
        if have is None or (isinstance(end, int) and end > have["details"].get("end", have["step"])):
            found[key] = a
    for point in lineage_forks(p.reading, p.lo - near, p.hi + near):
        found.setdefault(("_lineage", "fork", point["step"]), point)


def _settled(con: Connection, p: Piece, near: int) -> bool:
    """Whether sync's detection already scored the span for good, within the run's own segment:
    then its stored findings are what the detectors would find here, and are read instead of found
    again (most of explain's time on a hero-scale run)."""
    seg = next(((lo, hi) for r, (_, lo, hi) in zip(p.reading.runs, p.reading.segments) if r["run_pk"] == p.run["run_pk"]),
               None)
    if seg is None or (seg[0] is not None and p.lo - near < seg[0]) or (seg[1] is not None and p.hi + near >= seg[1]):
        return False
    return detection.settled(con, p.run["uid"], p.hi + near + D.LOOKAHEAD)


def _key(metric: str, kind: str, step: int) -> tuple:
    """What makes a detection found here the same as one stored: a window's kind and first step
    (its metric names the leaf that led it, which depends on how much was read)."""
    return (kind, step) if kind in WINDOW_KINDS else (metric, kind, step)


def lineage_forks(target: Target, lo: int, hi: int) -> list[dict[str, Any]]:
    """The forks of the lineage's runs at steps [lo, hi] (a fork child's first step), as detections,
    each with what it changed in its parent's config."""
    out = []
    for i, run in enumerate(target.runs):
        fs = run.get("fork_step")
        if fs is None or not lo <= fs + 1 <= hi:
            continue
        details = {"fork_parent": run.get("fork_parent"), "fork_step": fs, "run": run["run_id"]}
        if i > 0:      # its parent is in the store: the run before it in the chain
            details["config_changes"] = fork_changes(target.runs[i - 1].get("config") or {}, run.get("config") or {})
        out.append({"run_pk": run["run_pk"], "step": fs + 1, "metric": "_lineage", "kind": "fork", "score": 1.0,
                    "cause_class": "infrastructure", "details": details})
    return out
