"""What one chart shows, computed headless: envelope, smoothed line, markers, overlays, band.

Curves are per-bucket min/max envelopes from `store.series.envelopes` (never samples:
a one-step spike stays visible at every zoom), smoothed over the bucket means the way W&B
smooths (EMA, optionally debiased), and mapped onto the panel's x axis (chart_axis.py).
Every function takes an open connection and returns plain data; painting is render/chart.py's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from marinctl.views.chart_axis import Axis
from marinctl.store import Connection
from marinctl.store import alerts as alerts_store
from marinctl.store import anomalies as anomalies_store
from marinctl.store import events as events_store
from marinctl.store import metrics as M
from marinctl.store import series as S
from marinctl.store.lineage import Target

DEFAULT_PANELS = (
    "train/loss", "eval/paloma/macro_loss", "grad/norm/total", "params/norm/total",
    "throughput/mfu", "optim/learning_rate", "moe/drop_fraction", "train/router/routing_entropy_mean",
)
SMOOTHINGS = ("none", "ema", "debiased")


# --- smoothing -------------------------------------------------------------------------------

def smooth(values: np.ndarray, mode: str, weight: float = 0.6) -> np.ndarray:
    """W&B-style smoothing of bucket means: plain EMA, or EMA divided by (1 - w^n) (debiased).

    Non-finite points are skipped (they keep the previous smoothed value) so one NaN
    does not blank the rest of the line.
    """
    v = np.asarray(values, dtype=np.float64)
    if mode == "none" or len(v) == 0:
        return v.copy()
    out = np.empty_like(v)
    acc, n, prev = 0.0, 0, math.nan
    for i, x in enumerate(v):
        if not math.isfinite(x):
            out[i] = prev
            continue
        if mode == "debiased":
            acc = acc * weight + (1 - weight) * x
            n += 1
            prev = acc / (1 - weight ** n)
        else:
            acc = x if n == 0 else acc * weight + (1 - weight) * x
            n += 1
            prev = acc
        out[i] = prev
    return out


# --- panels ----------------------------------------------------------------------------------

@dataclass
class Marker:
    step: int
    kind: str            # 'anomaly' | 'alert' | 'event'
    label: str
    value: float | None = None
    metric: str | None = None    # the chart it belongs on (anomalies, alerts); events go on every chart


@dataclass
class Overlay:
    """Another run's line on this chart; `slot` picks its colour, the same on every chart."""

    name: str
    x: np.ndarray
    y: np.ndarray
    slot: int = 0


@dataclass
class Band:
    """The ladder's interval for one run's loss over the hero: lo–hi at each x of the chart."""

    x: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    label: str = "ladder band"


@dataclass
class Logged:
    """What the cursor reads for one key: the value logged at `step` (the step at or before the
    cursor that last logged this key), and the [lo…hi] envelope of the bucket around it."""

    step: int
    value: float
    lo: float | None = None         # None when the bucket holds one logged value
    hi: float | None = None


@dataclass
class PanelData:
    """One chart's worth: envelope, smoothed line, markers, overlays, all on the panel's x axis."""

    key: str
    steps: np.ndarray        # bucket centre steps
    x: np.ndarray
    vmin: np.ndarray
    vmax: np.ndarray
    line: np.ndarray
    axis_label: str
    raw: np.ndarray = field(default_factory=lambda: np.empty(0))   # bucket means before smoothing
    markers: list[Marker] = field(default_factory=list)
    overlays: list[Overlay] = field(default_factory=list)
    band: Band | None = None
    nonfinite: int = 0
    step_lo: np.ndarray = field(default_factory=lambda: np.empty(0))   # first and last logged step per bucket
    step_hi: np.ndarray = field(default_factory=lambda: np.empty(0))
    last: np.ndarray = field(default_factory=lambda: np.empty(0))      # the value logged at step_hi
    count: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    def __len__(self) -> int:
        return len(self.steps)

    def bucket_at(self, step: float) -> int | None:
        if not len(self.steps):
            return None
        i = int(np.clip(np.searchsorted(self.steps, step), 0, len(self.steps) - 1))
        if i > 0 and abs(self.steps[i - 1] - step) < abs(self.steps[i] - step):
            i -= 1
        return i

    def value_at(self, step: float) -> tuple[float, float, float] | None:
        """(smoothed, min, max) of the bucket nearest `step` (where to draw a marker)."""
        i = self.bucket_at(step)
        return None if i is None else (float(self.line[i]), float(self.vmin[i]), float(self.vmax[i]))

    def logged_at(self, step: int) -> Logged | None:
        """The exact value logged at or before `step`, when the envelope alone can tell.

        It can when `step` is at or past the last logged step of its bucket (that bucket's
        `last` is then the newest value at or before `step`): the cursor sits on bucket ends.
        None when `step` falls inside a bucket (the caller reads the store) or before the data.
        """
        if not len(self.step_hi):
            return None
        b = int(np.searchsorted(self.step_lo, step, side="right")) - 1
        if b < 0 or step < self.step_hi[b]:
            return None
        return self._logged(b)

    def _logged(self, b: int) -> Logged:
        one = self.count[b] <= 1 if len(self.count) else True
        lo, hi = float(self.vmin[b]), float(self.vmax[b])
        return Logged(int(self.step_hi[b]), float(self.last[b]), None if one else lo, None if one else hi)

    def envelope_around(self, step: int) -> tuple[float, float] | None:
        """[min, max] of the bucket holding `step`, when it holds more than one logged value."""
        if not len(self.step_lo):
            return None
        b = int(np.searchsorted(self.step_lo, step, side="right")) - 1
        if b < 0 or (len(self.count) and self.count[b] <= 1):
            return None
        return float(self.vmin[b]), float(self.vmax[b])

    def same_as(self, other: "PanelData") -> bool:
        """The same picture: same buckets, values, markers and overlays (a live refresh that moved nothing).
        Logged values compare exactly; the smoothed line of bucket means to 1e-12: DuckDB sums a bucket
        in parallel, so two reads of the same rows may differ in the last bit (4e-16 on the hero's loss),
        and every chart was drawn again for it."""
        arrays = ("x", "vmin", "vmax", "step_hi", "last")
        if self.key != other.key or len(self) != len(other) or self.axis_label != other.axis_label:
            return False
        if any(not np.array_equal(getattr(self, a), getattr(other, a), equal_nan=True) for a in arrays):
            return False
        if not np.allclose(self.line, other.line, rtol=1e-12, atol=0.0, equal_nan=True):
            return False
        if [(m.step, m.kind, m.label) for m in self.markers] != [(m.step, m.kind, m.label) for m in other.markers]:
            return False
        if len(self.overlays) != len(other.overlays) or any(
                a.name != b.name or a.slot != b.slot or not np.array_equal(a.x, b.x) or
                not np.array_equal(a.y, b.y, equal_nan=True) for a, b in zip(self.overlays, other.overlays)):
            return False
        return (self.band is None) == (other.band is None)

    def bucket_end(self, step: float) -> int | None:
        """The last logged step of the bucket nearest `step` (where a cursor reads exactly)."""
        i = self.bucket_at(step)
        return None if i is None or not len(self.step_hi) else int(self.step_hi[i])


