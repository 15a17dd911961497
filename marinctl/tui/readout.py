"""The text around the charts: the cursor readout, the view settings, the notice, the panes' notes.

Pure functions of the view (views/watch_view.py) so the words can be checked without a
terminal; numbers through `marinctl.numbers`, stored names through `inert`.
"""

from __future__ import annotations

from marinctl import numbers as N
from marinctl.views.chart_data import Logged, Marker
from marinctl.views.watch_view import View
from marinctl.text import inert
from marinctl.tui.paint import value_text


GLYPHS = {"anomaly": "✕ ", "alert": "⚑ ", "event": "│ "}     # how the readout names the markers near the cursor


def bucket_width(view: View | None) -> float:
    """Steps per chart bucket: how far one cursor move goes."""
    return 1.0 if view is None else view.width


def markers_near(view: View | None, step: float) -> list[Marker]:
    if view is None:
        return []
    w = bucket_width(view)
    return [m for m in view.markers if abs(m.step - step) <= w]


def readout_line(view: View, step: int, values: dict[str, Logged], focused: str | None = None,
                 width: int = 200) -> str:
    """`▏step N` (and the x value off the step axis), what each chart logged there, nearby markers.

    Each value is the one logged at that step, or at the step named after `@` when the key
    was last logged before it (a key logged every 10 steps); `[min…max]` is its bucket's
    envelope when the view is zoomed out. The focused chart comes first; as many as fit.
    """
    head = f"▏step {N.count(step)}"
    if view.axis is not None and view.axis.mode != "step":
        head += f" ({view.axis.label} {N.sig(float(view.axis.x([step])[0]))})"
    parts = [head]
    near = markers_near(view, step)
    tail = "  " + " ".join(GLYPHS.get(m.kind, "│ ") + m.label[:40] for m in near[:2]) if near else ""
    keys = list(dict.fromkeys(p.key for p in view.panels))      # a curated key also shows in its section
    if focused in keys:
        keys.remove(focused)
        keys.insert(0, focused)
    used = len(head) + len(tail)
    for key in keys:
        text = f"{view.labels.get(key, key)} {value_text(values.get(key), step) if key in values else '…'}"
        if used + len(text) + 2 > width and len(parts) > 1:
            parts.append(f"+{len(keys) - len(parts) + 1} more")
            break
        parts.append(text)
        used += len(text) + 2
    return inert("  ".join(parts) + tail, single_line=True)


def page_line(view: View) -> str:
    """`page 2/14 · 2×4 grid · 649 keys` (or the filter's match count)."""
    p = view.params
    if view.error:           # no run drawn: no pages, and no key list is coming
        return f"{p.cols}×{p.rows} grid"
    parts = [f"page {view.page + 1}/{view.pages if view.total_keys is not None else '…'}", f"{p.cols}×{p.rows} grid"]
    if p.pattern:
        of = f" of {view.total_keys}" if view.total_keys is not None else ""
        parts.append(f"{view.matched}{of} keys match")
    elif view.total_keys is not None:
        parts.append(f"{view.total_keys} keys")
    else:
        parts.append("listing keys…")
    return " · ".join(parts)


def view_line(view: View, logy: bool, logy_charts: int = 0) -> str:
    """x axis, smoothing, log-y, zoom window, overlays and filter, as one dim line."""
    p = view.params
    zoom = "full range" if p.lo is None and p.hi is None else f"steps {N.count(view.lo)}–{N.count(view.hi)}"
    log = f"log-y: {'on' if logy else 'off'}" + (f" ({logy_charts} chart{'s' if logy_charts != 1 else ''} flipped)"
                                                  if logy_charts else "")
    parts = [f"x: {view.axis.label if view.axis else p.xmode}", f"smoothing: {p.smoothing}", log, zoom]
    if p.overlays:
        parts.append("overlays on")
    if p.compare:
        parts.append(f"comparing {len(p.compare)}")
    if p.pattern:
        parts.append(f"filter /{p.pattern}/")
    parts.append(page_line(view))
    return " · ".join(parts)


def notice_text(view: View, starting: str | None) -> str:
    """The line over the charts: why there is nothing to draw, or that the filter matched nothing."""
    if view.error and starting and (view.ref is None or "no runs" in view.error or "no history" in view.error):
        return f"{starting} (the view appears as soon as the first steps are written)"
    if view.error:
        return view.error
    if view.params.pattern and not view.matched:
        return f"no key matches /{view.params.pattern}/ (esc clears the filter)"
    return ""


def offline_text(view: View | None) -> str:
    """What the view shows while W&B cannot be reached (never "cache from never")."""
    if view is None:
        return "reading the store…"
    if view.cache_time is not None:
        return f"showing cache from {view.cache_time.strftime('%Y-%m-%d %H:%M UTC')}"
    return "showing what the store holds" if view.panels else "nothing synced yet"


def system_note(view: View) -> str:
    """What the system pane says over its charts, or instead of them."""
    if view.system_panels:
        return view.system_note       # how samples taken by time sit on the step axis ('' for history keys)
    if view.total_keys is None and not view.error:
        return "listing the run's keys…"
    return ("no system metrics stored for this run (W&B records GPU/CPU/memory stats every 15 s"
            " unless the run disabled them)")
