"""The scrollable grid of charts; while it has focus the arrow keys move the cursor, not the scroll."""

from __future__ import annotations

from textual.binding import Binding
from textual.containers import VerticalScroll


class ChartGrid(VerticalScroll):
    BINDINGS = [
        Binding("left", "app.cursor(-1)", "cursor", show=False),
        Binding("right", "app.cursor(1)", "cursor", show=False),
        Binding("shift+left", "app.cursor(-10)", show=False),
        Binding("shift+right", "app.cursor(10)", show=False),
        Binding("home", "app.cursor_edge(0)", show=False),
        Binding("end", "app.cursor_edge(1)", show=False),
    ]
