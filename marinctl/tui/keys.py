"""What the cursor, window and drawing keys of the watch screen do (bindings on WatchApp; `?` lists them).

Actions change the view parameters or the cursor on the UI thread and start a worker;
none reads the store itself. The cursor lands on bucket ends, where every chart's readout
is the exact value logged there (no store read needed).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from marinctl import numbers as N
from marinctl.views.chart_axis import X_MODES
from marinctl.views.chart_data import SMOOTHINGS
from marinctl.tui.paint import view_cursor
from marinctl.tui.readout import markers_near
from marinctl.tui.screens.help import HelpScreen

if TYPE_CHECKING:
    from marinctl.tui.app import WatchApp

MIN_WINDOW = 10       # steps: the narrowest zoom


class KeyActions:
    """Mixed into WatchApp: the `action_*` handlers of the cursor, window and drawing keys."""

    def action_help(self: WatchApp) -> None:
        self.push_screen(HelpScreen())

    def action_filter(self: WatchApp) -> None:
        box = self._filter
        box.display = True
        box.value = self.params.pattern or ""
        box.focus()

    def action_clear_filter(self: WatchApp) -> None:
        if self.screen.maximized is not None:
            self.screen.minimize()
            return
        box = self._filter
        box.display = False
        if self.params.pattern:
            self.set_params(pattern=None, page=0)
        self._cursor_bar.focus()

    # -- cursor ------------------------------------------------------------------------------
    def action_cursor(self: WatchApp, buckets: int) -> None:
        view = self.view
        if view is None or view.axis is None:
            return
        step = view_cursor(view, self.chart_state) + buckets * view.width
        self.move_cursor(float(view.bucket_end(step)))

    def action_cursor_edge(self: WatchApp, end: int) -> None:
        if self.view is not None and self.view.axis is not None:
            self.move_cursor(float(self.view.hi if end else self.view.lo))

    def action_marker(self: WatchApp, direction: int) -> None:
        view = self.view
        if view is None or not view.markers:
            self.notify("no markers in view")
            return
        step = view_cursor(view, self.chart_state)
        steps = sorted({m.step for m in view.markers})
        later = [s for s in steps if s > step] if direction > 0 else [s for s in steps if s < step]
        if not later:
            self.notify("no more markers " + ("after" if direction > 0 else "before") + f" step {N.count(step)}")
            return
        self.move_cursor(float(later[0] if direction > 0 else later[-1]))

    def action_explain(self: WatchApp) -> None:
        view = self.view
        if view is None or view.error:
            self.notify("nothing to explain yet")
            return
        step = view_cursor(view, self.chart_state)
        near = markers_near(view, step)
        anomalies = [m for m in near if m.kind == "anomaly"]
        if anomalies:                      # `e` on a marker explains the marker's step
            step = min(anomalies, key=lambda m: abs(m.step - step)).step
        self.explain_step(view.ref, step, near)

    # -- window ------------------------------------------------------------------------------
    def action_zoom(self: WatchApp, factor: float, around: float | None = None) -> None:
        view = self.view
        if view is None or view.axis is None:
            return
        full = view.full_hi - view.full_lo
        if factor < 1 and full <= MIN_WINDOW:
            self.notify(f"this run has only {N.count(full + 1)} steps: nothing to zoom into", title="zoom")
            return
        now_lo, now_hi = self.window()
        centre = around if around is not None else min(max(view_cursor(view, self.chart_state), now_lo), now_hi)
        half = max(MIN_WINDOW / 2, (now_hi - now_lo) * factor / 2)
        lo, hi = int(round(centre - half)), int(round(centre + half))
        if lo <= view.full_lo and hi >= view.full_hi:
            self.action_reset_zoom(quiet=around is not None)
            return
        shift = max(0, view.full_lo - lo) - max(0, hi - view.full_hi)
        lo, hi = max(view.full_lo, lo + shift), min(view.full_hi, hi + shift)
        if lo <= view.full_lo and hi >= view.full_hi:       # zoomed out to everything: the full range, following
            self.action_reset_zoom(quiet=around is not None)
            return
        if (lo, hi) == (now_lo, now_hi) and factor < 1:
            self.notify(f"zoomed in as far as it goes: {N.count(hi - lo + 1)} steps across "
                        f"(the narrowest window is {MIN_WINDOW} steps)", title="zoom")
            return
        self.set_params(lo=lo, hi=hi)

    def action_pan(self: WatchApp, fraction: float) -> None:
        view = self.view
        if view is None or view.axis is None:
            return
        if self.params.lo is None and self.params.hi is None:
            self.notify("showing the full range: zoom in (+) first, then pan")
            return
        now_lo, now_hi = self.window()
        width = now_hi - now_lo
        lo = min(max(view.full_lo, now_lo + int(width * fraction)), view.full_hi - width)
        self.set_params(lo=lo, hi=lo + width)

    def window(self: WatchApp) -> tuple[int, int]:
        """The step window asked for (a zoom pressed before the last one was read still counts)."""
        view = self.view
        lo = view.full_lo if self.params.lo is None else max(view.full_lo, self.params.lo)
        hi = view.full_hi if self.params.hi is None else min(view.full_hi, self.params.hi)
        return (lo, hi) if hi > lo else (view.full_lo, view.full_hi)

    def action_reset_zoom(self: WatchApp, quiet: bool = False) -> None:
        """`0` (and `-` out to everything): the full range, following the live end."""
        if self.params.lo is None and self.params.hi is None:
            if not quiet and self.view is not None and self.view.axis is not None:
                # a key press on a chart says why nothing moved; the mouse wheel stays quiet
                self.notify("already showing every step (full range)", title="zoom")
            return
        self.set_params(lo=None, hi=None)

    # -- what is drawn -----------------------------------------------------------------------
    def action_toggle_logy(self: WatchApp) -> None:
        """`y`: log-y of the focused chart, or of every chart when none has focus (`Y` always all)."""
        key = self.focused_chart()
        if key is None:
            self.action_toggle_logy_all()
            return
        self.set_chart_state(logy_keys=self.chart_state.logy_keys ^ {key})
        self.save_layout()

    def action_toggle_logy_all(self: WatchApp) -> None:
        self.set_chart_state(logy=not self.chart_state.logy, logy_keys=frozenset())
        self.save_layout()

    def action_cycle_smoothing(self: WatchApp) -> None:
        self.set_params(smoothing=_next(SMOOTHINGS, self.params.smoothing))

    def action_cycle_xmode(self: WatchApp) -> None:
        self.set_params(xmode=_next(X_MODES, self.params.xmode))

    def action_toggle_overlays(self: WatchApp) -> None:
        on_ = not self.params.overlays
        changes: dict[str, Any] = {"overlays": on_}
        if on_ and self.params.xmode != "fraction":
            changes["xmode"] = "fraction"
            self.notify("overlays: x axis set to fraction of schedule so rungs line up")
        self.set_params(**changes)

    def action_sync_now(self: WatchApp) -> None:
        if self.wake_follower():
            self.notify("reading the run's file now", timeout=2)
            self.reload()
            return
        if not self.sync_targets:
            self.notify("nothing to sync for this view (showing the store as is)")
            self.reload()
            return
        self._asked_sync = True        # a failure the user asked for is said again, even if it is the same one
        self.sync_now()

    def set_chart_state(self: WatchApp, **changes: Any) -> None:
        self.chart_state = replace(self.chart_state, **changes)
        if self.view is not None:
            self._show_header(self.view)
        self.repaint()


def _next(modes: tuple[str, ...], current: str) -> str:
    return modes[(modes.index(current) + 1) % len(modes)]
