"""One detection pass over a run: which steps to score, what was found, where the pass stopped.

Incremental: each pass scores the steps synced since the last one, plus REVISIT steps
before them (episodes that straddle the previous end). A pass also remembers `_timestamp`
fingerprints of the history it saw, every FINGERPRINT_EVERY steps; when they no longer
match, history was rewritten (a W&B rewind) and the pass reports a `rewind` at the first
differing step and re-scores from there. A logit-growth episode still under way that began
before the steps re-scored pulls the start back to its onset (at most LOOKBACK steps), so
the lm_head drift it explains is replaced by it even when an earlier pass stored that drift
before the trend was clear. A window finding that began before the steps re-scored and still
reaches into them (a throughput collapse, an Adam-group drift, a resume mismatch) is stored
again, longer, in place of the one an earlier pass stored (`updated`); a slowdown still under
way at the last step is carried to the next pass with its frozen baseline (memory `open`). A
finding below an alert's bar that grew past it (a throughput dip that lasted, a resume offset
that became a mismatch) replaces the stored one of its family (`superseded`). A
run scored by other detectors (DETECTORS, stamped in the pass's memory) is scored afresh,
whole: what an older release stored is what it wrongly found too.

Nothing here writes: a pass returns a `Detection`, and the sync pipeline stores it
(sync/derive.py) — anomalies and the new position in one transaction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from marinctl.analysis.detect import detectors as D
from marinctl.domain import Anomaly
from marinctl.store import Connection, anomalies, history, metrics, state

REVISIT = 100               # steps re-scored at each incremental pass (episodes straddling the watermark)
FINGERPRINT_EVERY = 500     # steps between stored _timestamp fingerprints (rewind detection)
# Bump when what the detectors (or the parameter roles they read) find changes. 2: RMSNorm gains
# (`rms_attn.weight`) and embed_gated_norm's matrices get their own update rule (analysis/explain/roles.py).
# 3: Marin's runbook incidents (throughput windows, Adam-group drift, resume mismatch, classed
# excursions) and each detection's logging interval (incidents.py groups by it). 4: findings below the
# alert bars (throughput dips, resume offsets), resume episodes over the whole overlap, what a fork changed.
DETECTORS = 4
# window kinds that are one finding grown past an alert's bar: a stored one is replaced by the other
FAMILY = {"throughput_dip": "throughput", "throughput_collapse": "throughput",
          "resume_offset": "resume", "resume_mismatch": "resume"}


@dataclass
class Detection:
    """What one pass found, and what storing it means.

    Store `found` in place of the run's detections from `replace_from` on (keeping earlier
    `rewind` records); when `rewound_at` is set, every detection from there on is void first
    and `rewind` is the record of it. Then save `position` and `memory` for the next pass.
    """

    run_pk: int
    uid: str
    found: list[Anomaly] = field(default_factory=list)
    replace_from: int | None = None
    rewound_at: int | None = None
    rewind: Anomaly | None = None
    full: bool = False                   # a full pass: every earlier detection (but rewinds) is void
    updated: list[Anomaly] = field(default_factory=list)   # window findings begun before replace_from, stored again
    superseded: list[Anomaly] = field(default_factory=list)  # stored findings of another kind those replace
    position: int | None = None          # last step scored; None: nothing to remember
    memory: dict[str, Any] = field(default_factory=dict)


def incremental(con: Connection, run_pk: int) -> Detection:
    """Score the steps synced since the last pass (plus REVISIT steps)."""
    fr = D.frame(con, run_pk)
    out = Detection(run_pk, fr.run["uid"])
    last = metrics.step_range(con, [(run_pk, None, None)])[1]
    position, extra = state.detection(con, fr.run["uid"])
    if position is not None and extra.get("detectors") != DETECTORS:
        return full(con, run_pk)
    if position is None:
        start = fr.own_lo
    else:
        rewound = _rewound_at(con, fr, extra.get("fingerprints") or [])
        if rewound is not None:
            out.rewound_at = rewound
            out.rewind = Anomaly(run_pk, rewound, "_step", "rewind", float(max(position - rewound + 1, 0)),
                                 "infrastructure", {"previously_detected_to": position, "rewound_from": rewound})
            start = rewound
        else:
            start = position + 1
    if last is None or start > last:
        return out
    emit_lo = max(start - REVISIT, fr.own_lo) if position is not None else fr.own_lo
    refs = {k: (int(v[0]), float(v[1])) for k, v in (extra.get("refs") or {}).items()}
    leaves = D.hyperball_leaves(con, fr)
    if leaves and (not refs or len(leaves) != extra.get("ref_leaves")):   # new leaves in the store since
        refs = D.hyperball_refs(con, fr, leaves)
    trends: list = []
    carry = {} if out.rewound_at is not None else (extra.get("open") or {})
    carried: dict[str, Any] = {}
    out.found = D.scan(con, fr, emit_lo, None, refs=refs, trends_out=trends, carry=carry, carry_out=carried,
                       extended_out=out.updated)
    onset = min((a.details["start"] for a in trends if a.details["end"] >= emit_lo), default=None)
    if onset is not None and onset < emit_lo:
        emit_lo = max(onset, fr.own_lo, emit_lo - D.LOOKBACK)
        carried, out.updated = {}, []
        out.found = D.scan(con, fr, emit_lo, None, refs=refs, carry=carry, carry_out=carried, extended_out=out.updated)
    out.replace_from = emit_lo
    if out.rewound_at is None:
        out.found, out.updated, out.superseded = _continued(con, run_pk, emit_lo, out.found, out.updated)
    kept = [] if out.rewound_at is not None else [f for f in extra.get("fingerprints") or [] if int(f[0]) % FINGERPRINT_EVERY == 0]
    out.position, out.memory = last, _memory(con, fr, last, refs, len(leaves), kept, carried)
    return out


def full(con: Connection, run_pk: int) -> Detection:
    """Score a run's whole history, as if it had never been scored."""
    fr = D.frame(con, run_pk)
    leaves = D.hyperball_leaves(con, fr)
    refs = D.hyperball_refs(con, fr, leaves) if leaves else {}
    carried: dict[str, Any] = {}
    out = Detection(run_pk, fr.run["uid"], D.scan(con, fr, fr.own_lo, None, refs=refs, carry_out=carried), fr.own_lo,
                    full=True)
    last = metrics.step_range(con, [(run_pk, None, None)])[1]
    if last is not None:
        out.position, out.memory = last, _memory(con, fr, last, refs, len(leaves), open_=carried)
    return out


