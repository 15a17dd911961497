"""One frame of `watch`, read in one go: what the user asked to see → everything to draw.

`build_view` runs in a worker thread with one short connection (DuckDB allows one writing
process, and `sync` may be writing in another terminal); it returns plain data the TUI
paints. Every number on screen comes from here, so it can be tested without a terminal.
Only the page on screen is read: a run with 649 keys costs what its 8 visible charts cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime

from marinctl.views import metric_pages as MP
from marinctl.views.chart_axis import Axis, axis_for
from marinctl.views.chart_data import DEFAULT_PANELS, Logged, Marker, PanelData, envelopes, load_panel, markers_for, predicted_band
from marinctl.views.compare import LegendEntry, compare_lines, ladder_lines
from marinctl.views.run_header import HeaderStats, header_stats
from marinctl.views.run_list import SidebarEntry, sidebar_entries
from marinctl.analysis.schedule import schedule_of_target
from marinctl.views.system_panels import stored_keys, system_panels
from marinctl.store import alerts as alerts_store
from marinctl.store import runs as runs_store
from marinctl.store import series as S


@dataclass(frozen=True)
class ViewParams:
    """What the user asked to see: an immutable snapshot handed to a worker."""

    ref: str | None = None
    pattern: str | None = None
    lo: int | None = None           # zoom window in steps; None: the full range, following the live end
    hi: int | None = None
    xmode: str = "step"
    smoothing: str = "ema"
    overlays: bool = False          # `o`: ladder rungs, repro runs and the prediction band
    buckets: int = 200
    all_keys: tuple[str, ...] | None = None   # every key of the run, once loaded (None: curated page only)
    page: int = 0
    cols: int = 2
    rows: int = 4
    collapsed: frozenset[str] = frozenset()
    compare: tuple[str, ...] = ()   # other runs drawn on the same charts (sidebar `space`)
    system: bool = False            # read the system-metrics pane's charts too
    jump: str | None = None         # show the page holding this key (the palette's `key:` commands)


@dataclass
class View:
    params: ViewParams
    ref: str | None = None
    target_name: str | None = None      # what explain/events accept for the shown run ('hero', a run id)
    shown: str | None = None            # the sidebar's ref of the run drawn ('hero' or its uid; ref may be None)
    alerts: list[dict] = field(default_factory=list)   # its newest alerts (store/alerts.py `recent`), oldest first
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
    version: tuple = ()                 # the store's data_version when this was read (an idle view re-reads nothing)
    matched: int = 0                    # keys the filter matched (all browsable keys without a filter)
    total_keys: int | None = None       # browsable keys of the run (None until the key list is loaded)
    sections: tuple[MP.Section, ...] = ()
    page: int = 0
    pages: int = 1
    page_of_key: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)     # shortest unique names, for the readout
    legend: list[LegendEntry] = field(default_factory=list)
    system_panels: list[PanelData] = field(default_factory=list)
    system_keys: int = 0
    system_note: str = ""                                    # how stored system samples are placed on x
    sampled_keys: frozenset[str] = frozenset()               # system panels drawn from samples by time

    @property
    def width(self) -> float:
        """Steps per bucket (every chart of the view shares the buckets)."""
        return max(1.0, (self.hi + 1 - self.lo) / max(1, self.params.buckets))

    def bucket_end(self, step: float) -> int:
        """The last step of the bucket holding `step`: a cursor there reads every key exactly."""
        b = math.floor((min(max(step, self.lo), self.hi) - self.lo) / self.width + 1e-9)
        return int(min(self.hi, math.ceil(self.lo + (b + 1) * self.width - 1e-9) - 1))

    def readout(self, step: int) -> dict[str, Logged | None]:
        """{key: what the cursor reads} for the keys the envelopes answer exactly; the others are absent."""
        out = {}
        for panel in self.panels + self.system_panels:
            got = panel.logged_at(step)
            if got is not None:
                out[panel.key] = got
        return out


def page_layout(params: ViewParams, curated: list[str]) -> tuple[list[MP.Page], int, int | None]:
    """(pages, keys matched, browsable keys) for the params; the curated page alone until keys load."""
    if params.all_keys is None:
        keys = MP.matching(curated, params.pattern)
        sections = MP.sections_of(keys) if params.pattern else MP.sections_of([], keys)
        return MP.paginate(sections, params.cols, params.rows, params.collapsed), len(keys), None
    every = MP.browsable(list(params.all_keys))
    keys = MP.matching(every, params.pattern)
    sections = MP.sections_of(keys) if params.pattern else MP.sections_of(keys, curated)
    return MP.paginate(sections, params.cols, params.rows, params.collapsed), len(keys), len(every)


def _lay_out(view: View, curated: list[str]) -> list[str]:
    """Set `view`'s pages, page, sections and key counts from its params; the keys of its page."""
    params = view.params
    pages, view.matched, view.total_keys = page_layout(params, curated)
    view.pages = len(pages)
    view.page_of_key = {k: i for i, p in reversed(list(enumerate(pages))) for k in p.keys}
    wanted = view.page_of_key.get(params.jump, params.page) if params.jump else params.page
    view.page = min(max(0, wanted), len(pages) - 1)
    view.sections = pages[view.page].sections
    view.system_keys = sum(1 for k in params.all_keys or () if MP.is_system(k))
    return pages[view.page].keys


