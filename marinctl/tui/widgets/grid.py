"""The chart grid: a page of sections (a header line over a grid of charts each), the cursor bar
under it, the `/` filter box and the notice and legend over it; and the keys that move the cursor
and the window (the cursor bar or any chart focused).

Chart heights are set so `rows` chart rows and the page's header lines fill the page exactly
(no scrolling: more keys means more pages). The page is rebuilt only when what it shows
changes (another page, filter, grid size, a section folded); a live refresh keeps every
chart widget and only hands new panels to the charts whose data moved.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.message import Message
from textual.widgets import Input, Static

from marinctl.views.metric_pages import Section
from marinctl.views.watch_view import View
from marinctl.text import inert
from marinctl.tui.bindings import keys
from marinctl.tui.widgets.chart import MetricChart
from marinctl.tui.frames import chart_size_for, chart_slot
from marinctl.tui.readout import readout_line
from marinctl.tui.state import WatchState
from marinctl.tui.widgets.legend import legend_text


class ChartGrid(Vertical):
    """The charts of the page and their cursor. Focused (the cursor bar at the start, or a chart),
    its keys move the cursor and zoom or pan every chart."""

    KEYS_TITLE = "the charts (the cursor bar or a chart focused)"
    BINDINGS = [
        *keys("move the cursor one bucket; the readout names the step of each value",
              Binding("left", "cursor(-1)", show=False), Binding("right", "cursor(1)", show=False)),
        *keys("move the cursor ten buckets",
              Binding("shift+left", "cursor(-10)", show=False), Binding("shift+right", "cursor(10)", show=False)),
        *keys("cursor to the first / last step",
              Binding("home", "cursor_edge(0)", show=False), Binding("end", "cursor_edge(1)", show=False)),
        *keys("cursor to the next / previous marker (anomaly ✕, alert ⚑, GitHub event │)",
              Binding("n", "marker(1)", show=False), Binding("p", "marker(-1)", show=False)),
        *keys("zoom in / out around the cursor (mouse wheel: around the pointer)",
              Binding("plus,equals_sign", "zoom(0.5)", show=False), Binding("minus", "zoom(2.0)", show=False)),
        *keys("pan left / right", Binding("left_square_bracket", "pan(-0.25)", show=False),
              Binding("right_square_bracket", "pan(0.25)", show=False)),
        *keys("reset zoom (follow the live end)", Binding("0", "reset_zoom", show=False), palette="Reset zoom"),
    ]

    def __init__(self, state: WatchState, **kw) -> None:
        super().__init__(**kw)
        self.state = state
        self._focus_after_show: str | None = None     # the key the palette jumped to

    def compose(self) -> ComposeResult:
        yield KeyFilter(self.state)
        yield Static("", id="notice", markup=False)
        yield Static("", id="legend", markup=False)
        yield ChartPage(self.state, id="grid")
        yield CursorBar("", id="readout", markup=False)

    def on_mount(self) -> None:
        for part in ("#filter", "#notice", "#legend"):
            self.query_one(part).display = False     # empty until wanted (a line would shrink the first charts)

    @property
    def page(self) -> ChartPage:
        return self.query_one(ChartPage)

    def focus_cursor(self) -> None:
        self.query_one(CursorBar).focus()

    def show(self, view: View, notice: str) -> bool:
        """Lay out `view`'s page under `notice`; True when the charts were rebuilt."""
        notes = self.query_one("#notice", Static)
        notes.update(inert(notice))
        notes.display = bool(notice)
        legend = self.query_one("#legend", Static)
        legend.update(legend_text(view))
        legend.display = bool(view.legend)
        p = view.params
        rebuilt = self.page.show(view.sections if not view.error else (), p.cols, p.rows)
        chart = self.page.chart_for(self._focus_after_show) if self._focus_after_show else None
        if chart is not None:
            self.call_after_refresh(chart.focus)     # once the page's new charts are mounted
            self._focus_after_show = None
        return rebuilt

    def jump_to_key(self, key: str) -> None:
        """The palette's `key:` commands: show the page holding `key` and focus its chart."""
        self._focus_after_show = key
        self.state.jump_to_key(key)

    def show_readout(self, focused: str | None) -> None:
        """The cursor bar: what every chart reads at the cursor, `focused`'s first."""
        view, bar = self.state.view, self.query_one(CursorBar)
        if view is None or not view.panels or view.axis is None:
            bar.update("")
            return
        bar.update(readout_line(view, self.state.cursor(), self.state.values, focused, max(40, bar.size.width - 2)))

    # -- keys ----------------------------------------------------------------------------------
    def action_cursor(self, buckets: int) -> None:
        self.state.step_cursor(buckets)

    def action_cursor_edge(self, end: int) -> None:
        self.state.cursor_to_edge(end)

    def action_marker(self, direction: int) -> None:
        self._say(self.state.to_marker(direction))

    def action_zoom(self, factor: float) -> None:
        self._say(self.state.zoom(factor), title="zoom")

    def action_pan(self, fraction: float) -> None:
        self._say(self.state.pan(fraction))

    def action_reset_zoom(self) -> None:
        self._say(self.state.reset_zoom(), title="zoom")

    def _say(self, note: str | None, title: str = "") -> None:
        if note:
            self.notify(note, title=title, markup=False)

    @on(Input.Submitted, "#filter")
    def _filter(self, event: Input.Submitted) -> None:
        event.stop()
        pattern = event.value.strip() or None
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                self.notify(f"bad regex: {exc}", severity="error", markup=False)
                return
        self.state.ask(pattern=pattern, page=0)
        self.focus_cursor()

    def on_section_header_toggled(self, message: SectionHeader.Toggled) -> None:
        self.state.fold_section(message.name)



