"""One chart's frame: a plotext drawing of a panel at a size, and where each chart of a page goes.

Textual-free (plotext, Rich and NumPy only), so the first-read helper process can draw the
first page's frames while the app is still importing Textual (tui/first_read.py); the app's
workers draw every later one. Building a plotext frame is the costly part of a chart. What a frame
shows is fully described by its panel (the data) and its `FrameSpec` (log-y, y range,
cursor, title): a frame is reused while both are the same, which is how an unchanged chart is
never redrawn.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from plotext._figure import _figure_class as PlotextFigure
from rich.text import Text

from marinctl.views.chart_axis import Axis
from marinctl.views.chart_data import PanelData
from marinctl.views.metric_pages import Section
from marinctl.render.chart import fit_range, paint

from marinctl.tui import settings
from marinctl.tui.settings import CHROME_LINES, SIDEBAR_COLUMNS

# The helper draws before Textual, and so the app's theme, is there: on a canvas and with tick
# labels in these stand-in colours, swapped for the theme's when the app takes the frames
STAND_IN_THEME = "marinctl-stand-in"
STAND_IN_CANVAS, STAND_IN_TICKS = (1, 2, 3), (4, 5, 6)


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


def build_frame(fig, panel: PanelData, axis: Axis, spec: FrameSpec, size: tuple[int, int]) -> Frame:
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
        self._figs: dict[str, tuple[PlotextFigure, threading.Lock]] = {}
        self._mutex = threading.Lock()

    def frame(self, panel: PanelData, axis: Axis, spec: FrameSpec, size: tuple[int, int]) -> Frame:
        with self._mutex:
            fig, lock = self._figs.setdefault(panel.key, (PlotextFigure(), threading.Lock()))
        with lock:
            return build_frame(fig, panel, axis, spec, size)


MIN_CHART_HEIGHT = 6


def chart_size_for(width: int, height: int, cols: int, rows: int, headers: int) -> tuple[int, int]:
    """The size of each chart on a page of `width`×`height` cells (what a worker builds frames for)."""
    return (max(10, (width - (cols - 1)) // max(1, cols)),
            max(MIN_CHART_HEIGHT, (height - headers) // max(1, rows)))


def chart_slot(section: Section, key: str) -> str:
    """A chart's place on the page: a curated key shows in the overview and in its own section."""
    return f"{section.name}|{key}"


def chart_sizes_for(width: int, height: int, cols: int, rows: int, sections) -> dict[str, tuple[int, int]]:
    """Each chart's size (by `chart_slot`) on a page of `width`×`height` cells laid out as `sections`:
    the columns share the width as Textual's grid shares `1fr` columns (cumulative rounding: the
    remainder goes to the later ones), so a first frame built in a worker fits and is not drawn again."""
    _, h = chart_size_for(width, height, cols, rows, len(sections))
    free = max(0, width - (cols - 1))
    widths = [max(10, (i + 1) * free // cols - i * free // cols) for i in range(cols)]
    out: dict[str, tuple[int, int]] = {}
    for section in sections:
        for i, key in enumerate(section.keys):
            out[chart_slot(section, key)] = (widths[i % cols], h)
    return out


def page_size_guess(terminal: tuple[int, int], layout: settings.Layout) -> tuple[int, int]:
    """The chart page's size on a `terminal` of (columns, lines) as the app lays it out at its start
    (tests/test_watch_start.py holds it to the laid-out page)."""
    panes = layout.pane_width if (layout.run_pane or layout.system_pane) else 0
    return max(0, terminal[0] - SIDEBAR_COLUMNS - panes), max(0, terminal[1] - CHROME_LINES)


def stand_in_theme() -> str:
    """The helper's plotext theme (registered once per process): stand-in canvas and tick colours."""
    from plotext._dict import themes

    themes.setdefault(STAND_IN_THEME, (STAND_IN_CANVAS, STAND_IN_CANVAS, STAND_IN_TICKS, "default", [STAND_IN_TICKS]))
    return STAND_IN_THEME


def recoloured(text: Text, theme: str) -> Text:
    """`text` drawn in the stand-in theme, in plotext theme `theme`'s canvas and tick colours instead."""
    from plotext._dict import themes
    from rich.color import Color
    from rich.style import Style

    canvas, _, ticks = themes[theme][:3]
    swap = {Color.from_rgb(*STAND_IN_CANVAS): Color.from_rgb(*canvas), Color.from_rgb(*STAND_IN_TICKS): Color.from_rgb(*ticks)}
    styles: dict[Any, Any] = {}

    def swapped(style):
        if style not in styles:
            colours = {}
            if isinstance(style, Style) and style.color in swap:
                colours["color"] = swap[style.color]
            if isinstance(style, Style) and style.bgcolor in swap:
                colours["bgcolor"] = swap[style.bgcolor]
            styles[style] = style + Style(**colours) if colours else style
        return styles[style]

    out = text.copy()
    out.spans = [span._replace(style=swapped(span.style)) for span in text.spans]
    return out