def with_keys(view: View, keys: list[str]) -> View | None:
    """`view` as `build_view` reads it once the run's `keys` are listed, without reading again: the
    page count and key counts change, the charts do not. None when they would (the page shows other
    keys, or system panels are to be loaded): then read it with the keys."""
    if view.error or view.axis is None:
        return None
    keyed = replace(view, params=replace(view.params, all_keys=tuple(keys)))
    have = set(keys)
    page_keys = _lay_out(keyed, [k for k in DEFAULT_PANELS if k in have])
    read = {p.key: p for p in view.panels}
    if not set(page_keys) <= set(read) or (keyed.params.system and keyed.system_keys):
        return None
    # a curated key also charted in its own section (`grad/norm/` on a short run's first page)
    keyed.panels = [read[k] for k in page_keys]
    keyed.labels = MP.short_labels([p.key for p in keyed.panels + keyed.system_panels])
    return keyed


def key_list(store, ref: str | None) -> list[str]:
    """Every key run `ref` logged, sorted: what paging and the filter browse. Read apart from the
    first view: at hero scale it scans every stored row (seconds), the first frame needs none of it."""
    from marinctl.store.lineage import resolve_target

    with store.connect() as con:
        return S.keys_of(con, resolve_target(con, ref, stitched=True).run_pks)


def build_view(store, params: ViewParams) -> View:
    """Read everything one frame needs in one short connection (runs in a worker thread)."""
    from marinctl.errors import UserError
    from marinctl.store.lineage import NoDefaultRun, resolve_target

    view = View(params, ref=params.ref)
    with store.connect() as con:
        view.version = S.data_version(con)
        view.sidebar = sidebar_entries(con)
        view.cache_time = runs_store.last_synced(con)
        try:
            target = resolve_target(con, params.ref, stitched=True)
        except NoDefaultRun as exc:        # watch names a run by TARGET or in its sidebar, not by --run
            view.error = (f"the store holds {exc.runs} runs and no hero lineage: pick one in the runs sidebar"
                          " (tab, ↓, enter) or open it with `marinctl watch RUN` — list them with `marinctl runs`")
            return view
        except UserError as exc:
            view.error = exc.message + (f" — {exc.hint}" if exc.hint else "")
            return view
        view.target_name = target.name
        view.shown = "hero" if target.name == "hero" else target.leaf["uid"]
        view.alerts = alerts_store.recent(con, [r["uid"] for r in target.runs])
        if params.all_keys is not None:
            have = set(params.all_keys)
            curated = [k for k in DEFAULT_PANELS if k in have]
        else:
            present = S.keys_with_data(con, target.run_pks, DEFAULT_PANELS)
            curated = [k for k in DEFAULT_PANELS if k in present]
        keys = _lay_out(view, curated)
        system = [k for k in params.all_keys or () if MP.is_system(k)]
        system = system if params.system else []
        full_lo, full_hi = S.key_step_range(con, target.segments, keys or curated or list(DEFAULT_PANELS))
        if full_lo is None and target.leaf.get("last_step") is not None:
            full_lo, full_hi = 0, int(target.leaf["last_step"])
        view.header = header_stats(con, target, last_step=full_hi, first_step=full_lo)
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
        envs = envelopes(con, target, keys + system, lo, hi, params.buckets)
        for key in keys + system:
            panel = load_panel(con, target, key, lo, hi, buckets=params.buckets, smoothing=params.smoothing,
                               axis=axis, markers=view.markers if key in keys else (), env=envs.get(key))
            (view.panels if key in keys else view.system_panels).append(panel)
        if params.system:
            _add_sampled(con, view, target, [k for k in stored_keys(con, target) if k not in system])
        view.labels = MP.short_labels([p.key for p in view.panels + view.system_panels])
        _add_other_runs(con, view, target, keys + system)
    return view


def _add_sampled(con, view: View, target, keys: list[str]) -> None:
    """The system metrics W&B sampled by time (not history keys), placed on the view's x axis."""
    if not keys:
        return
    got = system_panels(con, target, keys, view.lo, view.hi, view.axis, buckets=view.params.buckets,
                        smoothing=view.params.smoothing)
    view.system_keys += len(keys)
    view.system_panels += got.panels
    view.system_note = got.note if got.panels else ""
    view.sampled_keys = frozenset(p.key for p in got.panels)


def _add_other_runs(con, view: View, target, keys: list[str]) -> None:
    """Compared runs and (with `o`) the ladder's runs, as overlays with one legend; the ladder's band
    on the hero's chart of the metric the ladder predicts (with `o`, on every chart it fits)."""
    params, axis = view.params, view.axis
    legend: list[LegendEntry] = []
    lines: dict[str, list] = {}
    if params.compare:
        from marinctl.errors import UserError
        from marinctl.store.lineage import resolve_target

        others = []
        for slot, ref in enumerate(params.compare):
            try:
                other = resolve_target(con, ref, stitched=True)
            except UserError:
                continue
            if other.leaf["uid"] != target.leaf["uid"] or other.name != target.name:
                others.append((slot, other))
        x_lo, x_hi = (float(v) for v in axis.x([view.lo, view.hi]))
        lines, legend = compare_lines(con, others, keys, axis.mode, x_lo, x_hi, params.buckets)
    if params.overlays and axis.mode == "fraction":
        more, extra = ladder_lines(con, keys, params.buckets, target.leaf["uid"], len(params.compare))
        for key, ovs in more.items():
            lines.setdefault(key, []).extend(ovs)
        legend += extra
    view.legend = legend
    for panel in view.panels + view.system_panels:
        panel.overlays = lines.get(panel.key, [])
        if target.name == "hero":      # the ladder's metric always; every key with `o`
            panel.band = predicted_band(con, panel.key, axis, every_key=params.overlays)
