"""The chart page: one page of sections, each a header line over a grid of charts; and the cursor bar.

Chart heights are set so `rows` chart rows and the page's header lines fill the page exactly
(no scrolling: more keys means more pages). The page is rebuilt only when what it shows
changes (another page, filter, grid size, a section folded); a live refresh keeps every
chart widget and only hands new panels to the charts whose data moved.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.binding import Binding
from textual.containers import Container, Vertical
from textual.message import Message
from textual.widgets import Static

from marinctl.views.metric_pages import Section
from marinctl.text import inert
from marinctl.tui.charts import MetricChart
from marinctl.tui.frames import chart_size_for, chart_slot

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

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.charts: dict[str, MetricChart] = {}
        self._shown: tuple = ()
        self._layout = (2, 4, 0)     # cols, rows, header lines

    def show(self, sections: tuple[Section, ...], cols: int, rows: int) -> bool:
        """Lay out this page's sections; True when the widgets were rebuilt (new charts)."""
        shown = (tuple((s.name, s.keys, s.collapsed, s.header()) for s in sections), cols, rows)
        if shown == self._shown:
            return False
        self._shown = shown
        self._layout = (cols, rows, len(sections))
        old = self.charts
        self.remove_children()
        self.charts = {}
        widgets = []
        for s in sections:
            widgets.append(SectionHeader(s))
            if not s.keys:
                continue
            charts = [MetricChart(k, slot=chart_slot(s, k), classes="chart") for k in s.keys]
            for c in charts:
                prev = old.get(c.slot)
                if prev is not None and prev.panel is not None:    # keep what the old page showed until new frames come
                    c.panel, c.axis, c.spec = prev.panel, prev.axis, prev.spec
            self.charts.update({c.slot: c for c in charts})
            grid = Container(*charts, classes="section-grid")
            grid.styles.grid_size_columns = cols
            grid.chart_rows = -(-len(charts) // cols)
            widgets.append(grid)
        if widgets:
            self.mount_all(widgets)
        self._apply_heights()
        return True

    def chart_for(self, key: str) -> MetricChart | None:
        """The first chart on the page that shows `key`."""
        return next((c for c in self.charts.values() if c.key == key), None)

    def chart_size(self) -> tuple[int, int]:
        """The size each chart gets on this page."""
        cols, rows, headers = self._layout
        return chart_size_for(self.size.width, self.size.height, cols, rows, headers)

    def _apply_heights(self) -> None:
        _, height = self.chart_size()
        for grid in self.query(".section-grid"):
            grid.styles.grid_rows = str(height)
            grid.styles.height = getattr(grid, "chart_rows", 1) * height

    def on_resize(self) -> None:
        self._apply_heights()


class CursorBar(Static):
    """The cursor readout. Focused (the start), keys act on every chart; arrows move the cursor."""

    can_focus = True
    BINDINGS = [
        Binding("left", "app.cursor(-1)", "cursor", show=False),
        Binding("right", "app.cursor(1)", "cursor", show=False),
        Binding("shift+left", "app.cursor(-10)", show=False),
        Binding("shift+right", "app.cursor(10)", show=False),
        Binding("home", "app.cursor_edge(0)", show=False),
        Binding("end", "app.cursor_edge(1)", show=False),
    ]
