"""The text lines around the charts: the cursor readout and the current view settings.

Pure functions of the view (analysis/watch_view.py) so the words can be checked without a
terminal; numbers through `marinctl.numbers`, stored names through `inert`.
"""

from __future__ import annotations

import math

from marinctl import numbers as N
from marinctl.analysis.chart_data import Marker, PanelData
from marinctl.analysis.watch_view import View
from marinctl.text import inert


def short_key(key: str) -> str:
    parts = key.split("/")
    return key if len(parts) <= 2 else f"{parts[0]}/{parts[-1]}"


def panel_readout(panel: PanelData, step: float) -> str:
    """`name mean [min…max]` of the bucket nearest `step` (just the mean when the bucket is one value)."""
    got = panel.mean_at(step)
    if got is None:
        return ""
    mean, lo, hi = got
    if lo == hi or not math.isfinite(lo):
        return f"{short_key(panel.key)} {N.sig(mean, missing='nan')}"
    return f"{short_key(panel.key)} {N.sig(mean, missing='nan')} [{N.sig(lo)}…{N.sig(hi)}]"


def bucket_width(view: View | None) -> float:
    """Steps per chart bucket: how far one cursor move goes."""
    if view is None:
        return 1.0
    return max(1.0, (view.hi - view.lo) / max(1, view.params.buckets))


def markers_near(view: View | None, step: float) -> list[Marker]:
    if view is None:
        return []
    w = bucket_width(view)
    return [m for m in view.markers if abs(m.step - step) <= w]


def readout_line(view: View, step: float) -> str:
    """`▏step N` (and the x value off the step axis), up to six panel values, nearby markers."""
    parts = [f"▏step {N.count(round(step))}"]
    if view.axis is not None and view.axis.mode != "step":
        parts[0] += f" ({view.axis.label} {N.sig(float(view.axis.x([step])[0]))})"
    for panel in view.panels[:6]:
        text = panel_readout(panel, step)
        if text:
            parts.append(text)
    near = markers_near(view, step)
    if near:
        parts.append(" ".join(("✕ " if m.kind == "anomaly" else "│ ") + m.label[:40] for m in near[:2]))
    return inert("  ".join(parts), single_line=True)


def view_line(view: View, logy: bool) -> str:
    """x axis, smoothing, log-y, zoom window, overlays and filter, as one dim line."""
    p = view.params
    zoom = "full range" if p.lo is None and p.hi is None else f"steps {N.count(view.lo)}–{N.count(view.hi)}"
    parts = [f"x: {view.axis.label if view.axis else p.xmode}", f"smoothing: {p.smoothing}",
             f"log-y: {'on' if logy else 'off'}", zoom]
    if p.overlays:
        parts.append("overlays on")
    if p.pattern:
        parts.append(f"filter /{p.pattern}/")
    return " · ".join(parts)
