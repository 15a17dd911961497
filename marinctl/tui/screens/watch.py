"""The watch screen: header, runs sidebar, chart grid and cursor bar, run and system panes.

`WatchScreen` composes the widgets and holds what they share (`WatchState`) and the two objects
that keep it current: `Loader` (the reads) and `Live` (following a file, polling W&B, syncing).
It shows what their workers post back (UI thread: short handlers; failures become notifications,
the last good frame stays up). Its own keys act on the whole view whichever widget has focus
(filter, smoothing, axis, overlays, pages, grid, folds, panes, sync, explain); the chart grid,
each chart and the sidebar own theirs.
"""

from __future__ import annotations

import time
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen

from marinctl.store import Store
from marinctl.tui import messages as msg
from marinctl.tui import settings
from marinctl.tui import startup
from marinctl.tui.alerts import AlertPasses, AlertToasts
from marinctl.tui.bindings import keys
from marinctl.tui.widgets.chart import MetricChart, hand_out, register_theme
from marinctl.tui.first_read_work import bucket_guess, params_for
from marinctl.tui.frames import Figures
from marinctl.tui.live import Live
from marinctl.tui.loader import Loader, paint_job, planned
from marinctl.tui.options import WatchOptions
from marinctl.tui.paint import ChartState
from marinctl.tui.readout import markers_near, notice_text, offline_text, system_note, view_line
from marinctl.tui.screens.diff import DiffScreen
from marinctl.tui.screens.explain import ExplainScreen
from marinctl.tui.state import WatchState
from marinctl.tui.widgets.footer import KeyFooter
from marinctl.tui.widgets.grid import ChartGrid, KeyFilter
from marinctl.tui.widgets.panes import SidePanes
from marinctl.tui.widgets.sidebar import RunFilter, RunsColumn, RunsSidebar
from marinctl.tui.widgets.status import StatusHeader

LAYOUT_FIELDS = frozenset({"cols", "rows", "pattern", "collapsed", "smoothing", "xmode"})   # remembered per store


