"""`marinctl watch`: the live view of a run, its lineage, its markers and the ladder.

This module lays the screen out and handles what workers post back. The UI thread never
waits on the network or the database: thread workers (tui/workers.py) read, sync and
build chart frames and post messages (tui/messages.py); keys (tui/keys.py) only change
the view parameters and start workers. Failures become notifications; the last good
frame stays up.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input, OptionList, Static

from marinctl.analysis.watch_view import View, ViewParams
from marinctl.errors import MarinctlError
from marinctl.store import Store
from marinctl.tui import messages as msg
from marinctl.tui.charts import MetricChart, PaintOptions
from marinctl.tui.keys import KeyActions
from marinctl.tui.readout import readout_line, view_line
from marinctl.tui.screens.explain import ExplainScreen
from marinctl.tui.widgets.grid import ChartGrid
from marinctl.tui.widgets.sidebar import RunsSidebar
from marinctl.tui.widgets.status import StatusHeader
from marinctl.tui.workers import Workers

SyncFn = Callable[[Store, list[str]], dict]


def default_sync(store: Store, targets: list[str]) -> dict:
    from marinctl.sync import sync_targets

    return sync_targets(store, targets)


class WatchApp(KeyActions, Workers, App):
    """Runs sidebar, header, metric grid, cursor readout; keys in screens/help.py."""

    CSS_PATH = "app.tcss"
    TITLE = "marinctl watch"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("question_mark", "help", "help"),
        Binding("slash", "filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("left", "cursor(-1)", "cursor", show=False),
        Binding("right", "cursor(1)", "cursor", show=False),
        Binding("shift+left", "cursor(-10)", show=False),
        Binding("shift+right", "cursor(10)", show=False),
        Binding("home", "cursor_edge(0)", show=False),
        Binding("end", "cursor_edge(1)", show=False),
        Binding("n", "marker(1)", "next marker", show=False),
        Binding("p", "marker(-1)", "prev marker", show=False),
        Binding("e", "explain", "explain"),
        Binding("plus,equals_sign", "zoom(0.5)", "zoom", show=False),
        Binding("minus", "zoom(2.0)", show=False),
        Binding("left_square_bracket", "pan(-0.25)", show=False),
        Binding("right_square_bracket", "pan(0.25)", show=False),
        Binding("0", "reset_zoom", show=False),
        Binding("y", "toggle_logy", "log-y"),
        Binding("s", "cycle_smoothing", "smooth"),
        Binding("x", "cycle_xmode", "x-axis"),
        Binding("o", "toggle_overlays", "overlays"),
        Binding("r", "sync_now", "sync"),
    ]

    def __init__(self, target: str | None = None, interval: float = 30.0, *, store: Store | None = None,
                 sync_fn: SyncFn | None = None, autosync: bool = True, view_ref: str | None = None) -> None:
        super().__init__()
        if store is None:
            from marinctl.store import open_store

            store = open_store()
        self.store = store
        self.target = target
        self.interval = max(1.0, float(interval))
        self.sync_fn = sync_fn or default_sync
        self.autosync = autosync
        self.sync_targets: list[str] = []
        self.params = ViewParams(ref=view_ref)
        self.view: View | None = None
        self.options = PaintOptions()
        self.cursor_step: float | None = None          # None: follow the newest step
        self.all_keys: tuple[str, ...] | None = None
        self._planned = False
        self._syncing = False
        self._last_error: str | None = None
        self.ui_seconds = 0.0                           # UI-thread time in view handlers (bench, tests)
        self.refreshes = 0

    # -- layout --------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Horizontal(id="body"):
            yield RunsSidebar(id="sidebar")
            with Vertical(id="main"):
                yield Input(placeholder="regex over every key, e.g. router|drop  (enter: apply, esc: clear)", id="filter")
                yield Static("", id="notice")
                yield ChartGrid(id="grid")
                yield Static("", id="readout")
        yield Footer()

    def on_mount(self) -> None:
        # Keep references: while a modal (help, explain) is up, app.query_one() searches the modal.
        self._header = self.query_one(StatusHeader)
        self._sidebar = self.query_one(RunsSidebar)
        self._grid = self.query_one("#grid", ChartGrid)
        self._filter = self.query_one("#filter", Input)
        self._notice = self.query_one("#notice", Static)
        self._readout = self.query_one("#readout", Static)
        self._filter.display = False
        self._sidebar.border_title = "runs"
        self._grid.focus()
        self.params = self._with(buckets=self._bucket_guess())
        self.run_worker(self._plan_worker, thread=True, group="plan", exit_on_error=False)
        self.set_interval(1.0, self._header.redraw)

    def _bucket_guess(self) -> int:
        width = max(60, self.size.width - 34)
        return int(max(80, min(600, width)))

    def _with(self, **changes: Any) -> ViewParams:
        from dataclasses import replace

        return replace(self.params, **changes)

    # -- planning (a thread worker) -------------------------------------------------------
    def _plan_worker(self) -> None:
        from marinctl.sync import plan_watch

        try:
            ref, targets = plan_watch(self.store, self.target)
            self.post_message(msg.Planned(ref or self.params.ref, targets))
        except MarinctlError as exc:
            self.post_message(msg.Planned(self.params.ref, [], error=exc.message))
        except Exception as exc:  # noqa: BLE001 — a broken store must not crash the view
            self.post_message(msg.Planned(self.params.ref, [], error=f"{type(exc).__name__}: {exc}"))

    # -- message handlers (UI thread: keep them short) -------------------------------------
    def on_planned(self, message: msg.Planned) -> None:
        self._planned = True
        self.sync_targets = message.sync_targets
        if message.error:
            self.notify(message.error, title="watch", severity="error")
        self.params = self._with(ref=message.view_ref)
        self.reload()
        self.load_keys(message.view_ref)
        if self.autosync and self.sync_targets:
            self.sync_now()
            self.set_interval(self.interval, self.sync_now)
        elif self.autosync:
            # Nothing to sync from here (another process may be writing): just re-read.
            self.set_interval(self.interval, self.reload)

    def on_view_loaded(self, message: msg.ViewLoaded) -> None:
        t0 = time.perf_counter()
        view = message.view
        self.view = view
        self.refreshes += 1
        header = self._header
        cache = view.cache_time.strftime("%Y-%m-%d %H:%M UTC") if view.cache_time else "never"
        if header.offline_since is not None:
            header.offline_since = cache
        self._show_header(view)
        self._sidebar.show_entries(view.sidebar, view.ref)
        text = ""
        if view.error:
            text = view.error
        elif view.params.pattern and not view.panels:
            text = f"no key matches /{view.params.pattern}/"
        elif view.matched > len(view.panels):
            text = f"showing {len(view.panels)} of {view.matched} matching keys — narrow the filter"
        notice = self._notice
        notice.update(text)
        notice.display = bool(text)
        self._sync_charts(view, message.frames)
        self._update_readout()
        self.ui_seconds += time.perf_counter() - t0

    def _sync_charts(self, view: View, frames: dict[str, Any]) -> None:
        grid = self._grid
        charts = self._charts()
        keys = [p.key for p in view.panels]
        if list(charts) != keys:
            grid.remove_children()
            new = [MetricChart(k, classes="chart") for k in keys]
            if new:
                grid.mount_all(new)
            charts = dict(zip(keys, new))
        options = self._options_for(self.options, view)
        for panel in view.panels:
            charts[panel.key].set_panel(panel, view.axis, options, frames.get(panel.key))

    def on_frames_ready(self, message: msg.FramesReady) -> None:
        t0 = time.perf_counter()
        view = self.view
        if view is None:
            return
        for key, chart in self._charts().items():
            panel = next((p for p in view.panels if p.key == key), None)
            if panel is not None:
                chart.set_panel(panel, view.axis, message.options, message.frames.get(key))
        self.ui_seconds += time.perf_counter() - t0

    def on_sync_finished(self, message: msg.SyncFinished) -> None:
        self._syncing = False
        header = self._header
        header.syncing = False
        if message.ok:
            header.synced_at = time.time()
            header.offline_since = None
            _, _, first = message.summary.partition("|")
            if self.params.ref is None and first:
                self.params = self._with(ref=first)
            self.reload()
        else:
            if message.offline:
                cache = self.view.cache_time if self.view else None
                header.offline_since = cache.strftime("%Y-%m-%d %H:%M UTC") if cache else "never"
            else:
                self.reload()          # another process is syncing this target: show what it wrote
            if message.error != self._last_error:      # one toast per new failure, not one per interval
                self.notify(message.error or "sync failed", title="sync", severity="warning")
        self._last_error = message.error
        header.redraw()

    def on_keys_loaded(self, message: msg.KeysLoaded) -> None:
        self.all_keys = tuple(message.keys)
        self.params = self._with(all_keys=self.all_keys)

    def on_explain_ready(self, message: msg.ExplainReady) -> None:
        self.push_screen(ExplainScreen(message.step, message.text))

    @on(MetricChart.Clicked)
    def _chart_clicked(self, message: MetricChart.Clicked) -> None:
        self.cursor_step = message.step
        self._cursor_moved()

    @on(OptionList.OptionSelected, "#sidebar")
    def _run_selected(self, event: OptionList.OptionSelected) -> None:
        ref = event.option.id
        if ref and ref != self.params.ref:
            self.params = self._with(ref=ref, lo=None, hi=None)
            self.cursor_step = None
            self.reload()
            self.load_keys(ref)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        pattern = event.value.strip() or None
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                self.notify(f"bad regex: {exc}", severity="error")
                return
        self.params = self._with(pattern=pattern)
        self._grid.focus()
        self.reload()

    # -- readout ---------------------------------------------------------------------------
    def _show_header(self, view: View) -> None:
        self._header.update_stats(view.header, view_line(view, self.options.logy))

    def _update_readout(self) -> None:
        view = self.view
        if view is None or not view.panels:
            self._readout.update("")
            return
        step = self.cursor_step if self.cursor_step is not None else float(view.hi)
        self._readout.update(readout_line(view, step))

    def _cursor_moved(self) -> None:
        self._update_readout()
        self.repaint()

    def _charts(self) -> dict[str, MetricChart]:
        return {c.key: c for c in self._grid.query(MetricChart)}

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Log-y", "Toggle a logarithmic y axis", self.action_toggle_logy)
        yield SystemCommand("Smoothing", "Cycle none / EMA / debiased EMA", self.action_cycle_smoothing)
        yield SystemCommand("X axis", "Cycle step / tokens / fraction of schedule / wall time", self.action_cycle_xmode)
        yield SystemCommand("Overlays", "Ladder rungs, repro runs and the predicted band", self.action_toggle_overlays)
        yield SystemCommand("Sync now", "Pull new history for this target", self.action_sync_now)
        yield SystemCommand("Reset zoom", "Show the full range and follow the live end", self.action_reset_zoom)


def run_watch(target: str | None, interval: float) -> None:
    """Entry point for `marinctl watch` and `marinctl demo` (a local wandb/ dir target)."""
    WatchApp(target, interval).run()
