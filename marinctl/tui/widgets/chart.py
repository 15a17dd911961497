"""Metric charts: PlotextPlot subclasses that draw only through their own plotext figures.

Frames (tui/frames.py) are built off the UI thread: in a thread worker (`Figures.frame`, one
figure per chart key, never shared across keys), or for the first page in the first-read
helper process. `render` on the UI thread then just returns the prepared frame; it builds
synchronously only when no frame fits (a resize).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events
from textual.app import RenderResult
from textual.binding import Binding
from textual_plotext import PlotextPlot

from marinctl.views.chart_axis import Axis
from marinctl.views.chart_data import Logged, PanelData
from marinctl.views.watch_view import View
from marinctl.tui.bindings import keys
from marinctl.tui.frames import Frame, FrameSpec, build_frame
from marinctl.tui.paint import ChartState, spec_for

if TYPE_CHECKING:
    from marinctl.tui.state import WatchState


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


def hand_out(charts: list[MetricChart], view: View, frames: dict[str, Frame], state: ChartState,
             values: dict[str, Logged], theme: str) -> None:
    """Give each chart its panel of `view` and its frame (else the spec a frame will be drawn from):
    charts whose picture did not change are not drawn again."""
    panels = {q.key: q for q in view.panels + view.system_panels}
    for chart in charts:
        panel = panels.get(chart.key)
        if panel is None or view.axis is None:
            continue
        frame = frames.get(chart.slot)
        spec = frame.token[1] if frame is not None else spec_for(view, chart.key, state, values, theme)
        chart.set_panel(panel, view.axis, spec, frame)


class MetricChart(PlotextPlot):
    """One metric panel: raw envelope, smoothed line, markers, other runs, cursor. Focused, it takes
    its own log-y (`y`), y range (`a`) and full screen (`f`); a click or drag puts the cursor under
    the pointer, the wheel zooms around it."""

    can_focus = True
    ALLOW_MAXIMIZE = True
    KEYS_TITLE = "a focused chart (click it, or tab to it)"
    BINDINGS = [
        *keys("log-y of this chart (of every chart when none is focused)", Binding("y", "logy", "log-y")),
        *keys("this chart's y range around its lines (spikes as ▲); again: the full range",
              Binding("a", "yfit", "y range")),
        *keys("this chart full screen (f or esc: back)", Binding("f", "fullscreen", "full screen")),
    ]

    def __init__(self, key: str, state: WatchState, *, slot: str | None = None, id: str | None = None,
                 classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.key = key
        self.state = state
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

    def keep_from(self, old: MetricChart) -> None:
        """Show what `old` (the chart this one replaces) showed until new frames come."""
        if old.panel is not None:
            self.panel, self.axis, self.spec = old.panel, old.axis, old.spec

    def token(self) -> tuple:
        return (id(self.panel), self.spec)

    def needs_frame(self, size: tuple[int, int]) -> bool:
        return self._frame is None or self._frame.size != size or self._frame.token != self.token()

    @property
    def frame(self) -> Frame | None:
        """The frame on screen (None before the first)."""
        return self._frame

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

    # -- keys and the mouse --------------------------------------------------------------
    def action_logy(self) -> None:
        self.state.toggle_logy(self.key)

    def action_yfit(self) -> None:
        self.state.draw(yfit_keys=self.state.chart.yfit_keys ^ {self.key})

    def action_fullscreen(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        screen.maximize(self, container=False)
        self.call_after_refresh(self.state.redraw)

    def _cursor_to(self, column: int) -> None:
        step = self.step_at_column(column)
        view = self.state.view
        if step is not None and view is not None and view.axis is not None:
            self.state.move_cursor(float(view.bucket_end(step)))

    def on_click(self, event: events.Click) -> None:
        self.focus()
        self._cursor_to(event.x)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        """Dragging with the button held moves the cursor along (the readout follows the pointer)."""
        if event.button == 1:
            self._cursor_to(event.x)

    def _wheel(self, event: events.MouseEvent, factor: float) -> None:
        event.stop()
        step = self.step_at_column(event.x)
        if step is not None:
            self.state.zoom(factor, around=step)

    def on_mouse_scroll_up(self, event: events.MouseScrollUp) -> None:
        self._wheel(event, 0.5)

    def on_mouse_scroll_down(self, event: events.MouseScrollDown) -> None:
        self._wheel(event, 2.0)
