"""Loss and grad-norm spike scores made into events: one event per cause, level shifts apart.

The robust z-scores (detectors.py, store/rolling.py) are per logged row, but what happened is
an *event*. Marin's optimizer signature — grad norm first, loss one logged step later, both
easing over the next few (BLOOM tr8-104B: grad 12,953 → 262,623 one step before loss
3.11 → 7.71; bigscience-workshop/bigscience `train/tr8-104B-wide/chronicles.md`) — crosses
the bar at three or four neighbouring rows, and all of them are the same event. So:

- **precursor by logged rows**: a loss spike's grad-norm precursor is one of the grad norm's
  previous `PRECURSOR_ROWS` = 2 *logged rows*, not steps — a run logging every 10 steps has
  its precursor 10 steps back (the watcher's co-spike rule is per logged point).
- **one event**: loss/grad detections within `GROUP_ROWS` = 3 logged rows of each other are
  one event, reported at its first loss spike, with every step it touched in its evidence
  (`event_steps`, `start`, `end`) and the largest z as its score. marinctl's choice: BLOOM's
  and the incidents' episodes last 2–4 rows.
- **its easing tail**: the rows right after an event where the loss or grad norm is still
  elevated (robust z > `TAIL_Z` = 3.5, the modified-z outlier bar of Iglewicz & Hoaglin as in
  SaQC's flagMAD) belong to it, up to `TAIL_ROWS` = 5 rows: the event's evidence lists
  them, no finding is made of them.
- **level shifts are not spikes**: a spike comes back. When the median of the next
  `AFTER_ROWS` = 10 logged values stays at least `SHIFT_SHARE` = half the excursion away
  from the trailing baseline, the series moved to a new level (a harder data mixture, a new
  LR phase), which the spike rule is not meant for; Marin separates a "sustained" rise
  (> 50% above trend for ~10+ steps, Marin's `.agents/skills/manage-hero-run/SKILL.md`)
  from a spike the same way. Half and 10 rows are marinctl's choices. A level shift in the
  loss *after a real grad spike* is still that optimizer event (the update damaged the
  model), with `loss_stayed_up` in evidence.
- **schedule-aware quiet**: a level shift that starts within 2 logged rows before to
  `QUIET_AFTER` = max(50 steps, 5 rows) after a change the run's own schedule announces
  (warm-up end, data-phase switch, decay start: analysis/schedule.py via context.py) is
  expected shape, not a finding — explain shows it in the context. Elsewhere it is a
  `level_shift` with cause `none` and confidence 0.4: worth seeing, no cause claimed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from marinctl.domain import Anomaly

PRECURSOR_ROWS = 2
GROUP_ROWS = 3
AFTER_ROWS = 10
MIN_AFTER = 3               # fewer later rows (the live edge): judge it as a spike for now
SHIFT_SHARE = 0.5
QUIET_AFTER_STEPS, QUIET_AFTER_ROWS = 50, 5
SHIFT_CONFIDENCE = 0.4
TAIL_Z, TAIL_ROWS = 3.5, 5

Score = tuple[float, float, float]   # value, baseline, z


@dataclass
class KeySeries:
    """One key's logged (step, log value) in step order: what 'the next rows' means."""

    steps: np.ndarray
    y: np.ndarray

    def index(self, step: int) -> int:
        return int(np.searchsorted(self.steps, step))

    def previous(self, step: int, rows: int) -> list[int]:
        i = self.index(step)
        return [int(s) for s in self.steps[max(i - rows, 0):i][::-1]]

    def stays(self, step: int, baseline: float, direction: int = 1) -> bool:
        """Whether the level after `step` holds at least SHIFT_SHARE of its excursion."""
        i = self.index(step)
        if i >= len(self.steps) or self.steps[i] != step:
            return False
        after = self.y[i + 1:i + 1 + AFTER_ROWS]
        after = after[np.isfinite(after)]
        if len(after) < MIN_AFTER:
            return False
        base = np.log(baseline) if baseline > 0 else 0.0
        excursion = direction * (self.y[i] - base)
        return excursion > 0 and direction * (float(np.median(after)) - base) >= SHIFT_SHARE * excursion


def interval_of(steps: np.ndarray) -> int:
    """The usual distance between logged rows (1 for per-step logging)."""
    if len(steps) < 2:
        return 1
    return max(int(np.median(np.diff(steps))), 1)


@dataclass
class _Member:
    step: int
    metric: str
    kind: str
    cause: str
    z: float
    details: dict[str, Any]
    grad_step: int | None = None
    steps: list[int] = field(default_factory=list)


