"""What else was true at a step: LR phase, data phase, evals, checkpoints, lineage, events,
and the other metrics that moved — the context a person needs before blaming anything.

The run's schedule (warm-up, decay, length, data phases) comes from analysis/schedule.py:
its own config first, Marin's published rungs for logged hero/ladder runs. Other facts used
(Marin's `experiments/grug/moe_hero_ep/launch_scaling_ladder.py`): the hero evaluates every
3,000 steps and keeps a permanent checkpoint every 6,000; rungs evaluate every 5% and
checkpoint only at the end.
"""

from __future__ import annotations

import re
from typing import Any

from marinctl.analysis.schedule import config_of, hero_total_steps, schedule_of
from marinctl.store import Connection
from marinctl.store import metrics as M
from marinctl.store import series as S

__all__ = ["config_of", "context_at", "lineage_points", "schedule_points", "warmup_end_step"]

HERO_CKPT_EVERY = 6_000
ASSUMED_WARMUP = 0.01        # Levanter's default `optimizer.warmup`, for runs that do not say
MOVED_Z = 8.0
MOVED_WINDOW = 200
_COUNTERS = re.compile(r"^(_|global_step$|run_progress$|throughput/total_|optim/|mixture/)")


def warmup_end_step(run: dict[str, Any]) -> int:
    """First step after LR warm-up, for detectors that relax their thresholds during warm-up.

    The run's schedule when it says; else Levanter's default warm-up (1%) of its length; else 0.
    """
    sched = schedule_of(run)
    if sched.warmup_end_step is not None:
        return sched.warmup_end_step
    return int(ASSUMED_WARMUP * sched.total_steps) if sched.total_steps else 0


def schedule_points(run: dict[str, Any]) -> list[tuple[int, str]]:
    """(step, what) where the run's own schedule changes shape: warm-up end, each data-phase
    switch, decay start. Detection keeps quiet about level shifts there (episodes.py)."""
    sched = schedule_of(run)
    out = []
    if sched.warmup_end_step:
        out.append((sched.warmup_end_step, "warm-up ends"))
    if sched.decay_start_step and sched.decay_start_step != sched.warmup_end_step:
        out.append((sched.decay_start_step, "decay starts"))
    for i, phase in enumerate(sched.phases[1:], start=2):
        out.append((phase.start_step, f"data phase {i} ({phase.name}) starts"))
    return sorted(out)


def lr_phase(con: Connection, target, step: int) -> dict[str, Any]:
    run = target.run_at(step)
    sched = schedule_of(run)
    total = sched.total_steps
    wend = warmup_end_step(run)
    lr = M.series(con, target.segments, "optim/learning_rate", step, step + 1)[1]
    if total and step >= total:
        phase = "done"
    elif step < wend:
        phase = "warmup"
    elif sched.decay_start_step is not None and step < sched.decay_start_step:
        phase = "stable"
    else:
        phase = "decay"
    return {"phase": phase, "warmup_end_step": wend, "decay_start_step": sched.decay_start_step, "total_steps": total,
            "schedule_from": sched.source("total_steps"), "warmup_from": sched.source("warmup"),
            "decay_from": sched.source("decay"), "learning_rate": float(lr[0]) if len(lr) else None,
            "fraction": (step / total) if total else None}


def data_phase(run: dict[str, Any], step: int) -> dict[str, Any]:
    sched = schedule_of(run)
    found = sched.phase_at(step)
    if found is None:
        return {"name": None, "phases_from": sched.source("phases")}
    number, phase = found
    nxt = sched.phases[number].start_step if number < len(sched.phases) else None
    return {"name": phase.name, "number": number, "start_step": phase.start_step, "end_step": phase.end_step,
            "next_switch": nxt, "steps_since_switch": step - phase.start_step, "phases_from": sched.source("phases")}


EVALS_EACH_SIDE = 3          # evals shown before (or at) and after the step


def eval_steps(con: Connection, target, step: int, window: int, each_side: int = EVALS_EACH_SIDE) -> list[int]:
    """The evals around `step` within `window` steps: the last `each_side` at or before it and the
    first `each_side` after it (a run evaluating every few steps has dozens in the window; the
    ones next to the step are the ones that say something about it)."""
    steps = S.steps_with_key_prefix(con, target.segments, "eval/", step - window, step + window)
    before = [s for s in steps if s <= step][-each_side:]
    return before + [s for s in steps if s > step][:each_side]


