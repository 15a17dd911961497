"""A metric chart on a plotext figure: faint min/max envelope, smoothed line, markers, cursor.

Markers: an anomaly is an `x` at its bucket's top, an alert fired while following a ⚑ there
(at the chart's top when its values are NaN/Inf), a GitHub event a vertical line.

`paint` is duck-typed over any plotext figure — the TUI's per-widget `PlotextPlot.plt`, or
the `plotext` module's own figure for `marinctl plot` — so the watch screen and the CLI draw
the same chart. Tick positions are round numbers (1, 2, 2.5, 5 × 10^k apart) labelled by
`numbers.tick` for the axis' mode.
"""

from __future__ import annotations

import math

import numpy as np

from marinctl import numbers
from marinctl.views.chart_axis import Axis
from marinctl.views.chart_data import PanelData

RAW_COLOR = (90, 90, 110)
LINE_COLOR = (80, 170, 255)
BAND_COLOR = (120, 120, 60)
ANOMALY_COLOR = (255, 80, 80)
ALERT_COLOR = (255, 150, 40)
ALERT_GLYPH = "⚑"       # an alert fired while following, on its metric's chart (one cell wide)
EVENT_COLOR = (200, 180, 60)
CURSOR_COLOR = (240, 240, 240)
OVERLAY_COLORS = ((230, 160, 60), (160, 110, 230), (110, 200, 140), (220, 90, 150), (200, 200, 80))


def fit_range(panel: PanelData, logy: bool = False) -> tuple[float, float] | None:
    """A y range around the smoothed line and the other runs' lines (not the envelope's spikes):
    the `a` key's view of a chart whose one spike flattens everything else. Spikes above it
    are drawn as ▲ on the top edge, so none is lost."""
    ys = [panel.line[np.isfinite(panel.line)]] + [o.y[np.isfinite(o.y)] for o in panel.overlays]
    ys = np.concatenate(ys) if ys else np.empty(0)
    if logy:
        ys = ys[ys > 0]
    if not len(ys):
        return None
    lo, hi = float(np.percentile(ys, 1)), float(np.percentile(ys, 99))
    pad = (hi - lo) * 0.15 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - pad, hi + pad
    if logy:
        lo = max(lo, float(ys.min()) * 0.9)
    return lo, hi