class KeyFilter(Input):
    """`/`: a regex over every key of the run (the grid applies it on enter)."""

    def __init__(self, state: WatchState) -> None:
        super().__init__(placeholder="regex over every key, e.g. router|drop  (enter: apply, esc: clear)", id="filter")
        self.state = state

    def open(self) -> None:
        self.display = True
        self.value = self.state.params.pattern or ""
        self.focus()

    def close(self) -> None:
        """Hidden, and the filter off."""
        self.display = False
        if self.state.params.pattern:
            self.state.ask(pattern=None, page=0)


class SectionHeader(Static):
    """`▾ params/norm/  (600 keys)`: click folds or unfolds the section."""

    @dataclass
    class Toggled(Message):
        name: str

    def __init__(self, section: Section) -> None:
        super().__init__(inert(section.header(), single_line=True), classes="section-header", markup=False)
        self.section_name = section.name

    def on_click(self) -> None:
        self.post_message(self.Toggled(self.section_name))


class ChartPage(Vertical):
    """The sections of the current page; `charts` maps `section|key` to each chart widget (a curated
    key also shows in its own prefix section, so one key can have two charts)."""

    def __init__(self, state: WatchState, **kw) -> None:
        super().__init__(**kw)
        self.state = state
        self.charts: dict[str, MetricChart] = {}
        self.layout_shown: tuple[int, int, int] | None = None     # cols, rows, header lines
        self._shown: tuple = ()

    def show(self, sections: tuple[Section, ...], cols: int, rows: int) -> bool:
        """Lay out this page's sections; True when the widgets were rebuilt (new charts)."""
        shown = (tuple((s.name, s.keys, s.collapsed, s.header()) for s in sections), cols, rows)
        if shown == self._shown:
            return False
        self._shown = shown
        self.layout_shown = (cols, rows, len(sections))
        old = self.charts
        self.remove_children()
        self.charts = {}
        widgets = []
        for s in sections:
            widgets.append(SectionHeader(s))
            if not s.keys:
                continue
            charts = [MetricChart(k, self.state, slot=chart_slot(s, k), classes="chart") for k in s.keys]
            for c in charts:
                prev = old.get(c.slot)
                if prev is not None:    # keep what the old page showed until new frames come
                    c.keep_from(prev)
            self.charts.update({c.slot: c for c in charts})
            widgets.append(SectionGrid(charts, cols))
        if widgets:
            self.mount_all(widgets)
        self._apply_heights()
        return True

    def chart_for(self, key: str) -> MetricChart | None:
        """The first chart on the page that shows `key`."""
        return next((c for c in self.charts.values() if c.key == key), None)

    def chart_size(self) -> tuple[int, int]:
        """The size each chart gets on this page."""
        cols, rows, headers = self.layout_shown or (1, 1, 0)
        return chart_size_for(self.size.width, self.size.height, cols, rows, headers)

    def _apply_heights(self) -> None:
        _, height = self.chart_size()
        for grid in self.query(SectionGrid):
            grid.styles.grid_rows = str(height)
            grid.styles.height = grid.chart_rows * height

    def on_resize(self) -> None:
        self._apply_heights()


class SectionGrid(Container):
    """One section's charts, `cols` to a row."""

    def __init__(self, charts: list[MetricChart], cols: int) -> None:
        super().__init__(*charts, classes="section-grid")
        self.styles.grid_size_columns = cols
        self.chart_rows = -(-len(charts) // cols)


class CursorBar(Static):
    """The cursor readout. Focused (the start), the grid's keys act on every chart."""

    can_focus = True
