"""A follow's digest: every interval, one line per followed run that says all is well (or is not).

What Marin's hero monitor sends at low priority every ten minutes, from public data: the run's
newest step (of its schedule's), its pace in steps per second and the ETA that pace gives
(analysis/pace.py: the run's own `_timestamp`, so a restart gap does not slow it), its loss
against its trend (a Theil–Sen line through the last TREND_ROWS logged losses, read at the newest
step: a loss well above its own line is worth a look before any alert fires), and how many
alerts the run fired since the last digest. A run whose newest step has not moved since the last
digest is said to be silent, for how long, and from which step.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from marinctl import numbers as N
from marinctl.analysis.pace import seconds_per_step
from marinctl.analysis.schedule import schedule_of_target
from marinctl.store import Connection, metrics
from marinctl.store.lineage import resolve_target

LOSS = "train/loss"
TREND_ROWS = 200      # logged losses the trend line goes through
MIN_TREND_ROWS = 20


@dataclass
class RunDigest:
    run: str                       # the run's id, as commands name it
    uid: str
    step: int | None
    total_steps: int | None
    steps_per_s: float | None
    eta_s: float | None
    loss: float | None
    trend: float | None            # the loss's trend line at `step`
    alerts: int                    # fired since the last digest
    silent_s: float | None = None  # no new step since the last digest: for how long

    def line(self) -> str:
        """The digest's line for this run."""
        alerts = f"{self.alerts} alert{'s' if self.alerts != 1 else ''} since the last digest"
        if self.silent_s is not None:
            return (f"{self.run}: silent — no new step for {N.duration(self.silent_s)} (last step "
                    f"{N.count(self.step)}) · {alerts}")
        of = f" of {N.count(self.total_steps)}" if self.total_steps else ""
        parts = [f"{self.run}: step {N.count(self.step)}{of}",
                 f"{N.sig(self.steps_per_s, 3)} steps/s" if self.steps_per_s else "pace unknown"]
        if self.eta_s is not None:
            parts.append(f"ETA {N.duration(self.eta_s)}")
        if self.loss is not None:
            against = (f" (trend {N.fixed(self.trend, 3)}, {N.percent(self.loss / self.trend - 1, 1, signed=True)})"
                       if self.trend else "")
            parts.append(f"loss {N.fixed(self.loss, 3)}{against}")
        return " · ".join([*parts, alerts])


def of_run(con: Connection, uid: str, alerts: int, silent_s: float | None) -> RunDigest:
    """One run's digest figures (`alerts`: fired since the last digest; `silent_s`: how long its
    newest step has not moved, when it has not since the last digest)."""
    target = resolve_target(con, uid)
    run = target.leaf
    step = run.get("last_step")
    sched = schedule_of_target(target)
    per_step = seconds_per_step(con, target, int(step)) if step is not None else None
    eta = None
    if per_step and sched.total_steps and step is not None:
        eta = max(0, sched.total_steps - (int(step) + 1)) * per_step
    loss, trend = _loss_and_trend(con, target.segments, step)
    return RunDigest(run["run_id"], uid, None if step is None else int(step), sched.total_steps,
                     1.0 / per_step if per_step else None, eta, loss, trend, alerts, silent_s)


def _loss_and_trend(con: Connection, segs, step: Any) -> tuple[float | None, float | None]:
    if step is None:
        return None, None
    s, v = metrics.series(con, segs, LOSS, max(int(step) - 5 * TREND_ROWS, 0), None)
    ok = np.isfinite(v)
    s, v = s[ok][-TREND_ROWS:], v[ok][-TREND_ROWS:]
    if not len(v):
        return None, None
    if len(v) < MIN_TREND_ROWS:
        return float(v[-1]), None
    from scipy.stats import theilslopes

    slope, intercept, _, _ = theilslopes(v, s.astype(float))
    return float(v[-1]), float(intercept + slope * float(s[-1]))


def message(d: RunDigest, now: datetime) -> dict[str, Any]:
    """The digest as a message the sinks take (the generic body's fields, kind `digest`, priority low;
    no alert id: it is sent once and stored nowhere)."""
    title = d.line().split(" · ")[0] if d.silent_s is None else f"{d.run}: silent"
    return {"alert_id": None, "run_uid": d.uid, "run_id": d.run, "name": None, "step": max(d.step or 0, 0),
            "metric": None, "cause": f"digest:{now.isoformat()}", "cause_class": "none", "severity": "low",
            "priority": "low", "kind": "digest", "title": f"digest {title}", "summary": d.line(),
            "command": f"marinctl alerts --run {shlex.quote(d.run)}", "episode_start": max(d.step or 0, 0),
            "episode_end": max(d.step or 0, 0), "fired_at": now}
