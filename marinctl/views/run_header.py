"""The figures above the charts: progress against the run's own schedule, rates, ETA, liveness.

Progress, the data phase, the FLOPs budget and the token count fall back on the run's
schedule (analysis/schedule.py) when the run did not log them; ETA comes from the median
pace of the last few hundred steps, so a restart gap in the window does not inflate it.
Progress counts the steps done: W&B's and Levanter's steps count from 0, so a run whose last
step is N has done N + 1 of them (a finished 632-step run's last step is 631), unless its first
logged step says it counts from 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone


from marinctl.analysis.pace import seconds_per_step
from marinctl.analysis.schedule import schedule_of_target
from marinctl.store import Connection
from marinctl.store import series as S
from marinctl.store.lineage import Target

STALE_AFTER_S = 15 * 60
HEADER_KEYS = ("throughput/total_tokens", "throughput/total_gflops", "throughput/tokens_per_second",
               "throughput/mfu", "throughput/duration", "_timestamp")


@dataclass
class HeaderStats:
    run: str
    state: str | None
    liveness: str
    step: int | None                   # the newest step logged
    total_steps: int | None
    tokens: float | None
    flops: float | None
    flops_budget: float | None
    flops_estimated: bool
    tokens_per_s: float | None
    mfu: float | None
    eta_s: float | None
    phase_number: int | None = None    # 1-based data phase at `step`
    phase_name: str | None = None      # its name, or 'past schedule'
    steps_done: int | None = None      # how many steps `step` means were trained (step + 1 from step 0)


def liveness(state: str | None, heartbeat_at: datetime | None, now: datetime | None = None) -> str:
    """live / stale / crashed / finished from W&B state and heartbeat age."""
    s = (state or "").lower()
    if s in ("crashed", "failed", "killed"):
        return "crashed"
    if s == "running":
        now = now or datetime.now(timezone.utc)
        if heartbeat_at is None:
            return "stale"
        hb = heartbeat_at if heartbeat_at.tzinfo else heartbeat_at.replace(tzinfo=timezone.utc)
        return "live" if (now - hb).total_seconds() < STALE_AFTER_S else "stale"
    return s or "unknown"


def steps_done(step: int | None, first_step: int | None = None) -> int | None:
    """Steps trained when `step` is the newest logged: step + 1 counting from 0, `step` when the
    run's first logged step is 1 (it counts from 1)."""
    if step is None:
        return None
    return step if first_step == 1 else step + 1


def header_stats(con: Connection, target: Target, now: datetime | None = None,
                 last_step: int | None = None, first_step: int | None = None) -> HeaderStats:
    """Header figures; `last_step` (when known) limits the scan to the newest few thousand steps;
    `first_step`: the run's first logged step (a run counting from 1 has done `last_step` steps)."""
    sched = schedule_of_target(target)
    since = last_step - 5000 if last_step is not None else None
    last = S.last_values(con, target.segments, HEADER_KEYS, since)
    if since is not None and not last:
        last = S.last_values(con, target.segments, HEADER_KEYS)
    step = max((s for s, _ in last.values()), default=None)
    if step is None:
        step = target.leaf.get("last_step")
    done = steps_done(step, first_step)
    tokens = last["throughput/total_tokens"][1] if "throughput/total_tokens" in last else (
        done * sched.tokens_per_step if done is not None and sched.tokens_per_step else None)
    flops, estimated = None, False
    if "throughput/total_gflops" in last:
        flops = last["throughput/total_gflops"][1] * 1e9
    elif sched.flops_budget and sched.total_steps and done is not None:
        flops, estimated = sched.flops_budget * done / sched.total_steps, True
    live = liveness(target.leaf.get("state"), target.leaf.get("heartbeat_at"), now)
    eta = None
    if live in ("live", "stale") and sched.total_steps and done is not None:
        per_step = seconds_per_step(con, target, step)
        if per_step:
            eta = max(0, sched.total_steps - done) * per_step
    number, name = None, None
    if step is not None and sched.phases:
        found = sched.phase_at(step)
        number, name = (found[0], found[1].name) if found else (None, "past schedule")
    return HeaderStats(
        run=target.name if not target.stitched else f"{target.name} ({target.leaf['run_id']})",
        state=target.leaf.get("state"), liveness=live, step=step, total_steps=sched.total_steps,
        tokens=tokens, flops=flops, flops_budget=sched.flops_budget, flops_estimated=estimated,
        tokens_per_s=last.get("throughput/tokens_per_second", (0, None))[1],
        mfu=last.get("throughput/mfu", (0, None))[1], eta_s=eta, phase_number=number, phase_name=name,
        steps_done=done)
