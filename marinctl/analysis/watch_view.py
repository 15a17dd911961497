"""One frame of `watch`, read in one go: what the user asked to see → everything to draw.

`build_view` runs in a worker thread with one short connection (DuckDB allows one writing
process, and `sync` may be writing in another terminal); it returns plain data the TUI
paints. Every number on screen comes from here, so it can be tested without a terminal.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from marinctl.analysis.chart_axis import Axis, axis_for
from marinctl.analysis.chart_data import (
    DEFAULT_PANELS,
    Marker,
    PanelData,
    envelopes,
    load_panel,
    markers_for,
    panel_keys,
    predicted_band,
    rung_overlays,
)
from marinctl.analysis.run_header import HeaderStats, header_stats
from marinctl.analysis.run_list import SidebarEntry, sidebar_entries
from marinctl.analysis.schedule import schedule_of_target
from marinctl.store import runs as runs_store
from marinctl.store import series as S

MAX_PANELS = 16


@dataclass(frozen=True)
class ViewParams:
    """What the user asked to see: an immutable snapshot handed to a worker."""

    ref: str | None = None
    pattern: str | None = None
    lo: int | None = None           # zoom window in steps; None: the full range, following the live end
    hi: int | None = None
    xmode: str = "step"
    smoothing: str = "ema"
    overlays: bool = False
    buckets: int = 200
    all_keys: tuple[str, ...] | None = None


@dataclass
class View:
    params: ViewParams
    ref: str | None = None
    target_name: str | None = None      # what explain/events accept for the shown run ('hero', a run id)
    header: HeaderStats | None = None
    panels: list[PanelData] = field(default_factory=list)
    axis: Axis | None = None
    lo: int = 0
    hi: int = 0
    full_lo: int = 0
    full_hi: int = 0
    markers: list[Marker] = field(default_factory=list)
    sidebar: list[SidebarEntry] = field(default_factory=list)
    cache_time: datetime | None = None
    error: str | None = None
    matched: int = 0                # keys the filter matched (panels may be capped)


def build_view(store, params: ViewParams) -> View:
    """Read everything one frame needs in one short connection (runs in a worker thread)."""
    from marinctl.errors import UserError
    from marinctl.store.lineage import resolve_target

    view = View(params, ref=params.ref)
    with store.connect() as con:
        view.sidebar = sidebar_entries(con)
        view.cache_time = runs_store.last_synced(con)
        try:
            target = resolve_target(con, params.ref, stitched=True)
        except UserError as exc:
            view.error = exc.message + (f" — {exc.hint}" if exc.hint else "")
            return view
        keys = panel_keys(con, target, params.pattern, params.all_keys)
        view.matched = len(keys)
        keys = keys[:MAX_PANELS]
        view.target_name = target.name
        full_lo, full_hi = S.key_step_range(con, target.segments, keys or list(DEFAULT_PANELS))
        view.header = header_stats(con, target, last_step=full_hi)
        if full_lo is None and not keys and params.pattern:
            return view
        if full_lo is None:
            view.error = f"{target.name} has no history stored yet"
            return view
        view.full_lo, view.full_hi = int(full_lo), int(full_hi)
        lo = view.full_lo if params.lo is None else max(view.full_lo, params.lo)
        hi = view.full_hi if params.hi is None else min(view.full_hi, params.hi)
        if hi <= lo:
            lo, hi = view.full_lo, view.full_hi
        view.lo, view.hi = lo, hi
        axis = axis_for(con, target, params.xmode, lo, hi, schedule_of_target(target))
        view.axis = axis
        view.markers = markers_for(con, target, lo, hi)
        envs = envelopes(con, target, keys, lo, hi, params.buckets)
        for key in keys:
            panel = load_panel(con, target, key, lo, hi, buckets=params.buckets, smoothing=params.smoothing,
                               axis=axis, markers=view.markers, env=envs.get(key))
            if params.overlays and axis.mode == "fraction":
                panel.overlays = rung_overlays(con, key, params.buckets, exclude_uid=target.leaf["uid"])
            if params.overlays and target.name == "hero":
                panel.band = predicted_band(con, key, axis)
            view.panels.append(panel)
    return view