def paint(fig, panel: PanelData, *, width: int, height: int, logy: bool = False,
          cursor_step: float | None = None, title: str | None = None, axis: Axis | None = None,
          color: bool = True, ylim: tuple[float, float] | None = None, xlim: tuple[float, float] | None = None,
          xlabel: bool = True) -> None:
    """Draw one panel on a plotext figure: faint raw envelope, smoothed line, markers, cursor.

    `ylim` clips the y axis (buckets whose max lies above it get a ▲ on the top edge);
    `xlim` pins the x axis (the view's window, so compared runs never widen it).
    """
    fig.clear_figure()
    fig.plotsize(max(width, 10), max(height, 4))
    fig.title(title or panel.key)
    kw = lambda rgb: {"color": rgb} if color else {}  # noqa: E731
    ok = np.isfinite(panel.vmin) & np.isfinite(panel.vmax) if len(panel) else np.zeros(0, bool)
    if logy:
        ok &= (panel.vmin > 0)
    x = panel.x[ok].tolist()
    if panel.band is not None and len(panel.band.x):
        fig.plot(panel.band.x.tolist(), panel.band.lo.tolist(), marker="dot", **kw(BAND_COLOR))
        fig.plot(panel.band.x.tolist(), panel.band.hi.tolist(), marker="dot", label=panel.band.label, **kw(BAND_COLOR))
    if x:
        fig.plot(x, panel.vmax[ok].tolist(), marker="braille", **kw(RAW_COLOR))
        fig.plot(x, panel.vmin[ok].tolist(), marker="braille", **kw(RAW_COLOR))
        line_ok = ok & np.isfinite(panel.line)
        if logy:
            line_ok &= panel.line > 0
        fig.plot(panel.x[line_ok].tolist(), panel.line[line_ok].tolist(), marker="braille", **kw(LINE_COLOR))
    for ov in panel.overlays:
        good = np.isfinite(ov.y) & ((ov.y > 0) if logy else True)
        if good.any():
            fig.plot(ov.x[good].tolist(), ov.y[good].tolist(), marker="braille", **kw(overlay_color(ov.slot)))
    ax = axis or Axis("step", panel.axis_label)
    anomalies = [m for m in panel.markers if m.kind == "anomaly"]
    if anomalies and x:
        ys = []
        for m in anomalies:
            v = panel.value_at(m.step)
            ys.append(v[2] if v else math.nan)
        pts = [(float(ax.x([m.step])[0]), y) for m, y in zip(anomalies, ys) if math.isfinite(y) and (y > 0 or not logy)]
        if pts:
            fig.scatter([p[0] for p in pts], [p[1] for p in pts], marker="x", **kw(ANOMALY_COLOR))
    alerts = [m for m in panel.markers if m.kind == "alert"]
    if alerts and x:
        top = float(np.nanmax(panel.vmax[ok])) if ok.any() else math.nan
        pts = []
        for m in alerts:          # at the bucket's top; a NaN/Inf episode, whose values are not drawn, at the chart's
            v = panel.value_at(m.step)
            y = v[2] if v and math.isfinite(v[2]) and (v[2] > 0 or not logy) else top
            if math.isfinite(y):
                pts.append((float(ax.x([m.step])[0]), y))
        if pts:
            fig.scatter([p[0] for p in pts], [p[1] for p in pts], marker=ALERT_GLYPH, **kw(ALERT_COLOR))
    for m in panel.markers:
        if m.kind == "event":
            fig.vline(float(ax.x([m.step])[0]), **kw(EVENT_COLOR))
    if cursor_step is not None and x:
        fig.vline(float(ax.x([cursor_step])[0]), **kw(CURSOR_COLOR))
    if ylim is None:
        ylim = _flat_ylim([panel.vmin[ok], panel.vmax[ok]] + [o.y[np.isfinite(o.y)] for o in panel.overlays])
    if ylim is not None and x:
        over = ok & (panel.vmax > ylim[1])
        if over.any():
            fig.scatter(panel.x[over].tolist(), [ylim[1]] * int(over.sum()), marker="▲", **kw(ANOMALY_COLOR))
        fig.ylim(*ylim)
    if xlim is not None and xlim[1] > xlim[0]:
        fig.xlim(*xlim)
    if logy:
        fig.yscale("log")
    if x:
        lo_x, hi_x = xlim if xlim is not None and xlim[1] > xlim[0] else (float(min(x)), float(max(x)))
        ticks = nice_ticks(lo_x, hi_x, max(3, width // 11))
        if ticks:
            fig.xticks(ticks, [numbers.tick(t, ax.mode) for t in ticks])
    if xlabel:
        fig.xlabel(panel.axis_label)


def _flat_ylim(parts: list[np.ndarray]) -> tuple[float, float] | None:
    """A y range for values equal but for float rounding (a memory percentage logged as
    3.9417606500654356 and 3.941760650065436): plotext would label such a range with 19 digits
    and squeeze the chart; drawn instead as it draws a constant, ±50% around the value."""
    ys = np.concatenate(parts)
    if not len(ys):
        return None
    lo, hi = float(ys.min()), float(ys.max())
    if not (0 < hi - lo <= 1e-9 * max(abs(lo), abs(hi))):
        return None
    mid = (lo + hi) / 2
    pad = abs(mid) * 0.5 or 1.0
    return mid - pad, mid + pad


def overlay_color(slot: int) -> tuple[int, int, int]:
    """The colour of another run's line: by its slot, so it is the same on every chart and in the legend."""
    return OVERLAY_COLORS[slot % len(OVERLAY_COLORS)]


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick positions (1, 2, 2.5, 5 × 10^k apart) inside [lo, hi]."""
    span = hi - lo
    if not (math.isfinite(span) and span > 0):
        return []
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if raw <= m * mag)
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def chart_text(panel: PanelData, *, width: int, height: int, axis: Axis, logy: bool = False,
               title: str | None = None, color: bool = True) -> str:
    """One chart as text for stdout (`marinctl plot`), drawn on plotext's own figure; no ANSI when `color` is off."""
    import plotext

    paint(plotext, panel, width=width, height=height, logy=logy, axis=axis, title=title)
    text = plotext.build()
    plotext.clear_figure()
    return text if color else plotext.uncolorize(text)
