"""A metric chart on a plotext figure: faint min/max envelope, smoothed line, markers, cursor.

`paint` is duck-typed over any plotext figure — the TUI's per-widget `PlotextPlot.plt`, or
the `plotext` module's own figure for `marinctl plot` — so the watch screen and the CLI draw
the same chart. Tick positions are round numbers (1, 2, 2.5, 5 × 10^k apart) labelled by
`numbers.tick` for the axis' mode.
"""

from __future__ import annotations

import math

import numpy as np

from marinctl import numbers
from marinctl.analysis.chart_axis import Axis
from marinctl.analysis.chart_data import PanelData

RAW_COLOR = (90, 90, 110)
LINE_COLOR = (80, 170, 255)
BAND_COLOR = (120, 120, 60)
ANOMALY_COLOR = (255, 80, 80)
EVENT_COLOR = (200, 180, 60)
CURSOR_COLOR = (240, 240, 240)
OVERLAY_COLORS = ((230, 160, 60), (160, 110, 230), (110, 200, 140), (220, 90, 150), (200, 200, 80))


def paint(fig, panel: PanelData, *, width: int, height: int, logy: bool = False,
          cursor_step: float | None = None, title: str | None = None, axis: Axis | None = None,
          color: bool = True) -> None:
    """Draw one panel on a plotext figure: faint raw envelope, smoothed line, markers, cursor."""
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
    for i, ov in enumerate(panel.overlays):
        good = np.isfinite(ov.y) & ((ov.y > 0) if logy else True)
        if good.any():
            fig.plot(ov.x[good].tolist(), ov.y[good].tolist(), marker="braille", label=ov.name,
                     **kw(OVERLAY_COLORS[i % len(OVERLAY_COLORS)]))
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
    for m in panel.markers:
        if m.kind == "event":
            fig.vline(float(ax.x([m.step])[0]), **kw(EVENT_COLOR))
    if cursor_step is not None and x:
        fig.vline(float(ax.x([cursor_step])[0]), **kw(CURSOR_COLOR))
    if logy:
        fig.yscale("log")
    if x:
        ticks = nice_ticks(float(min(x)), float(max(x)), max(3, width // 11))
        if ticks:
            fig.xticks(ticks, [numbers.tick(t, ax.mode) for t in ticks])
    fig.xlabel(panel.axis_label)


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
