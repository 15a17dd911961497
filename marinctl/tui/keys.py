"""What each key of the watch screen does (the bindings themselves are on WatchApp; `?` lists them).

Actions change the view parameters or the cursor on the UI thread and start a worker;
none reads the store itself.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from marinctl.analysis.chart_axis import X_MODES
from marinctl.analysis.chart_data import SMOOTHINGS
from marinctl.tui.readout import bucket_width, markers_near
from marinctl.tui.screens.help import HelpScreen

if TYPE_CHECKING:
    from marinctl.tui.app import WatchApp


class KeyActions:
    """Mixed into WatchApp: the `action_*` handlers its BINDINGS name."""

    def action_help(self: WatchApp) -> None:
        self.push_screen(HelpScreen())

    def action_filter(self: WatchApp) -> None:
        box = self._filter
        box.display = True
        box.value = self.params.pattern or ""
        box.focus()

    def action_clear_filter(self: WatchApp) -> None:
        box = self._filter
        box.display = False
        if self.params.pattern:
            self.params = self._with(pattern=None)
            self.reload()
        self._grid.focus()

    # -- cursor ------------------------------------------------------------------------------
    def _cursor_or_end(self: WatchApp) -> float:
        return self.cursor_step if self.cursor_step is not None else float(self.view.hi)

    def action_cursor(self: WatchApp, buckets: int) -> None:
        view = self.view
        if view is None:
            return
        step = self._cursor_or_end() + buckets * bucket_width(view)
        self.cursor_step = float(min(view.hi, max(view.lo, step)))
        self._cursor_moved()

    def action_cursor_edge(self: WatchApp, end: int) -> None:
        if self.view is not None:
            self.cursor_step = float(self.view.hi if end else self.view.lo)
            self._cursor_moved()

    def action_marker(self: WatchApp, direction: int) -> None:
        view = self.view
        if view is None or not view.markers:
            self.notify("no markers in view")
            return
        step = self._cursor_or_end()
        steps = sorted({m.step for m in view.markers})
        later = [s for s in steps if s > step + 0.5] if direction > 0 else [s for s in steps if s < step - 0.5]
        if not later:
            return
        self.cursor_step = float(later[0] if direction > 0 else later[-1])
        self._cursor_moved()

    def action_explain(self: WatchApp) -> None:
        view = self.view
        if view is None or view.error:
            self.notify("nothing to explain yet")
            return
        step = int(round(self._cursor_or_end()))
        near = markers_near(view, step)
        anomalies = [m for m in near if m.kind == "anomaly"]
        if anomalies:                      # `e` on a marker explains the marker's step
            step = min(anomalies, key=lambda m: abs(m.step - step)).step
        self.explain_step(view.ref, step, near)

    # -- window ------------------------------------------------------------------------------
    def action_zoom(self: WatchApp, factor: float) -> None:
        view = self.view
        if view is None:
            return
        centre = self._cursor_or_end()
        half = max(10.0, (view.hi - view.lo) * factor / 2)
        lo, hi = int(centre - half), int(centre + half)
        if lo <= view.full_lo and hi >= view.full_hi:
            self.action_reset_zoom()
            return
        shift = max(0, view.full_lo - lo) - max(0, hi - view.full_hi)
        self.params = self._with(lo=max(view.full_lo, lo + shift), hi=min(view.full_hi, hi + shift))
        self.reload()

    def action_pan(self: WatchApp, fraction: float) -> None:
        view = self.view
        if view is None:
            return
        width = view.hi - view.lo
        lo = min(max(view.full_lo, view.lo + int(width * fraction)), view.full_hi - width)
        self.params = self._with(lo=lo, hi=lo + width)
        self.reload()

    def action_reset_zoom(self: WatchApp) -> None:
        self.params = self._with(lo=None, hi=None)
        self.reload()

    # -- what is drawn -----------------------------------------------------------------------
    def action_toggle_logy(self: WatchApp) -> None:
        self.options = replace(self.options, logy=not self.options.logy)
        if self.view is not None:
            self._show_header(self.view)
        self.repaint()

    def action_cycle_smoothing(self: WatchApp) -> None:
        self.params = self._with(smoothing=_next(SMOOTHINGS, self.params.smoothing))
        self.reload()

    def action_cycle_xmode(self: WatchApp) -> None:
        self.params = self._with(xmode=_next(X_MODES, self.params.xmode))
        self.reload()

    def action_toggle_overlays(self: WatchApp) -> None:
        on_ = not self.params.overlays
        changes: dict[str, Any] = {"overlays": on_}
        if on_ and self.params.xmode != "fraction":
            changes["xmode"] = "fraction"
            self.notify("overlays: x axis set to fraction of schedule so rungs line up")
        self.params = self._with(**changes)
        self.reload()

    def action_sync_now(self: WatchApp) -> None:
        if not self.sync_targets:
            self.notify("nothing to sync for this view (showing the store as is)")
            return
        self.sync_now()


def _next(modes: tuple[str, ...], current: str) -> str:
    return modes[(modes.index(current) + 1) % len(modes)]
