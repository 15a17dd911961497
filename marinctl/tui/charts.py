"""Metric charts: PlotextPlot subclasses that draw only through their own `plt`.

Building a plotext frame costs ~10 ms per chart, so the app builds frames in a thread
worker (`prepare`) and hands them over; `render` on the UI thread then just returns the
prepared frame. It builds synchronously only when no frame fits (first paint, resize).
A lock keeps the worker and a synchronous render from sharing the figure at once.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.app import RenderResult
from textual.message import Message
from textual_plotext import PlotextPlot

from marinctl.analysis.chart_axis import Axis
from marinctl.analysis.chart_data import PanelData
from marinctl.render.chart import paint


@dataclass(frozen=True)
class PaintOptions:
    logy: bool = False
    cursor_step: float | None = None


class MetricChart(PlotextPlot):
    """One metric panel: raw envelope, smoothed line, markers, overlays, cursor."""

    DEFAULT_CSS = "MetricChart { height: 1fr; min-height: 9; }"

    @dataclass
    class Clicked(Message):
        """The user clicked the chart at a step (moves the cursor there)."""

        key: str
        step: float

    def __init__(self, key: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.key = key
        self.panel: PanelData | None = None
        self.axis: Axis | None = None
        self.options = PaintOptions()
        self._frame: tuple[tuple[int, int], object, Text] | None = None   # (size, token, text)
        self._lock = threading.Lock()
        self.render_seconds = 0.0          # UI-thread time spent building frames (for bench/tests)

    # -- data in -------------------------------------------------------------------------
    def set_panel(self, panel: PanelData, axis: Axis, options: PaintOptions,
                  frame: tuple[tuple[int, int], Text] | None = None) -> None:
        self.panel, self.axis, self.options = panel, axis, options
        token = (id(panel), options)
        self._frame = (frame[0], token, frame[1]) if frame else None
        self.refresh()

    def token(self) -> object:
        return (id(self.panel), self.options)

    def prepare(self, panel: PanelData, axis: Axis, options: PaintOptions,
                size: tuple[int, int]) -> Text:
        """Build a frame off the UI thread (any thread may call this)."""
        with self._lock:
            paint(self.plt, panel, width=size[0], height=size[1], logy=options.logy,
                     cursor_step=options.cursor_step, axis=axis)
            self.plt._set_size(size[0], size[1])
            self.plt.theme(self._get_plotext_theme_name(self.app.theme))
            return Text.from_ansi(self.plt.build())

    # -- drawing -------------------------------------------------------------------------
    def render(self) -> RenderResult:
        size = (self.size.width, self.size.height)
        if self.panel is None:
            return Text(f"{self.key}\nloading…", style="dim")
        if self._frame is not None and self._frame[0] == size and self._frame[1] == self.token():
            return self._frame[2]
        t0 = time.perf_counter()
        text = self.prepare(self.panel, self.axis, self.options, size)
        self._frame = (size, self.token(), text)
        self.render_seconds += time.perf_counter() - t0
        return text

    def on_click(self, event: events.Click) -> None:
        if self.panel is None or not len(self.panel) or self.axis is None:
            return
        # plotext leaves ~6 columns for y ticks on the left and 1 on the right.
        left, right = 6, 1
        span = max(1, self.size.width - left - right)
        frac = min(1.0, max(0.0, (event.x - left) / span))
        xs = self.panel.x
        x = float(xs[0] + frac * (xs[-1] - xs[0]))
        self.post_message(self.Clicked(self.key, self.axis.step_at(x)))