def has_data(con: Connection, target: Target, key: str) -> bool:
    return bool(S.keys_with_data(con, target.run_pks, [key]))


def envelopes(con: Connection, target: Target, keys: Sequence[str], lo: int, hi: int,
              buckets: int) -> dict[str, M.Envelope]:
    """Min/max envelopes of several keys over steps [lo, hi] (inclusive) in one scan."""
    return S.envelopes(con, target.segments, keys, lo, hi + 1, buckets)


def load_panel(con: Connection, target: Target, key: str, lo: int, hi: int, *,
               buckets: int = 200, smoothing: str = "ema", weight: float = 0.6,
               axis: Axis | None = None, markers: Sequence[Marker] = (), env: M.Envelope | None = None) -> PanelData:
    """Envelope of `key` over steps [lo, hi] in at most `buckets` buckets, on `axis`."""
    axis = axis or Axis("step", "step")
    if env is None:
        env = S.envelopes(con, target.segments, [key], lo, hi + 1, buckets).get(key) or M.downsample(
            con, target.segments, key, lo, hi + 1, buckets)
    steps = (env.step_lo + env.step_hi) / 2.0 if len(env) else np.empty(0)
    mine = []
    for m in markers:
        if lo <= m.step <= hi and (m.kind == "event" or m.metric == key):
            mine.append(m)
    return PanelData(key=key, steps=steps, x=axis.x(steps), vmin=env.vmin, vmax=env.vmax,
                     line=smooth(env.mean, smoothing, weight), axis_label=axis.label, markers=mine, raw=env.mean,
                     nonfinite=int(env.nonfinite.sum()) if len(env) else 0,
                     step_lo=env.step_lo, step_hi=env.step_hi, last=env.last, count=env.count)


def markers_for(con: Connection, target: Target, lo: int, hi: int) -> list[Marker]:
    """Anomalies, alerts fired while following (each on its metric's charts) and GitHub events
    aligned to the target's runs."""
    out = [Marker(int(step), "anomaly", f"{metric} {kind}", score, metric=metric)
           for step, metric, kind, score in anomalies_store.in_range(con, target.run_pks, lo, hi)]
    out += [Marker(int(step), "alert", f"{metric} alert: {title}", metric=metric)
            for step, metric, title in alerts_store.marks(con, [r["uid"] for r in target.runs], lo, hi)]
    out += [Marker(int(step), "event", f"{kind}: {title or ''}")
            for step, title, kind in events_store.markers(con, [r["uid"] for r in target.runs], lo, hi)]
    return out


# --- overlays (other runs: views/compare.py) ---------------------------------------------

def predicted_band(con: Connection, key: str, axis: Axis, *, every_key: bool = True) -> Band | None:
    """The ladder's band for one run's loss over the hero, at the ladder's level (None without three
    synced rungs; unless `every_key`, None but for the metric the ladder predicts)."""
    try:
        from marinctl.analysis.scaling.ladder import DEFAULT_LEVEL, DEFAULT_METRIC
        from marinctl.analysis.scaling.ladder import predicted_band as ladder_band

        if not every_key and key != DEFAULT_METRIC:
            return None
        got = ladder_band(con, key)
    except Exception:  # noqa: BLE001 — an optional overlay never breaks the view
        return None
    if not got:
        return None
    steps = np.asarray(got["steps"], dtype=np.float64)
    return Band(axis.x(steps), np.asarray(got["lo"], dtype=np.float64), np.asarray(got["hi"], dtype=np.float64),
                label=f"ladder {DEFAULT_LEVEL:.0%} band")