def spike_events(loss: dict[int, Score], grad: dict[int, Score], loss_s: KeySeries, grad_s: KeySeries, *,
                 bar: Callable[[int, float], float], co_z: float, spike_z: float, window: int, skip_before: int,
                 loss_key: str, grad_key: str, schedule: Sequence[tuple[int, str]], warmup_end: int,
                 emit_lo: int, emit_hi: int | None, owner: Callable[[int], int], overlap: bool) -> list[Anomaly]:
    """Events from the loss and grad-norm scores above their lowest bars (see the module doc)."""
    interval = interval_of(loss_s.steps)
    real_grad = {s: v for s, v in grad.items() if v[2] > bar(s, co_z) and not grad_s.stays(s, v[1])}
    grad_shift = {s for s, v in grad.items() if v[2] > bar(s, co_z) and s not in real_grad}
    members: list[_Member] = []
    shifts: list[_Member] = []
    used: set[int] = set()
    for step, (value, base, z) in sorted(loss.items()):
        if step < skip_before or z <= bar(step, co_z):
            continue
        details = {"value": value, "baseline": base, "z": z, "window": window, "warmup": step < warmup_end,
                   "threshold": bar(step, spike_z)}
        lead = next((s for s in grad_s.previous(step, PRECURSOR_ROWS) if s in real_grad), None)
        stays = loss_s.stays(step, base)
        if lead is not None:
            gv, gb, gz = real_grad[lead]
            used.update({lead})
            details.update(grad_step=lead, grad_value=gv, grad_baseline=gb, grad_z=gz, precursor_steps=step - lead,
                           precursor_rows=grad_s.index(step) - grad_s.index(lead), loss_stayed_up=stays)
            members.append(_Member(step, loss_key, "co_spike", "optimizer", z, details, lead, [lead, step]))
        elif step in real_grad:
            gv, gb, gz = real_grad[step]
            used.add(step)
            details.update(grad_step=step, grad_value=gv, grad_baseline=gb, grad_z=gz, precursor_steps=0, loss_stayed_up=stays)
            members.append(_Member(step, loss_key, "co_spike", "data_batch", z, details, step, [step]))
        elif stays and (z > bar(step, spike_z) or step in grad_shift):
            shifts.append(_Member(step, loss_key, "level_shift", "none", z, details, None, [step]))
        elif z > bar(step, spike_z):
            members.append(_Member(step, loss_key, "spike", "data_batch", z, details, None, [step]))
    for step, (value, base, z) in sorted(real_grad.items()):
        if step in used or step < skip_before or z <= bar(step, spike_z):
            continue
        members.append(_Member(step, grad_key, "grad_spike", "optimizer", z,
                               {"value": value, "baseline": base, "z": z, "window": window, "warmup": step < warmup_end},
                               None, [step]))
    for step in sorted(grad_shift):
        value, base, z = grad[step]
        if step >= skip_before and z > bar(step, spike_z):
            shifts.append(_Member(step, grad_key, "level_shift", "none", z,
                                  {"value": value, "baseline": base, "z": z, "window": window}, None, [step]))
    out = [_event(g, _tail(g, loss, grad, loss_s, grad_s), owner) for g in _groups(members, GROUP_ROWS * interval)]
    for g in _groups(shifts, GROUP_ROWS * interval):
        start = min(s for m in g for s in m.steps)
        if not _scheduled(start, schedule, interval):
            out.append(_shift(g, owner))
    return [a for a in out if in_range(a, emit_lo, emit_hi, overlap)]


def _groups(members: list[_Member], gap: int) -> list[list[_Member]]:
    out: list[list[_Member]] = []
    for m in sorted(members, key=lambda m: (min(m.steps), m.step)):
        if out and min(m.steps) - max(s for x in out[-1] for s in x.steps) <= gap:
            out[-1].append(m)
        else:
            out.append([m])
    return out


def _tail(group: list[_Member], loss: dict[int, Score], grad: dict[int, Score], loss_s: KeySeries,
          grad_s: KeySeries) -> list[int]:
    """The logged rows right after an event where loss or grad norm is still elevated."""
    end = max(s for m in group for s in m.steps)
    nxt = sorted({int(s) for ks in (loss_s, grad_s) for s in ks.steps[ks.index(end + 1):ks.index(end + 1) + TAIL_ROWS]})
    tail = []
    for s in nxt[:TAIL_ROWS]:
        if (s in loss and loss[s][2] > TAIL_Z) or (s in grad and grad[s][2] > TAIL_Z):
            tail.append(s)
        else:
            break
    return tail


def _event(group: list[_Member], tail: list[int], owner) -> Anomaly:
    """One event from its members: reported at its first loss spike (else its first grad spike)."""
    anchor = next((m for m in group if m.kind in ("co_spike", "spike")), group[0])
    steps = sorted({s for m in group for s in m.steps} | set(tail))
    details = dict(anchor.details)
    details.update(start=steps[0], end=steps[-1], event_steps=steps,
                   loss_steps=sorted(m.step for m in group if m.kind != "grad_spike"),
                   grad_steps=sorted({m.grad_step for m in group if m.grad_step is not None}
                                     | {m.step for m in group if m.kind == "grad_spike"}),
                   peak_z=max(m.z for m in group), rows=len(group), tail_steps=tail)
    return Anomaly(owner(anchor.step), anchor.step, anchor.metric, anchor.kind, max(m.z for m in group), anchor.cause, details)


def _scheduled(start: int, schedule: Sequence[tuple[int, str]], interval: int) -> str | None:
    after = max(QUIET_AFTER_STEPS, QUIET_AFTER_ROWS * interval)
    return next((what for at, what in schedule if at - 2 * interval <= start <= at + after), None)


def _shift(group: list[_Member], owner) -> Anomaly:
    first = group[0]
    steps = sorted({s for m in group for s in m.steps})
    details = dict(first.details)
    details.update(start=steps[0], end=steps[-1], rows=len(steps), metrics=sorted({m.metric for m in group}),
                   confidence=SHIFT_CONFIDENCE, ratio=first.details["value"] / first.details["baseline"]
                   if first.details.get("baseline") else None)
    return Anomaly(owner(first.step), first.step, first.metric, "level_shift", first.z, "none", details)


def in_range(a: Anomaly, lo: int, hi: int | None, overlap: bool) -> bool:
    if not overlap:
        return a.step >= lo and (hi is None or a.step < hi)
    start, end = a.details.get("start", a.step), a.details.get("end", a.step)
    return end >= lo and (hi is None or start < hi)
