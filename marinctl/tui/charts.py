"""Metric charts: PlotextPlot subclasses that draw only through their own plotext figures.

Frames (tui/frames.py) are built off the UI thread: in a thread worker (`Figures.frame`, one
figure per chart key, never shared across keys), or for the first page in the first-read
helper process. `render` on the UI thread then just returns the prepared frame; it builds
synchronously only when no frame fits (a resize).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.app import RenderResult
from textual.message import Message
from textual_plotext import PlotextPlot

from marinctl.views.chart_axis import Axis
from marinctl.views.chart_data import PanelData
from marinctl.tui.frames import Frame, FrameSpec, build_frame


def register_theme(app) -> str:
    """The plotext theme matching the app's theme, registered once (on the UI thread).

    Its own name: textual-plotext registers `textual-auto-*` themes with other colours, and
    whichever came first would otherwise colour every chart of the process."""
    from plotext._dict import themes
    from textual.color import Color
    from textual_plotext.plot import _rgbify_theme, _sequence

    name = f"marinctl-{app.theme}"
    if name not in themes:
        var = app.theme_variables
        surface, foreground = Color.parse(var.get("surface")).rgb, Color.parse(var.get("foreground")).rgb
        themes[name] = _rgbify_theme(surface, surface, foreground, "default", _sequence)
    return name


class MetricChart(PlotextPlot):
    """One metric panel: raw envelope, smoothed line, markers, other runs, cursor. Focusable:
    a focused chart takes its own log-y (`y`), y range (`a`) and full screen (`f`)."""

    can_focus = True
    ALLOW_MAXIMIZE = True

    @dataclass
    class Clicked(Message):
        """The user clicked the chart at a step (moves the cursor there)."""

        key: str
        step: float

    @dataclass
    class Wheel(Message):
        """The mouse wheel turned over the chart at a step: zoom in (`factor` < 1) or out around it."""

        key: str
        step: float
        factor: float

    def __init__(self, key: str, *, slot: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.key = key
        self.slot = slot or key      # its place (`section|key`): a curated key also has a chart in its own section
        self.panel: PanelData | None = None
        self.axis: Axis | None = None
        self.spec = FrameSpec()
        self._frame: Frame | None = None
        self._lock = threading.Lock()

    # -- data in -------------------------------------------------------------------------
    def set_panel(self, panel: PanelData, axis: Axis, spec: FrameSpec, frame: Frame | None = None) -> None:
        """Show `panel` drawn as `spec`; refreshes only when that changes what is on screen."""
        if panel is self.panel and spec == self.spec and axis is self.axis and (frame is None or frame is self._frame):
            return
        self.panel, self.axis, self.spec = panel, axis, spec
        if frame is not None and frame.token == self.token():
            self._frame = frame
        self.refresh()

    def token(self) -> tuple:
        return (id(self.panel), self.spec)

    def needs_frame(self, size: tuple[int, int]) -> bool:
        return self._frame is None or self._frame.size != size or self._frame.token != self.token()

    # -- drawing -------------------------------------------------------------------------
    def render(self) -> RenderResult:
        size = (self.size.width, self.size.height)
        if self.panel is None or self.axis is None:
            return Text(f"{self.key}\nloading…", style="dim")
        if not self.needs_frame(size):
            return self._frame.text
        with self._lock:
            self._frame = build_frame(self.plt, self.panel, self.axis, self.spec, size)
        return self._frame.text

    def step_at_column(self, column: int) -> float | None:
        if self.panel is None or not len(self.panel) or self.axis is None:
            return None
        left, right = self._frame.plot_cols if self._frame else (6, self.size.width - 2)
        frac = min(1.0, max(0.0, (column - left) / max(1, right - left)))
        if self.spec.xlim is not None:
            x0, x1 = self.spec.xlim
        else:
            x0, x1 = float(self.panel.x[0]), float(self.panel.x[-1])
        return self.axis.step_at(x0 + frac * (x1 - x0))

    def on_click(self, event: events.Click) -> None:
        self.focus()
        step = self.step_at_column(event.x)
        if step is not None:
            self.post_message(self.Clicked(self.key, step))

    def on_mouse_move(self, event: events.MouseMove) -> None:
        """Dragging with the button held moves the cursor along (the readout follows the pointer)."""
        if event.button == 1:
            step = self.step_at_column(event.x)
            if step is not None:
                self.post_message(self.Clicked(self.key, step))

    def _wheel(self, event: events.MouseEvent, factor: float) -> None:
        event.stop()
        step = self.step_at_column(event.x)
        if step is not None:
            self.post_message(self.Wheel(self.key, step, factor))

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._wheel(event, 0.5)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._wheel(event, 2.0)
