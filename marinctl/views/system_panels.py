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

from marinctl.views.chart_axis import Axis
from marinctl.views.chart_data import PanelData, smooth
from marinctl.store import Connection
from marinctl.store import metrics as M
from marinctl.store import system as system_store
from marinctl.store.lineage import Target

PLACEMENT = "x: the step at each sample's time (the run's _timestamp); samples outside logged steps not drawn"
TIME_BINS_PER_BUCKET = 4   # time bins read per step bucket: finer than the buckets they are gathered into
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
    parts: dict[str, list[tuple[np.ndarray, np.ndarray, system_store.Bins]]] = {k: [] for k in keys}
    for run_pk, s_lo, s_hi in target.segments:
        a = lo if s_lo is None else max(lo, s_lo)
        b = hi + 1 if s_hi is None else min(hi + 1, s_hi)
        if b <= a:
            continue
        at_step, at_time = _clock(con, run_pk, a, b)
        if len(at_step) < 2:
            continue
        got = system_store.binned(con, run_pk, keys, at_time[0], at_time[-1], TIME_BINS_PER_BUCKET * buckets)
        for key, bins in got.items():
            placed = (np.interp(bins.t_first, at_time, at_step), np.interp(bins.t_last, at_time, at_step))
            parts[key].append((*placed, bins))
    panels = [_panel(key, parts[key], lo, hi, axis, buckets, smoothing) for key in keys if parts[key]]
    return SystemPanels(panels, PLACEMENT)


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


def _panel(key: str, parts: list, lo: int, hi: int, axis: Axis, buckets: int, smoothing: str) -> PanelData:
    """Time bins placed at their steps, gathered into the view's step buckets (as `store.metrics.downsample`
    buckets history): finite min/max envelope, mean, the last sample's value and step."""
    first = np.concatenate([p[0] for p in parts])
    last_step = np.concatenate([p[1] for p in parts])
    cat = lambda name: np.concatenate([getattr(p[2], name) for p in parts])  # noqa: E731
    vmin, vmax, vsum, finite, count, last = (cat(n) for n in ("vmin", "vmax", "vsum", "finite", "count", "last"))
    order = np.argsort(last_step, kind="stable")
    first, last_step, vmin, vmax, vsum, finite, count, last = (
        a[order] for a in (first, last_step, vmin, vmax, vsum, finite, count, last))
    width = max(1.0, (hi + 1 - lo) / max(1, int(buckets)))
    b = np.floor((last_step - lo) / width).astype(np.int64)
    starts = np.flatnonzero(np.concatenate([[True], np.diff(b) != 0]))
    ends = np.append(starts[1:], len(b))
    with np.errstate(invalid="ignore", divide="ignore"):
        n_finite = np.add.reduceat(finite, starts)
        mean = np.where(n_finite > 0, np.add.reduceat(np.nan_to_num(vsum), starts) / np.maximum(n_finite, 1), np.nan)
    lo_env = np.fmin.reduceat(vmin, starts)
    hi_env = np.fmax.reduceat(vmax, starts)
    step_lo = np.minimum.reduceat(first, starts)
    step_hi = last_step[ends - 1]
    n = np.add.reduceat(count, starts)
    centre = (step_lo + step_hi) / 2.0
    return PanelData(key=key, steps=centre, x=axis.x(centre), vmin=lo_env, vmax=hi_env, line=smooth(mean, smoothing),
                     axis_label=axis.label, raw=mean, nonfinite=int((n - n_finite).sum()), step_lo=step_lo,
                     step_hi=step_hi, last=last[ends - 1], count=n.astype(np.int64))
