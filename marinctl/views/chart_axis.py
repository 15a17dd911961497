"""A chart's x axis: steps, tokens, fraction of the run's schedule, or hours since it started.

Steps are what the store keeps; the other three are mapped from them with the run's own
schedule (analysis/schedule.py) or its logged `_timestamp`. When a run lacks what a mode
needs, the axis falls back to steps and says so in its label.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marinctl import numbers
from marinctl.analysis.schedule import Schedule, schedule_of_target
from marinctl.store import Connection
from marinctl.store import metrics as M
from marinctl.store import series as S
from marinctl.store.lineage import Target

X_MODES = ("step", "tokens", "fraction", "wall")


@dataclass
class Axis:
    mode: str
    label: str
    scale: float = 1.0          # x = step * scale (step, tokens, fraction)
    wall_steps: np.ndarray | None = None   # wall mode: hours since start, interpolated over steps
    wall_hours: np.ndarray | None = None

    def x(self, steps) -> np.ndarray:
        s = np.asarray(steps, dtype=np.float64)
        if self.mode == "wall" and self.wall_steps is not None and len(self.wall_steps):
            return np.interp(s, self.wall_steps, self.wall_hours)
        return s * self.scale

    def step_at(self, x: float) -> float:
        if self.mode == "wall" and self.wall_steps is not None and len(self.wall_steps):
            return float(np.interp(x, self.wall_hours, self.wall_steps))
        return x / self.scale if self.scale else x


def axis_for(con: Connection, target: Target, mode: str, lo: int, hi: int, sched: Schedule | None = None) -> Axis:
    """The x axis for steps [lo, hi]; falls back to steps when the run lacks what the mode needs (labelled so)."""
    sched = sched or schedule_of_target(target)
    if mode == "tokens" and sched.tokens_per_step:
        return Axis("tokens", "tokens", float(sched.tokens_per_step))
    if mode == "fraction" and sched.total_steps:
        return Axis("fraction", f"fraction of {numbers.count(sched.total_steps)} steps", 1.0 / sched.total_steps)
    if mode == "wall":
        env = M.downsample(con, target.segments, "_timestamp", lo, hi + 1, 512)
        ok = np.isfinite(env.first)
        if ok.sum() >= 1:
            t0 = S.smallest_value(con, target.run_pks, "_timestamp")
            t0 = t0 if t0 is not None else float(env.first[ok][0])
            return Axis("wall", "hours since start", 1.0, env.step_lo[ok], (env.first[ok] - t0) / 3600.0)
    return Axis("step", "step" if mode == "step" else f"step ({mode} unavailable)", 1.0)
