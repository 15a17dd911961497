"""`marinctl watch`: the live view of a run, its lineage, its markers, every metric, other runs.

This module lays the screen out and handles what workers post back. The UI thread never
waits on the network or the database: thread workers (tui/workers.py, tui/live.py) read,
sync, tail and build chart frames and post messages (tui/messages.py); keys (tui/keys.py,
tui/keys_layout.py) only change the view parameters and start workers. Failures become
notifications; the last good frame stays up.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import replace
from typing import Any, Callable

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, OptionList, Static

from marinctl.views.watch_view import View, ViewParams
from marinctl.errors import MarinctlError
from marinctl.store import Store
from marinctl.tui import messages as msg
from marinctl.tui import settings, startup
from marinctl.tui.charts import MetricChart
from marinctl.tui.frames import Figures
from marinctl.tui.commands import MetricKeys, view_commands
from marinctl.tui.first_read import FirstRead, bucket_guess, params_for
from marinctl.tui.keys import KeyActions
from marinctl.tui.keys_layout import LayoutActions
from marinctl.tui.live import Live
from marinctl.tui.paint import ChartState, spec_for, view_cursor
from marinctl.tui.readout import readout_line, view_line
from marinctl.tui.screens.explain import ExplainScreen
from marinctl.tui.widgets.footer import KeyFooter
from marinctl.tui.widgets.grid import ChartPage, CursorBar, SectionHeader
from marinctl.tui.widgets.legend import legend_text
from marinctl.tui.widgets.panes import EdgeDraggable, RunPaneView, SystemPane
from marinctl.tui.widgets.sidebar import RunsSidebar
from marinctl.tui.widgets.status import StatusHeader
from marinctl.tui.workers import Workers

SyncFn = Callable[[Store, list[str]], dict]
_LAYOUT_FIELDS = {"cols", "rows", "pattern", "collapsed", "smoothing", "xmode"}


def default_sync(store: Store, targets: list[str]) -> dict:
    from marinctl.sync import sync_targets

    return sync_targets(store, targets)


class WatchApp(KeyActions, LayoutActions, Live, Workers, App):
    """Runs sidebar, header, pages of metric charts, cursor readout, run and system panes; keys in screens/help.py."""

    CSS_PATH = "app.tcss"
    TITLE = "marinctl watch"
    COMMANDS = App.COMMANDS | {MetricKeys}
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
        Binding("Y", "toggle_logy_all", show=False),
        Binding("a", "chart_yfit", "y range", show=False),
        Binding("f", "fullscreen", "full screen", show=False),
        Binding("s", "cycle_smoothing", "smooth"),
        Binding("x", "cycle_xmode", "x-axis"),
        Binding("o", "toggle_overlays", "overlays"),
        Binding("r", "sync_now", "sync"),
        Binding("pagedown,greater_than_sign", "page(1)", "next page"),
        Binding("pageup,less_than_sign", "page(-1)", "prev page", show=False),
        Binding("c", "grid(1, 0)", "columns", show=False),
        Binding("C", "grid(-1, 0)", show=False),
        Binding("v", "grid(0, 1)", "rows", show=False),
        Binding("V", "grid(0, -1)", show=False),
        Binding("g", "toggle_section", "fold", show=False),
        Binding("G", "toggle_all_sections", show=False),
        Binding("i", "run_pane", "run"),
        Binding("m", "system_pane", "system"),
        Binding("b", "sidebar", show=False),
        Binding("left_curly_bracket", "pane_width(-6)", show=False),
        Binding("right_curly_bracket", "pane_width(6)", show=False),
        Binding("space", "compare", "compare", show=False),
    ]

    def __init__(self, target: str | None = None, interval: float = 30.0, *, store: Store | None = None,
                 sync_fn: SyncFn | None = None, autosync: bool = True, view_ref: str | None = None,
                 starting: str | None = None, plan: tuple[str | None, list[str]] | None = None,
                 first_read: FirstRead | None = None) -> None:
        """`starting`: what is being started (e.g. `marinctl demo`'s "starting the rung1 proxy…"),
        shown until the target has a run to show, instead of "the store holds no runs yet".
        `plan`: `plan_watch`'s answer when the caller already has it (the CLI checks TARGET before
        the screen opens): the first read then starts on mount instead of after planning again;
        `first_read`: that read, already started (tui/first_read.py)."""
        super().__init__()
        if store is None:
            from marinctl.store import open_store

            store = open_store()
        self.store = store
        self.target = target
        self.interval = max(1.0, float(interval))
        self.sync_fn = sync_fn or default_sync
        self.autosync = autosync
        self.starting = starting
        self._plan = plan
        self.sync_targets: list[str] = []
        layout = settings.load(store.path)
        self.params = params_for(layout, view_ref)
        self._layout = layout
        self.chart_state = ChartState(logy_keys=frozenset(layout.logy))
        self.view: View | None = None
        self.readout_values: dict[str, Any] = {}
        self.figures = Figures()
        self.follow_polled_at: float | None = None
        self._version: Any = None
        self._generation = 0
        self._loading = self._reload_pending = False
        self._syncing = False
        self._asked_sync = False          # `r` started the running sync
        self._keys_after_first = False    # list the run's keys once the first frame is up
        self.first_painted = threading.Event()   # the first view is on the screen
        self._last_error: str | None = None
        self._focus_after_load: str | None = None
        self.refreshes = 0
        self._first_read_early = first_read if plan is not None and not starting else None

    # -- layout --------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Horizontal(id="body"):
            yield RunsSidebar(id="sidebar")
            with Vertical(id="main"):
                yield Input(placeholder="regex over every key, e.g. router|drop  (enter: apply, esc: clear)", id="filter")
                yield Static("", id="notice")
                yield Static("", id="legend")
                yield ChartPage(id="grid")
                yield CursorBar("", id="readout")
            with Vertical(id="panes"):
                yield RunPaneView(id="run-pane")
                yield SystemPane(id="system-pane")
        yield KeyFooter()

    def on_mount(self) -> None:
        # Keep references: while a modal (help, explain) is up, app.query_one() searches the modal.
        self._header = self.query_one(StatusHeader)
        self._sidebar = self.query_one(RunsSidebar)
        self._page = self.query_one("#grid", ChartPage)
        self._filter = self.query_one("#filter", Input)
        self._notice = self.query_one("#notice", Static)
        self._legend = self.query_one("#legend", Static)
        self._cursor_bar = self.query_one("#readout", CursorBar)
        self._panes = self.query_one("#panes", Vertical)
        self._run_pane = self.query_one("#run-pane", RunPaneView)
        self._system_pane = self.query_one("#system-pane", SystemPane)
        self._filter.display = False
        self._notice.display = False     # empty until a view says something (its line would shrink the first charts)
        self._legend.display = False
        self._run_pane.display = self._layout.run_pane
        self._system_pane.display = self._layout.system_pane
        self._panes.styles.width = self._layout.pane_width
        self._update_panes()
        self._sidebar.border_title = "runs"
        self._run_pane.border_title = "run"
        self._system_pane.border_title = "system"
        self._header.starting = self.starting
        self._cursor_bar.focus()
        if self._first_read_early is not None:
            self._first_read_early.listen(self.on_helper)
        self.params = self._with(buckets=self._bucket_guess())
        if self.target in (None, "marin", "hero"):
            # the hero lineage needs no planning to be read: start now, planning only adds the sync
            self.params = self._with(ref=self.params.ref or ("hero" if self.target else None))
            self.call_after_refresh(self._first_read)
        if self._plan is not None and not self.starting:
            # after the first layout, so the first read knows the charts' sizes
            self.call_after_refresh(self.on_planned, self._planned(*self._plan))
        else:
            self.run_worker(self._plan_worker, thread=True, group="plan", exit_on_error=False)
        self.set_interval(1.0, self._tick)
        self.set_timer(startup.RESUME_AFTER_S, startup.resume)

    def _first_read(self) -> None:
        if self._generation == 0:           # planning has not started one already
            self.reload()

    def on_unmount(self) -> None:
        self.stop_live()

    def _tick(self) -> None:
        header = self._header
        if header.mode == "follow" and self.follow_polled_at is not None:
            header.synced_at = self.follow_polled_at
        header.redraw()

    def _bucket_guess(self) -> int:
        return bucket_guess(self.size.width)

    def _with(self, **changes: Any) -> ViewParams:
        return replace(self.params, **changes)

    def set_params(self, **changes: Any) -> None:
        """New view parameters, then a read (and the layout remembered when it changed)."""
        self.params = self._with(**changes)
        self.reload()
        if _LAYOUT_FIELDS & set(changes):
            self.save_layout()

    # -- planning (a thread worker) -------------------------------------------------------
    def _plan_worker(self) -> None:
        from pathlib import Path

        from marinctl.sync import plan_watch

        try:
            if self.starting and self.target and not Path(self.target).expanduser().exists():
                # demo: the trainer has not made its wandb/ dir yet; follow it once it has
                self.post_message(msg.Planned(self.params.ref, [], local_paths=[self.target]))
                return
            self.post_message(self._planned(*plan_watch(self.store, self.target)))
        except MarinctlError as exc:
            self.post_message(msg.Planned(self.params.ref, [], error=exc.message))
        except Exception as exc:  # noqa: BLE001 — a broken store must not crash the view
            self.post_message(msg.Planned(self.params.ref, [], error=f"{type(exc).__name__}: {exc}"))

    def _planned(self, ref: str | None, targets: list[str]) -> msg.Planned:
        from marinctl.sync.targets import local_targets

        local = local_targets(targets)
        return msg.Planned(ref or self.params.ref, [t for t in targets if t not in local], local_paths=local)

    # -- message handlers (UI thread: keep them short) -------------------------------------
    def on_planned(self, message: msg.Planned) -> None:
        self.sync_targets = message.sync_targets + message.local_paths
        if message.error:
            self.notify(message.error, title="watch", severity="error")
        if message.view_ref != self.params.ref or self._generation == 0:
            # any other target's first read waits for planning (a store lookup, milliseconds):
            # a read of the default view first would only delay the one asked for
            self.params = self._with(ref=message.view_ref, page=0)
            self.reload()
        if self.view is None:
            self._keys_after_first = True    # the first frame (the curated page) needs no key list: read it then
        else:
            self.load_keys(self.params.ref)
        self.start_live(message.local_paths, message.sync_targets)

    def on_view_loaded(self, message: msg.ViewLoaded) -> None:
        self._loading = False
        if message.generation == self._generation and message.view is not None:
            self._show_view(message)
        elif message.error:
            self.notify(message.error, severity="error")
        if self._reload_pending:
            self.reload()

    def _show_view(self, message: msg.ViewLoaded) -> None:
        view = message.view
        first_of_run = self.view is None or self.view.ref != view.ref
        self.view, self._version = view, message.version
        self.refreshes += 1
        self.readout_values = message.values
        p = view.params
        if p.jump is not None or p.page != view.page:
            self.params = self._with(page=view.page, jump=None)
        if p.all_keys is not None and self.params.all_keys is None:
            self.params = self._with(all_keys=p.all_keys)     # the first-read helper listed the keys
        if self._header.offline_since is not None:
            self._header.offline_since = _offline_text(view)
        self._show_header(view)
        self._sidebar.show_entries(view.sidebar, view.ref)
        self._show_notice(view)
        self._legend.update(legend_text(view))
        self._legend.display = bool(view.legend)
        rebuilt = self._page.show(view.sections, p.cols, p.rows) if not view.error else self._page.show((), p.cols, p.rows)
        system = self._system_pane.show_keys([q.key for q in view.system_panels], _system_note(view))
        self._hand_out(view, message.frames, [*self._page.charts.values(), *system.values()])
        self._update_readout()
        if rebuilt:
            self.call_after_refresh(self._repaint_misfits)
        chart = self._page.chart_for(self._focus_after_load) if self._focus_after_load else None
        if chart is not None:
            chart.focus()
            self._focus_after_load = None
        if first_of_run and self._run_pane.display:
            self.load_pane()
        if not self.first_painted.is_set():
            self.call_after_refresh(self._first_paint)
        if self._keys_after_first:
            self._keys_after_first = False
            if self.params.all_keys is None:
                self.load_keys(self.params.ref)

    def _first_paint(self) -> None:
        self.first_painted.set()
        startup.resume()

    def _repaint_misfits(self) -> None:
        """New frames when a chart's laid-out size differs from the worker's guess (else nothing). A
        chart not laid out yet (0×0, just mounted) is no misfit: it draws its frame if that fits."""
        charts = [*self._page.charts.values(), *self._system_pane.charts.values()]
        if any(c.panel is not None and c.size.width > 0 and c.needs_frame((c.size.width, c.size.height))
               for c in charts):
            self.repaint()

    def _show_notice(self, view: View) -> None:
        text = ""
        if view.error and self.starting and (view.ref is None or "no runs" in view.error or "no history" in view.error):
            text = f"{self.starting} (the view appears as soon as the first steps are written)"
        elif view.error:
            text = view.error
        elif view.params.pattern and not view.matched:
            text = f"no key matches /{view.params.pattern}/ (esc clears the filter)"
        self._notice.update(text)
        self._notice.display = bool(text)

    def _hand_out(self, view: View, frames: dict[str, Any], charts: list[MetricChart]) -> None:
        """Give each chart its panel and frame; charts whose picture did not change are not redrawn."""
        panels = {q.key: q for q in view.panels + view.system_panels}
        theme = self._theme_name()
        for chart in charts:
            key = chart.key
            panel = panels.get(key)
            if panel is None or view.axis is None:
                continue
            frame = frames.get(chart.slot)
            spec = frame.token[1] if frame is not None else spec_for(view, key, self.chart_state, self.readout_values,
                                                                     theme)
            chart.set_panel(panel, view.axis, spec, frame)

    def _theme_name(self) -> str:
        from marinctl.tui.charts import register_theme

        return register_theme(self)

    def on_frames_ready(self, message: msg.FramesReady) -> None:
        if message.view is not self.view:
            return
        self.readout_values = message.values
        self._hand_out(self.view, message.frames, [*self._page.charts.values(), *self._system_pane.charts.values()])
        self._update_readout()

    def on_store_changed(self, message: msg.StoreChanged) -> None:
        if message.runs:
            self._header.synced_at = time.time()
            if self.params.ref is None or (self.view is not None and self.view.error):
                uid = message.runs[-1].get("uid")
                run = uid or message.runs[-1].get("run")
                if run:
                    self.params = self._with(ref=run, page=0)
                    self.load_keys(run)
        if self.view is not None and self.view.total_keys is not None and message.runs:
            self.load_keys(self.params.ref)         # a live run may log new keys
        self.reload()

    def on_follow_status(self, message: msg.FollowStatus) -> None:
        self._header.follow_text = message.text
        self._header.redraw()
        if message.problem:
            self.notify(message.text, title="follow", severity="warning", timeout=6)

    def on_sync_finished(self, message: msg.SyncFinished) -> None:
        asked, self._asked_sync = self._asked_sync, False
        self._syncing = False
        header = self._header
        header.syncing = False
        if message.ok:
            header.synced_at = time.time()
            header.offline_since = None
            _, _, first = message.summary.partition("|")
            if self.params.ref is None and first:
                self.params = self._with(ref=first)
                self.load_keys(first)
            self.reload()
        else:
            if message.offline:
                header.offline_since = _offline_text(self.view)
            else:
                self.reload()          # another process is syncing this target: show what it wrote
            if message.error != self._last_error or asked:   # one toast per new failure, and one per `r`
                self.notify(message.error or "sync failed", title="sync", severity="warning")
        self._last_error = message.error
        header.redraw()

    def on_keys_loaded(self, message: msg.KeysLoaded) -> None:
        if message.ref != self.params.ref:
            return
        keys = tuple(message.keys)
        if keys != self.params.all_keys:
            self.set_params(all_keys=keys)

    def on_pane_loaded(self, message: msg.PaneLoaded) -> None:
        self._run_pane.show(message.pane)

    def on_explain_ready(self, message: msg.ExplainReady) -> None:
        self.push_screen(ExplainScreen(message.step, message.text))

    @on(EdgeDraggable.Dragged)            # the run pane's and the system pane's (one message class)
    def _pane_edge_dragged(self, message: EdgeDraggable.Dragged) -> None:
        """A pane's left border dragged: the panes take the columns right of the pointer."""
        self.set_pane_width(self.size.width - message.screen_x, done=message.done)

    @on(MetricChart.Clicked)
    def _chart_clicked(self, message: MetricChart.Clicked) -> None:
        if self.view is not None and self.view.axis is not None:
            self.move_cursor(float(self.view.bucket_end(message.step)))

    @on(MetricChart.Wheel)
    def _chart_wheel(self, message: MetricChart.Wheel) -> None:
        self.action_zoom(message.factor, around=message.step)

    @on(SectionHeader.Toggled)
    def _section_toggled(self, message: SectionHeader.Toggled) -> None:
        self.toggle_section(message.name)

    @on(OptionList.OptionSelected, "#sidebar")
    def _run_selected(self, event: OptionList.OptionSelected) -> None:
        ref = event.option.id
        if ref and ref != self.params.ref:
            self.params = self._with(ref=ref, lo=None, hi=None, page=0, all_keys=None,
                                     compare=tuple(r for r in self.params.compare if r != ref))
            self._sidebar.compared = list(self.params.compare)
            self.chart_state = replace(self.chart_state, cursor_step=None)
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
        self.set_params(pattern=pattern, page=0)
        self._cursor_bar.focus()

    # -- readout ---------------------------------------------------------------------------
    def _show_header(self, view: View) -> None:
        self._header.update_stats(view.header, view_line(view, self.chart_state.logy, len(self.chart_state.logy_keys)))

    def _update_readout(self) -> None:
        view = self.view
        if view is None or not view.panels or view.axis is None:
            self._cursor_bar.update("")
            return
        step = view_cursor(view, self.chart_state)
        self._cursor_bar.update(readout_line(view, step, self.readout_values, self.focused_chart(),
                                             max(40, self._cursor_bar.size.width - 2)))

    def move_cursor(self, step: float) -> None:
        """Put the cursor on `step`: the readout shows what the envelopes know now, the rest follows."""
        self.chart_state = replace(self.chart_state, cursor_step=step)
        if self.view is not None:
            self.readout_values = self.view.readout(view_cursor(self.view, self.chart_state))
        self._update_readout()
        self.repaint()

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield from view_commands(self)


def _offline_text(view: View | None) -> str:
    """What the view shows while W&B cannot be reached (never "cache from never")."""
    if view is None:
        return "reading the store…"
    if view.cache_time is not None:
        return f"showing cache from {view.cache_time.strftime('%Y-%m-%d %H:%M UTC')}"
    return "showing what the store holds" if view.panels else "nothing synced yet"


def _system_note(view: View) -> str:
    if view.system_panels:
        return view.system_note       # how samples taken by time sit on the step axis ('' for history keys)
    if view.total_keys is None:
        return "listing the run's keys…"
    return ("no system metrics stored for this run (W&B records GPU/CPU/memory stats every 15 s"
            " unless the run disabled them)")


def run_watch(target: str | None, interval: float, *, starting: str | None = None,
              plan: tuple[str | None, list[str]] | None = None, first_read: FirstRead | None = None) -> None:
    """Entry point for `marinctl watch` and `marinctl demo` (a local wandb/ dir target; `starting`
    says what is starting until its first steps are written; `plan`: TARGET already planned)."""
    WatchApp(target, interval, starting=starting, plan=plan, first_read=first_read).run()
