"""The side panes right of the charts: the run pane (`i`: overview, config, summary, console,
environment, searchable) and system metrics (`m`), as wide as the user makes them (`{` `}`, or the
mouse on a pane's left border); the width is the panes' own, remembered with the layout."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Input, Static

from marinctl.views.run_panes import RunPane, Row, matching_rows
from marinctl.text import inert, markup_safe
from marinctl.tui import settings
from marinctl.tui.widgets.chart import MetricChart
from marinctl.tui.state import WatchState

SYSTEM_CHART_HEIGHT = 8


def _table(rows: list[Row]) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_column(style="dim", no_wrap=True, max_width=28, overflow="ellipsis")
    table.add_column(overflow="fold")
    for key, value in rows:
        table.add_row(Text(inert(key, single_line=True)), Text(inert(value, single_line=True)[:400]))
    return table


class EdgeDraggable(Vertical):
    """A side pane whose left border the mouse drags to resize the panes."""

    @dataclass
    class Dragged(Message):
        screen_x: int          # where the left edge is now
        done: bool             # the button was released

    _dragging = False

    def on_mouse_down(self, event: events.MouseDown) -> None:
        if event.x == 0 and event.button == 1:       # the left border column
            self._dragging = True
            self.capture_mouse()
            event.stop()

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if self._dragging:
            self.post_message(self.Dragged(event.screen_x, done=False))

    def on_mouse_up(self, event: events.MouseUp) -> None:
        if self._dragging:
            self._dragging = False
            self.release_mouse()
            self.post_message(self.Dragged(event.screen_x, done=True))
            event.stop()


class RunPaneView(EdgeDraggable):
    """Overview, then config, summary, console and environment rows filtered by the search box
    (substring or regex)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.pane: RunPane | None = None

    def compose(self) -> ComposeResult:
        yield Input(placeholder="search config, summary, environment and console", id="pane-search")
        with VerticalScroll(id="pane-body"):
            yield Static("loading the run…", id="pane-overview")
            yield Static("", id="pane-config")
            yield Static("", id="pane-summary")
            yield Static("", id="pane-console")
            yield Static("", id="pane-environment")

    def on_mount(self) -> None:
        self.border_title = "run"
        self._draw()        # a pane shown before the search box was composed is drawn now

    def show(self, pane: RunPane | None) -> None:
        self.pane = pane
        # a border title is markup: the run's name is escaped, not just made inert
        self.border_title = f"run · {markup_safe(pane.run, single_line=True, dialect='textual')}" if pane else "run"
        self._draw()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._draw()

    def _draw(self) -> None:
        pane = self.pane
        search = next(iter(self.query("#pane-search").results(Input)), None)
        if pane is None or search is None:
            return
        query = search.value.strip()
        self.query_one("#pane-overview", Static).update(_table(pane.overview))
        sections = (("config", pane.config), ("summary", pane.summary), ("console", pane.console),
                    ("environment", pane.environment))
        for name, rows in sections:
            if rows is None:        # no source said: a W&B run (its metadata is a file not fetched)
                self.query_one(f"#pane-{name}", Static).update(Text(f"\n{name.capitalize()}: none stored"
                                                                   " for this run", style="dim"))
                continue
            shown = matching_rows(rows, query)
            count = f"{len(shown)} of {len(rows)}" if query and rows else f"{len(rows)}"
            title = Text(f"\n{name.capitalize()} ({count})", style="bold")
            body = _table(shown) if shown else Text("nothing matches" if rows else "nothing stored", style="dim")
            self.query_one(f"#pane-{name}", Static).update(_stack(title, body))


def _stack(*parts) -> Table:
    grid = Table.grid()
    for p in parts:
        grid.add_row(p)
    return grid


class SystemPane(EdgeDraggable):
    """System metrics (GPU, CPU, memory, network …) of the run, one small chart each."""

    def __init__(self, state: WatchState, **kw) -> None:
        super().__init__(**kw)
        self.state = state
        self.charts: dict[str, MetricChart] = {}

    def on_mount(self) -> None:
        self.border_title = "system"

    def compose(self) -> ComposeResult:
        yield Static("", id="system-note")
        yield VerticalScroll(id="system-charts")

    def show_keys(self, keys: list[str], note: str) -> dict[str, MetricChart]:
        """Charts for `keys` (kept when the keys are the same); `note` when there are none."""
        self.query_one("#system-note", Static).update(Text(note, style="dim"))
        self.query_one("#system-note", Static).display = bool(note)
        if list(self.charts) != keys:
            box = self.query_one("#system-charts", VerticalScroll)
            box.remove_children()
            self.charts = {k: MetricChart(k, self.state, classes="system-chart") for k in keys}
            for chart in self.charts.values():
                chart.styles.height = SYSTEM_CHART_HEIGHT
            if self.charts:
                box.mount_all(list(self.charts.values()))
        return self.charts

    def chart_size(self) -> tuple[int, int]:
        return max(10, self.size.width - 1), SYSTEM_CHART_HEIGHT


class SidePanes(Vertical):
    """The run pane over the system pane; shown while either is open."""

    @dataclass
    class Resized(Message):
        """The panes' width was set by a key or a finished drag: the charts are drawn again."""

    def __init__(self, state: WatchState, layout: settings.Layout, **kw) -> None:
        super().__init__(**kw)
        self.state, self._layout = state, layout
        self.pane_width = layout.pane_width

    def compose(self) -> ComposeResult:
        yield RunPaneView(id="run-pane")
        yield SystemPane(self.state, id="system-pane")

    def on_mount(self) -> None:
        self.run_pane.display = self._layout.run_pane
        self.system_pane.display = self._layout.system_pane
        self.styles.width = self.pane_width
        self._update()

    @property
    def run_pane(self) -> RunPaneView:
        return self.query_one(RunPaneView)

    @property
    def system_pane(self) -> SystemPane:
        return self.query_one(SystemPane)

    def remembered(self) -> dict[str, object]:
        """What watch keeps of the panes between launches (tui/settings.py `Layout`)."""
        return {"run_pane": self.run_pane.display, "system_pane": self.system_pane.display,
                "pane_width": self.pane_width}

    def toggle(self, pane: EdgeDraggable) -> bool:
        """Open or close `pane`; True when it is now open."""
        pane.display = not pane.display
        self._update()
        return pane.display

    def widen(self, columns: int) -> str | None:
        """`{` `}`: the panes wider or narrower by `columns` (the charts take the rest)."""
        if not self.display:
            return "open the run pane (i) or the system pane (m) first"
        self.set_width(self.pane_width + columns, done=True)
        return None

    def set_width(self, width: int, done: bool) -> None:
        """`width` columns wide, within bounds; `done`: said with `Resized` (redraw, remember)."""
        self.pane_width = max(settings.MIN_PANE, min(settings.MAX_PANE, self.app.size.width - 60, width))
        if self.styles.width is None or int(self.styles.width.value) != self.pane_width:
            self.styles.width = self.pane_width
        if done:
            self.post_message(self.Resized())

    @on(EdgeDraggable.Dragged)
    def _dragged(self, message: EdgeDraggable.Dragged) -> None:
        """A pane's left border dragged: the panes take the columns right of the pointer."""
        self.set_width(self.app.size.width - message.screen_x, done=message.done)

    def _update(self) -> None:
        self.display = self.run_pane.display or self.system_pane.display
