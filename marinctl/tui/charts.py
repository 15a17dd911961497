"""Metric charts: PlotextPlot subclasses that draw only through their own plotext figures.

Building a plotext frame costs ~10 ms per chart, so the app builds frames in a thread worker
(`Figures.frame`, one figure per chart key, never shared across keys) and hands them over;
`render` on the UI thread then just returns the prepared frame. It builds synchronously only
when no frame fits (a resize). What a frame shows is fully described by its panel (the data)
and its `FrameSpec` (log-y, y range, cursor, title): a frame is reused while both are the same,
which is how an unchanged chart is never redrawn.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from rich.text import Text
from textual import events
from textual.app import RenderResult
from textual.message import Message
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from marinctl.analysis.chart_axis import Axis
from marinctl.analysis.chart_data import PanelData
from marinctl.render.chart import fit_range, paint


@dataclass(frozen=True)
class FrameSpec:
    """Everything besides the data that decides one chart's frame."""

    logy: bool = False
    yfit: bool = False                      # `a`: y range around the lines, spikes as ▲ on the edge
    cursor_step: float | None = None
    value: str = ""                         # what the cursor reads on this chart (`3.2114 @2,990 [3.19…3.30]`)
    flags: str = ""                         # `log`, `y:fit`
    xlim: tuple[float, float] | None = None
    theme: str = "textual-auto-textual-dark"


@dataclass
class Frame:
    size: tuple[int, int]
    token: tuple
    text: Text
    plot_cols: tuple[int, int] = (6, 1)     # first and last column of the plot area (for clicks)


def build_frame(fig: Plot, panel: PanelData, axis: Axis, spec: FrameSpec, size: tuple[int, int]) -> Frame:
    """One chart's frame drawn on `fig` (a figure only this chart's frames use).

    plotext centres the title over the plot area and drops it when it does not fit there; the
    y tick labels' width is known only once drawn, so a title that was dropped is cut to the
    plot area's width and drawn again (rare: long keys on narrow charts).
    """
    ylim = fit_range(panel, spec.logy) if spec.yfit else None
    room = size[0] - 4
    for _ in range(2):
        title = fit_title(panel.key, spec.value, spec.flags, room)
        paint(fig, panel, width=size[0], height=size[1], logy=spec.logy, cursor_step=spec.cursor_step,
              title=title, axis=axis, ylim=ylim, xlim=spec.xlim, xlabel=False)
        fig._set_size(size[0], size[1])
        fig.theme(spec.theme)
        text = Text.from_ansi(fig.build())
        cols = _plot_columns(text.plain)
        if title in text.plain or room <= 8:
            break
        room = min(room - 2, cols[1] - cols[0] - 1)
    return Frame(size, (id(panel), spec), text, cols)


def fit_title(key: str, value: str, flags: str, room: int) -> str:
    """The title line in `room` columns: its full key and what the cursor reads. When it does not
    fit the envelope goes first, then the key is cut from the left (its end tells leaves apart)."""
    room = max(8, room)
    for shown in (value, value.split(" [")[0]):
        tail = "  ".join(p for p in (shown, flags) if p)
        if len(key) + len(tail) + 2 <= room or not tail:
            return f"{key}  {tail}" if tail else ("…" + key[-room + 1:] if len(key) > room else key)
    keep = max(6, room - len(tail) - 3)
    return f"…{key[-keep:]}  {tail}" if len(key) > keep else f"{key}  {tail}"


def _plot_columns(plain: str) -> tuple[int, int]:
    """Where plotext put the plot area: the columns of its left and right frame lines."""
    for line in plain.splitlines():
        left, right = line.find("┌"), line.rfind("┐")
        if left >= 0 and right > left:
            return left + 1, right - 1
    lines = plain.splitlines()
    return (6, max(7, len(lines[0]) - 2)) if lines else (6, 7)


class Figures:
    """The worker side's plotext figures: one per chart key, each used under its own lock."""

    def __init__(self) -> None:
        self._figs: dict[str, tuple[Plot, threading.Lock]] = {}
        self._mutex = threading.Lock()

    def frame(self, panel: PanelData, axis: Axis, spec: FrameSpec, size: tuple[int, int]) -> Frame:
        with self._mutex:
            fig, lock = self._figs.setdefault(panel.key, (Plot(), threading.Lock()))
        with lock:
            return build_frame(fig, panel, axis, spec, size)


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