def checkpoint_steps(run: dict[str, Any], step: int, window: int) -> list[int]:
    total = schedule_of(run).total_steps
    if total == hero_total_steps():
        lo = (max(step - window, 0) + HERO_CKPT_EVERY - 1) // HERO_CKPT_EVERY * HERO_CKPT_EVERY
        return [s for s in range(lo, step + window + 1, HERO_CKPT_EVERY) if s > 0]
    if total and abs(total - 1 - step) <= window:
        return [total - 1]
    return []


def lineage_points(target, step: int, window: int) -> list[dict[str, Any]]:
    out = []
    for run in target.runs:
        fs = run.get("fork_step")
        if fs is not None and abs(fs + 1 - step) <= window:
            out.append({"kind": "fork", "step": fs + 1, "run": run["run_id"], "parent": run.get("fork_parent"),
                        "fork_step": fs})
    return out


def events_near(con: Connection, target, step: int, window: int) -> list[dict[str, Any]]:
    from marinctl.analysis.events.timeline import query_events
    from marinctl.errors import UserError

    ref = "hero" if target.name == "hero" else target.leaf["run_id"]
    try:
        items = query_events(con, ref, step, window)
    except UserError:
        return []
    return [{k: e.get(k) for k in ("time", "kind", "title", "url", "run", "step", "source", "author")} for e in items]


def moved_metrics(con: Connection, target, step: int, exclude: set[str] | None = None,
                  limit: int = 8) -> list[dict[str, Any]]:
    """Keys whose value at `step` (or their last logged step within 9 before) sits far from the
    median of their previous points (robust z over up to `MOVED_WINDOW` steps)."""
    out = []
    exclude = exclude or set()
    for key, s, v, med, n, z in S.moved_from_baseline(con, target.segments, step, MOVED_WINDOW, 9):
        if _COUNTERS.match(key) or key in exclude or abs(z) < MOVED_Z:
            continue
        out.append({"metric": key, "step": int(s), "value": v, "baseline": med, "z": z})
        if len(out) >= limit:
            break
    return out


SCHEDULE_WINDOW = 300       # steps either side of N: scheduled changes shown in the context
LEVEL_ROWS = 20             # logged rows either side of a scheduled change: the level it moved by


def _level_ratio(con: Connection, target, key: str, at: int) -> float | None:
    """Median of the LEVEL_ROWS logged values from `at` on over the median of those before it."""
    import numpy as np

    steps, v = M.series(con, target.segments, key, at - 100 * LEVEL_ROWS, at + 100 * LEVEL_ROWS)
    ok = np.isfinite(v) & (v > 0)
    steps, v = steps[ok], v[ok]
    before, after = v[steps < at][-LEVEL_ROWS:], v[steps >= at][:LEVEL_ROWS]
    if len(before) < 3 or len(after) < 3:
        return None
    return float(np.median(after) / np.median(before))


def schedule_near(con: Connection, target, step: int, window: int = SCHEDULE_WINDOW) -> list[dict[str, Any]]:
    """The run's scheduled changes within `window` steps of `step` and how far loss and grad norm
    moved there: expected shape, so they are context, never findings."""
    out = []
    for at, what in schedule_points(target.run_at(step)):
        if abs(at - step) > window:
            continue
        moved = {}
        for key, label in (("train/loss", "loss"), ("grad/norm/total", "grad_norm")):
            ratio = _level_ratio(con, target, key, at)
            if ratio is not None:
                moved[label] = ratio
        out.append({"step": at, "what": what, "level_ratio": moved})
    return out


def context_at(con: Connection, target, step: int, *, window: int = 1000,
               exclude: set[str] | None = None) -> dict[str, Any]:
    """The contract's `context` block (lr_phase, data_phase, events) plus the rest."""
    run = target.run_at(step)
    lr = lr_phase(con, target, step)
    dp = data_phase(run, step)
    return {
        "lr_phase": lr["phase"], "lr": lr,
        "data_phase": dp.get("name"), "data": dp,
        "events": events_near(con, target, step, window),
        "event_window": window,
        "evals": eval_steps(con, target, step, 50),
        "checkpoints": checkpoint_steps(run, step, window),
        "lineage": lineage_points(target, step, window),
        "schedule": schedule_near(con, target, step),
        "run_at_step": run["run_id"],
        "moved": moved_metrics(con, target, step, exclude),
    }
