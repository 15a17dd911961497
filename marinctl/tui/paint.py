"""How each chart is drawn, decided from the view and the viewer's choices (pure, any thread).

`ChartState` is what the viewer chose (log-y for all or per chart, fitted y ranges, the
cursor); `spec_for` turns it into one chart's `FrameSpec`: log-y, y range, and the words of its title (fitted
to the real width when drawn): the exact value the cursor reads there (`3.2114 @2,990 [3.19…3.30]`).
"""

from __future__ import annotations

from dataclasses import dataclass

from marinctl import numbers as N
from marinctl.analysis.chart_data import Logged
from marinctl.analysis.watch_view import View
from marinctl.tui.charts import FrameSpec


@dataclass(frozen=True)
class ChartState:
    logy: bool = False                          # `Y`: every chart
    logy_keys: frozenset[str] = frozenset()     # `y` on a focused chart flips it against `logy`
    yfit_keys: frozenset[str] = frozenset()     # `a` on a focused chart
    cursor_step: float | None = None            # None: the newest step

    def logy_of(self, key: str) -> bool:
        return self.logy != (key in self.logy_keys)


def value_text(logged: Logged | None, cursor: int | None) -> str:
    """`3.2114`, `10.01 @2,990` (logged before the cursor), `[3.19…3.30]` when the bucket holds more."""
    if logged is None:
        return N.DASH
    text = N.sig(logged.value, missing="nan")
    if cursor is not None and logged.step != cursor:
        text += f" @{N.count(logged.step)}"
    if logged.lo is not None and logged.hi is not None and N.sig(logged.lo) != N.sig(logged.hi):
        text += f" [{N.sig(logged.lo)}…{N.sig(logged.hi)}]"
    return text


def spec_for(view: View, key: str, state: ChartState, values: dict[str, Logged], theme: str) -> FrameSpec:
    step = view_cursor(view, state)
    flags = []
    if state.logy_of(key) and (key in state.logy_keys):
        flags.append("log")
    if key in state.yfit_keys:
        flags.append("y:fit")
    xlim = None
    if view.axis is not None and (view.params.compare or key in view.sampled_keys):   # system samples span less
        lo, hi = view.axis.x([view.lo, view.hi])
        xlim = (float(lo), float(hi))
    return FrameSpec(logy=state.logy_of(key), yfit=key in state.yfit_keys, cursor_step=state.cursor_step,
                     value=value_text(values[key], step) if values.get(key) is not None else "", flags=" ".join(flags),
                     xlim=xlim, theme=theme)


def view_cursor(view: View, state: ChartState) -> int:
    """The step the cursor reads: where it was put, else the view's newest step."""
    return int(round(state.cursor_step)) if state.cursor_step is not None else int(view.hi)