class WatchScreen(Screen):
    """One run's view: what `watch TARGET` shows, kept current."""

    BINDINGS = [
        *keys("focus: runs sidebar → each chart → the cursor bar", Binding("tab", "app.focus_next", show=False),
              Binding("shift+tab", "app.focus_previous", show=False)),
        *keys("filter the keys by a regex (the view line counts the matches)", Binding("slash", "filter", "find")),
        *keys("clear the filter, leave full screen", Binding("escape", "escape", show=False)),
        *keys("explain the step under the cursor", Binding("e", "explain", "explain")),
        *keys("diff the run on screen and the compared one (as `marinctl diff RUN_A RUN_B`)", Binding("d", "diff")),
        *keys("log-y of every chart", Binding("y", "logy", "log-y"), Binding("Y", "logy", show=False),
              palette="Log-y (all charts)"),
        *keys("smoothing: none → EMA → debiased EMA", Binding("s", "smoothing", "smooth"), palette="Smoothing"),
        *keys("x axis: step → tokens → fraction of schedule → wall time (compared runs on their own schedule)",
              Binding("x", "xmode", "x-axis"), palette="X axis"),
        *keys("overlays: ladder rungs and repro runs (fraction axis), ladder prediction band",
              Binding("o", "overlays", "overlays"), palette="Overlays"),
        *keys("refresh now: read the run's file, or sync from W&B", Binding("r", "sync", "sync"), palette="Sync now"),
        *keys("next / previous page of charts", Binding("pagedown,greater_than_sign", "page(1)", "next page"),
              Binding("pageup,less_than_sign", "page(-1)", "prev page", show=False)),
        *keys("one more / one fewer column of charts", Binding("c", "grid(1, 0)", show=False),
              Binding("C", "grid(-1, 0)", show=False)),
        *keys("one more / one fewer row of charts", Binding("v", "grid(0, 1)", show=False),
              Binding("V", "grid(0, -1)", show=False)),
        *keys("fold or unfold the focused chart's section (or click a section's header)",
              Binding("g", "fold", show=False)),
        *keys("fold or unfold every section", Binding("G", "fold_all", show=False),
              palette="Fold or unfold all sections"),
        *keys("every chart's y range back to full", Binding("a", "yfit_reset", show=False)),
        *keys("leave full screen", Binding("f", "fullscreen", show=False)),
        *keys("run pane: overview, config, summary, console, environment (type to search)",
              Binding("i", "run_pane", "run"), palette="Run pane"),
        *keys("system metrics pane (GPU, CPU, memory … when the run recorded them)",
              Binding("m", "system_pane", "system"), palette="System metrics"),
        *keys("narrow / widen the run and system panes (or drag a pane's left border)",
              Binding("left_curly_bracket", "pane_width(-6)", show=False),
              Binding("right_curly_bracket", "pane_width(6)", show=False)),
        *keys("hide / show the runs sidebar", Binding("b", "sidebar", show=False)),
        *keys("filter the runs sidebar as `runs --where` does (f in the sidebar)", Binding("w", "filter_runs"),
              palette="Filter runs"),
    ]

    def __init__(self, store: Store, options: WatchOptions) -> None:
        """`options`: what the command line asked for (tui/options.py)."""
        super().__init__()
        self.store, self.options = store, options
        self.target, self.starting, self._plan = options.target, options.starting, options.plan
        self.remembered = settings.load(store.settings_key)
        early = options.early
        self.state = WatchState(params_for(self.remembered, options.view_ref),
                                ChartState(logy_keys=frozenset(self.remembered.logy)), self._changed)
        self.figures = Figures()
        self.loader = Loader(self, store, self.state, self._job, early)
        self.live = Live(self, store, options.sync_fn, interval=options.interval, autosync=options.autosync,
                         early=early, shown_version=lambda: self._version,
                         busy=lambda: self.loader.loading or self.state.view is None,
                         alerts=AlertPasses(self, store, options.rules, options.sinks, options.digest_s))
        self.toasts = AlertToasts(self.notify)
        self._version: Any = None
        self._keys_after_first = False     # list the run's keys once the first frame is up
        self._laid = False                 # the first layout is done (reads may start)
        self._last_error: str | None = None

    def compose(self) -> ComposeResult:
        self.header = StatusHeader(id="header")
        self.sidebar = RunsSidebar(self.state, self.remembered.run_filter, id="sidebar")
        self.runs = RunsColumn(self.sidebar, id="runs-column")     # the sidebar under its filter box
        self.grid = ChartGrid(self.state, id="main")
        self.panes = SidePanes(self.state, self.remembered, id="panes")
        yield self.header
        with Horizontal(id="body"):
            yield self.runs
            yield self.grid
            yield self.panes
        yield KeyFooter()

    def on_mount(self) -> None:
        self.header.starting = self.starting
        self.grid.focus_cursor()
        self.state.ask(buckets=bucket_guess(self.app.size.width))
        if self.target in (None, "marin", "hero"):
            self.state.ask(ref=self.state.params.ref or ("hero" if self.target else None))
        self.call_after_refresh(self._laid_out)
        if self._plan is not None and not self.starting:
            self.call_after_refresh(self.on_planned, planned(*self._plan, default=self.state.params.ref))
        else:
            self.loader.plan(self.target, self.starting)
        self.set_interval(1.0, self._tick)
        self.set_timer(startup.RESUME_AFTER_S, startup.resume)

    def _laid_out(self) -> None:
        """The first layout is done: the charts' sizes are known, reads may start."""
        self._laid = True
        if self.target in (None, "marin", "hero") and self.loader.generation == 0:
            self.loader.reload()      # the hero lineage needs no planning to be read: planning only adds the sync

    def on_unmount(self) -> None:
        self.live.stop()

    def _tick(self) -> None:
        if self.header.mode == "follow" and self.live.polled_at is not None:
            self.header.synced_at = self.live.polled_at
        self.header.redraw()

    # -- what the widgets change (state.py) ----------------------------------------------------
    def _changed(self, asked: frozenset[str], drawn: frozenset[str]) -> None:
        if asked:
            if "ref" in asked:
                self._list_keys()
            if self._laid:            # before the first layout the first read is yet to start, and takes it
                self.loader.reload()
            if asked & LAYOUT_FIELDS:
                self.save_layout()
            return
        if "cursor_step" in drawn:
            self._show_readout()
        elif self.state.view is not None:
            self._show_header()
        if drawn & {"logy", "logy_keys"}:
            self.save_layout()
        self.loader.repaint()

    def _list_keys(self) -> None:
        """The run's key list (paging, the filter): now, or once the first frame is up (the curated
        first page needs none, and listing scans every stored row)."""
        if self.state.view is None:
            self._keys_after_first = True
        else:
            self.loader.load_keys(self.state.params.ref)

    def _job(self) -> dict[str, Any]:
        return paint_job(self.grid.page, self.panes.system_pane, self.state.chart, register_theme(self.app),
                         self.figures)

    @on(RunFilter.Applied)
    def save_layout(self, _changed: Any = None) -> None:
        """Remember the layout, panes and run filter for this store (a new run filter too)."""
        settings.save(self.store.settings_key, self.state.layout(**self.panes.remembered(), run_filter=self.sidebar.expression))

    # -- what the workers post back --------------------------------------------------------------
    def on_planned(self, message: msg.Planned) -> None:
        if not self._laid:            # the first read waits for the first layout (the charts' sizes)
            self.call_after_refresh(self.on_planned, message)
            return
        self.live.targets = message.sync_targets + message.local_paths
        if message.error:
            self.notify(message.error, title="watch", severity="error", markup=False)
        asked: frozenset[str] = frozenset()
        if message.view_ref != self.state.params.ref or self.loader.generation == 0:
            # any other target's first read waits for planning (a store lookup, milliseconds):
            # a read of the default view first would only delay the one asked for
            asked = self.state.ask(ref=message.view_ref, page=0)
            if not asked:
                self.loader.reload()      # the view asked for from the start: its first read
        if "ref" not in asked:
            self._list_keys()
        mode = self.live.start(message.local_paths, message.sync_targets)
        self.header.mode, self.header.interval = mode, self.live.interval
        self.header.redraw()

    def on_view_loaded(self, message: msg.ViewLoaded) -> None:
        if self.loader.finished(message) and message.view is not None:
            self._show(message)
        elif message.error:
            self.notify(message.error, severity="error", markup=False)
        self.loader.next()

    def _show(self, message: msg.ViewLoaded) -> None:
        view = message.view
        first_of_run = self.state.view is None or self.state.view.ref != view.ref
        self.state.shown(view, message.values)
        self._version = message.version
        if self.header.offline_since is not None:
            self.header.offline_since = offline_text(view)
        self._show_header()
        self.sidebar.show_entries(view.sidebar, view.shown or view.ref)
        self.toasts.show(view.alerts)
        rebuilt = self.grid.show(view, notice_text(view, self.starting))
        self.panes.system_pane.show_keys([q.key for q in view.system_panels], system_note(view))
        self._hand_out(message.frames)
        self._show_readout()
        if rebuilt:
            self.call_after_refresh(self._repaint_misfits)
        if first_of_run and self.panes.run_pane.display:
            self.loader.load_pane(self.state.params.ref, self.state.shown_stats())
        if not self.live.first_painted.is_set():
            self.call_after_refresh(self._first_paint)
        if self._keys_after_first:
            self._keys_after_first = False
            if self.state.params.all_keys is None:
                self.loader.load_keys(self.state.params.ref)

    def _first_paint(self) -> None:
        self.live.first_painted.set()
        startup.resume()

    def _charts(self) -> list[MetricChart]:
        return [*self.grid.page.charts.values(), *self.panes.system_pane.charts.values()]

    def _repaint_misfits(self) -> None:
        """New frames when a chart's laid-out size differs from the worker's guess (else nothing). A
        chart not laid out yet (0×0, just mounted) is no misfit: it draws its frame if that fits."""
        if any(c.panel is not None and c.size.width > 0 and c.needs_frame((c.size.width, c.size.height))
               for c in self._charts()):
            self.loader.repaint()

    def _hand_out(self, frames: dict[str, Any]) -> None:
        hand_out(self._charts(), self.state.view, frames, self.state.chart, self.state.values, register_theme(self.app))

    def _show_header(self) -> None:
        chart = self.state.chart
        self.header.update_stats(self.state.view.header, view_line(self.state.view, chart.logy, len(chart.logy_keys)))

    def _show_readout(self) -> None:
        self.grid.show_readout(self._focused_chart())

    def on_frames_ready(self, message: msg.FramesReady) -> None:
        if message.view is self.state.view:
            self.state.values = message.values
            self._hand_out(message.frames)
            self._show_readout()

    def on_store_changed(self, message: msg.StoreChanged) -> None:
        view, params = self.state.view, self.state.params
        if message.runs:
            self.header.synced_at = time.time()
            run = message.runs[-1].get("uid") or message.runs[-1].get("run")
            if run and (params.ref is None or (view is not None and view.error)):
                if self.state.ask(ref=run, page=0):
                    return                          # read, and its keys listed, as the state asks
                self.loader.load_keys(run)
            elif view is not None and view.total_keys is not None:
                self.loader.load_keys(params.ref)         # a live run may log new keys
        self.loader.reload()

    def on_sync_started(self, _message: msg.SyncStarted) -> None:
        self.header.syncing = True
        self.header.redraw()

    def on_follow_status(self, message: msg.FollowStatus) -> None:
        self.header.follow_text = message.text
        self.header.redraw()
        if message.problem:
            self.notify(message.text, title="follow", severity="warning", timeout=6, markup=False)

    def on_sync_finished(self, message: msg.SyncFinished) -> None:
        self.live.syncing = self.header.syncing = False
        self.header.synced_at, self.header.offline_since = time.time(), None
        if not (self.state.params.ref is None and message.run and self.state.ask(ref=message.run)):
            if self.state.params.all_keys is None:      # listed before this sync stored the run, or never
                self.loader.load_keys(self.state.params.ref)
            self.loader.reload()
        self._last_error = None
        self.header.redraw()

    def on_sync_failed(self, message: msg.SyncFailed) -> None:
        self.live.syncing = self.header.syncing = False
        if message.reason == "offline":
            self.header.offline_since = offline_text(self.state.view)
        else:
            self.loader.reload()          # another process is syncing this target: show what it wrote
        if message.error != self._last_error or message.asked:   # one toast per new failure, and one per `r`
            self.notify(message.error, title="sync", severity="warning", markup=False)
        self._last_error = message.error
        self.header.redraw()

    def on_digest_told(self, message: msg.DigestTold) -> None:
        self.toasts.digest(message.lines)

    def on_alerts_raised(self, message: msg.AlertsRaised) -> None:
        self.toasts.show(message.alerts)
        self.loader.reload()              # their marks on the charts

    def on_keys_loaded(self, message: msg.KeysLoaded) -> None:
        if message.ref == self.state.params.ref and tuple(message.keys) != self.state.params.all_keys:
            self.state.ask(all_keys=tuple(message.keys))

    def on_pane_loaded(self, message: msg.PaneLoaded) -> None:
        self.panes.run_pane.show(message.pane)

    def on_explain_ready(self, message: msg.ExplainReady) -> None:
        self.app.push_screen(ExplainScreen(message.step, message.text))

    def on_side_panes_resized(self, _message: SidePanes.Resized) -> None:
        self.call_after_refresh(self.state.redraw)
        self.save_layout()

    # -- the screen's keys -------------------------------------------------------------------------
    def _focused_chart(self) -> str | None:
        return self.focused.key if isinstance(self.focused, MetricChart) else None

    def _say(self, note: str | None, **kw: Any) -> None:
        if note:
            self.notify(note, markup=False, **kw)

    def action_filter(self) -> None:
        self.grid.query_one(KeyFilter).open()

    def action_escape(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        self.grid.query_one(KeyFilter).close()
        self.grid.focus_cursor()

    def action_explain(self) -> None:
        view = self.state.view
        if view is None or view.error:
            self.notify("nothing to explain yet")
            return
        self.loader.explain(view.ref, self.state.explained_step(), markers_near(view, self.state.cursor()))

    def action_diff(self) -> None:
        self.app.push_screen(DiffScreen(self.store, self.state.params.ref, self.state.params.compare))

    def action_logy(self) -> None:
        self.state.toggle_logy()

    def action_smoothing(self) -> None:
        self.state.cycle_smoothing()

    def action_xmode(self) -> None:
        self.state.cycle_xmode()

    def action_overlays(self) -> None:
        self._say(self.state.toggle_overlays())

    def action_sync(self) -> None:
        if self.live.wake():
            self.notify("reading the run's file now", timeout=2)
            self.loader.reload()
        elif not self.live.targets:
            self.notify("nothing to sync for this view (showing the store as is)")
            self.loader.reload()
        else:
            self.live.sync_now(asked=True)

    def action_page(self, delta: int) -> None:
        self._say(self.state.page(delta), timeout=2)

    def action_grid(self, dcols: int, drows: int) -> None:
        self._say(self.state.grid(dcols, drows), timeout=2)

    def action_fold(self) -> None:
        self.state.fold(self._focused_chart())

    def action_fold_all(self) -> None:
        self.state.fold_all()

    def action_yfit_reset(self) -> None:
        if self.state.chart.yfit_keys:
            self.state.draw(yfit_keys=frozenset())
            self.notify("y ranges reset on every chart", timeout=2)
        else:
            self.notify("focus a chart (tab, or click it) to fit its y range", timeout=3)

    def action_fullscreen(self) -> None:
        if self.maximized is not None:
            self.minimize()
        else:
            self.notify("focus a chart (tab, or click it) to show it full screen", timeout=3)

    def action_run_pane(self) -> None:
        if self.panes.toggle(self.panes.run_pane):
            self.loader.load_pane(self.state.params.ref, self.state.shown_stats())
        self.save_layout()

    def action_system_pane(self) -> None:
        self.state.ask(system=self.panes.toggle(self.panes.system_pane))
        self.save_layout()

    def action_pane_width(self, columns: int) -> None:
        self._say(self.panes.widen(columns), timeout=2)

    def action_sidebar(self) -> None:
        self.runs.display = not self.runs.display

    def action_filter_runs(self) -> None:
        self.runs.open_filter()