def _continued(con: Connection, run_pk: int, emit_lo: int, found: list[Anomaly],
               updated: list[Anomaly]) -> tuple[list[Anomaly], list[Anomaly], list[Anomaly]]:
    """Window findings of this pass that continue one stored before `emit_lo` (same kind and cause,
    overlapping windows) take its step and metric — the window's identity — and its start when
    earlier, and replace it (`updated`): a pass that reads less of the past re-finds a long window
    later than where it began, and a window is one finding however many passes see it.

    One of another kind of the same FAMILY is the stored one grown past its bar (a dip that
    lasted into a collapse): the stored one goes (the third list), and the new one keeps its own
    identity — the collapse begins where it crossed the bar, as it did before dips were stored,
    so an alert keyed on it is the same alert. A window re-found below a bar it was stored past
    (a collapse read again from fewer rows) is still the stored kind: it lasted, once."""
    stored = anomalies.of_run(con, run_pk, D.WINDOW_KINDS, emit_lo)
    if not stored:
        return found, updated, []
    keep, again, gone = [], [], []
    was_updated = {id(a) for a in updated}
    for a in found + updated:
        old = None
        if a.kind in D.WINDOW_KINDS and "start" in a.details:
            old = next((o for o in stored if _family(o.kind) == _family(a.kind) and o.cause_class == a.cause_class
                        and o.details.get("start", o.step) <= a.details["end"]
                        and a.details["start"] <= o.details.get("end", o.step)), None)
        if old is not None and old.kind != a.kind and _past_bar(old.kind):
            a.kind = old.kind                   # stored past its bar: it stays so, longer
            a.details.pop("confidence", None)
            if isinstance(a.details.get("alert_bar"), dict):
                a.details["alert_bar"] = {**a.details["alert_bar"], "reached": True, "short_of": []}
        if old is None or old.kind != a.kind:
            if old is not None:
                gone.append(old)
            (again if id(a) in was_updated else keep).append(a)
            continue
        a.step, a.metric = old.step, old.metric
        a.details["start"] = min(a.details["start"], old.details.get("start", old.step))
        again.append(a)
    return keep, again, gone


