"""The system metrics W&B recorded (store/system.py), drawn on the main charts' x axis.

Samples are taken by wall time, charts are drawn over steps. Each sample is placed at the step
the run had reached when it was taken: its time interpolated over the run's own logged
(`_step`, `_timestamp`) pairs. Every x mode then follows from steps as for any chart (in wall
mode that gives back the sample's own hours since start), so the cursor lines up on every
chart. Samples taken before the first or after the last logged step have no step and are not
drawn; the pane says so. A lineage is placed run by run, each over its own segment.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from marinctl.analysis.chart_axis import Axis
from marinctl.analysis.chart_data import PanelData, smooth
from marinctl.store import Connection
from marinctl.store import metrics as M
from marinctl.store import system as system_store
from marinctl.store.lineage import Target

PLACEMENT = "x: the step at each sample's time (the run's _timestamp); samples outside logged steps not drawn"
FIRST = ("system.gpu.", "system.cpu", "system.memory", "system.proc.", "system.disk.", "system.network.")


@dataclass
class SystemPanels:
    panels: list[PanelData]
    note: str               # how the samples are placed (shown in the pane)


def stored_keys(con: Connection, target: Target) -> list[str]:
    """The system keys the target's runs have samples of: GPU, CPU and memory first, then disk, network, the rest."""
    def rank(key: str) -> int:
        return next((i for i, p in enumerate(FIRST) if key.startswith(p)), len(FIRST))

    return sorted(system_store.keys(con, target.run_pks), key=lambda k: (rank(k), k))


def system_panels(con: Connection, target: Target, keys: list[str], lo: int, hi: int, axis: Axis, *,
                  buckets: int = 200, smoothing: str = "ema") -> SystemPanels:
    """One panel per stored system key over steps [lo, hi], bucketed as the main charts are."""
    steps: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    values: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    for run_pk, s_lo, s_hi in target.segments:
        a = lo if s_lo is None else max(lo, s_lo)
        b = hi + 1 if s_hi is None else min(hi + 1, s_hi)
        if b <= a:
            continue
        at_step, at_time = _clock(con, run_pk, a, b)
        if len(at_step) < 2:
            continue
        for key, (t, v) in system_store.samples(con, run_pk, keys, at_time[0], at_time[-1]).items():
            steps[key].append(np.interp(t, at_time, at_step))
            values[key].append(v)
    panels = []
    for key in keys:
        s = np.concatenate(steps[key]) if steps[key] else np.empty(0)
        v = np.concatenate(values[key]) if values[key] else np.empty(0)
        panels.append(_panel(key, s, v, lo, hi, axis, buckets, smoothing))
    return SystemPanels([p for p in panels if len(p)], PLACEMENT)


def _clock(con: Connection, run_pk: int, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, times) of the run's logged `_timestamp` over [lo, hi), both increasing."""
    env = M.downsample(con, [(run_pk, lo, hi)], "_timestamp", lo, hi, 1024)
    if not len(env):
        return np.empty(0), np.empty(0)
    s = np.concatenate([env.step_lo, env.step_hi])
    t = np.concatenate([env.first, env.last])
    ok = np.isfinite(t)
    s, t = s[ok], t[ok]
    order = np.argsort(s, kind="stable")
    s, t = s[order], np.maximum.accumulate(t[order])      # a clock never runs backwards
    keep = np.concatenate([[True], np.diff(t) > 0]) if len(t) else np.empty(0, bool)
    return s[keep], t[keep]


def _panel(key: str, steps: np.ndarray, values: np.ndarray, lo: int, hi: int, axis: Axis,
           buckets: int, smoothing: str) -> PanelData:
    """Samples bucketed over [lo, hi] like `store.metrics.downsample`: min/max envelope, mean, last."""
    order = np.argsort(steps, kind="stable")
    steps, values = steps[order], values[order]
    width = max(1.0, (hi + 1 - lo) / max(1, int(buckets)))
    b = np.floor((steps - lo) / width).astype(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], np.diff(b) != 0])) if len(b) else np.empty(0, np.int64)
    ends = np.append(starts[1:], len(b)).astype(np.int64)
    finite = np.isfinite(values)
    vmin, vmax, mean = (np.full(len(starts), np.nan) for _ in range(3))
    for i, (s, e) in enumerate(zip(starts, ends)):
        f = values[s:e][finite[s:e]]
        if len(f):
            vmin[i], vmax[i], mean[i] = f.min(), f.max(), f.mean()
    step_lo, step_hi = steps[starts], steps[ends - 1]
    centre = (step_lo + step_hi) / 2.0
    return PanelData(key=key, steps=centre, x=axis.x(centre), vmin=vmin, vmax=vmax, line=smooth(mean, smoothing),
                     axis_label=axis.label, raw=mean, nonfinite=int((~finite).sum()), step_lo=step_lo,
                     step_hi=step_hi, last=values[ends - 1], count=(ends - starts).astype(np.int64))