def _family(kind: str) -> str:
    return FAMILY.get(kind, kind)


def _past_bar(kind: str) -> bool:
    return kind in ("throughput_collapse", "resume_mismatch")


def settled(con: Connection, uid: str, hi: int) -> bool:
    """Whether the last pass over a run scored every step up to `hi` for good: by these detectors,
    and far enough past `hi` that no later pass re-scores it (REVISIT). What is stored there is
    then what the detectors would find again (explain reads it instead of re-running them)."""
    position, extra = state.detection(con, uid)
    return position is not None and extra.get("detectors") == DETECTORS and hi + REVISIT <= position


def saved_refs(con: Connection, uid: str) -> dict[str, tuple[int, float]] | None:
    """The hyperball references the last pass used (explain reuses them), or None."""
    saved = (state.detection(con, uid)[1] or {}).get("refs") or {}
    return {k: (int(v[0]), float(v[1])) for k, v in saved.items()} or None


def _memory(con: Connection, fr: D.RunFrame, last: int, refs: dict, leaves: int,
            kept: list[list[float]] | None = None, open_: dict[str, Any] | None = None) -> dict[str, Any]:
    """What the next pass needs: `_timestamp` fingerprints (those still valid, plus new ones past
    them), the hyperball references and how many leaves they were read for, the windows still
    under way, and which detectors."""
    kept = kept or []
    since = int(kept[-1][0]) + 1 if kept else 0
    fingerprints = kept + [[s, v] for s, v in history.sampled(con, fr.run_pk, D.TIMESTAMP, last, FINGERPRINT_EVERY, since)]
    return {"fingerprints": fingerprints, "refs": {k: list(v) for k, v in refs.items()}, "ref_leaves": leaves,
            "open": open_ or {}, "detectors": DETECTORS}


def _rewound_at(con: Connection, fr: D.RunFrame, fps: list[list[float]]) -> int | None:
    """First step whose stored history differs from what an earlier pass saw (None: same).

    A rewind rewrites everything from its step on, so when the newest fingerprint still matches,
    nothing before it changed: one row read. Otherwise every fingerprint is compared."""
    if not fps:
        return None
    newest, ts = int(fps[-1][0]), fps[-1][1]
    now = dict(history.sampled(con, fr.run_pk, D.TIMESTAMP, newest, FINGERPRINT_EVERY, newest))
    if newest in now and math.isclose(now[newest], ts, rel_tol=0, abs_tol=1e-3):
        return None
    now = dict(history.sampled(con, fr.run_pk, D.TIMESTAMP, newest, FINGERPRINT_EVERY))
    prev = fr.own_lo - 1
    for step, ts in fps:
        step = int(step)
        cur = now.get(step)
        if cur is None or not math.isclose(cur, ts, rel_tol=0, abs_tol=1e-3):
            # the rewind lies in (prev, step]: the re-logged steps start after the largest wall gap there
            jump = history.largest_jump(con, fr.run_pk, D.TIMESTAMP, prev, step)
            return jump[0] if jump is not None else prev + 1
        prev = step
    return None
