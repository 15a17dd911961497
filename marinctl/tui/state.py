"""What the watch screen shows and what the viewer chose, shared by its widgets (no Textual).

The screen holds one `WatchState` and hands it to the widgets it composes. A widget's action
reads it and changes it through `ask` (view parameters: the store is read again) or `draw`
(how the charts are drawn: new frames), synchronously, so a second key pressed before the first
one's read lands still counts from where the first left it. The screen is told of every change,
its own included (planning, a run that appeared), and starts the workers; only `shown` records,
untold, where the view read settled (its page, the keys it listed). The moves themselves (cursor, markers, zoom, pan, pages, grid, folds)
are computed here, the same from a key, the mouse or the palette; each returns what to say when
nothing moved (None when it did).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from marinctl import numbers as N
from marinctl.views.chart_axis import X_MODES
from marinctl.views.chart_data import SMOOTHINGS, Logged
from marinctl.views.metric_pages import CURATED, browsable, group_of
from marinctl.views.run_header import HeaderStats
from marinctl.views.watch_view import View, ViewParams
from marinctl.tui import settings
from marinctl.tui.paint import ChartState, view_cursor
from marinctl.tui.readout import markers_near

MIN_WINDOW = 10       # steps: the narrowest zoom

Listener = Callable[[frozenset[str], frozenset[str]], None]    # (view params changed, drawing changed)


class WatchState:
    """The view asked for (`params`), how it is drawn (`chart`), and the view shown with what its
    cursor reads (`view`, `values`)."""

    def __init__(self, params: ViewParams, chart: ChartState, listener: Listener) -> None:
        self.params = params
        self.chart = chart
        self.view: View | None = None
        self.values: dict[str, Logged] = {}
        self._listener = listener

    # -- changes (the screen listens) ----------------------------------------------------------
    def ask(self, **changes: Any) -> frozenset[str]:
        """New view parameters: the listener is told which ones changed (the view is read again);
        returns them (none: nothing is read)."""
        changed = frozenset(k for k, v in changes.items() if getattr(self.params, k) != v)
        if changed:
            self.params = replace(self.params, **changes)
            self._listener(changed, frozenset())
        return changed

    def draw(self, **changes: Any) -> None:
        """New drawing choices (log-y, y range, cursor): the charts are drawn again."""
        self.chart = replace(self.chart, **changes)
        self._listener(frozenset(), frozenset(changes))

    def redraw(self) -> None:
        """Nothing chosen changed but the charts' sizes did (full screen, panes resized)."""
        self._listener(frozenset(), frozenset())

    def shown(self, view: View, values: dict[str, Logged]) -> None:
        """A view read for the current parameters is on screen (the pages it settled on kept)."""
        self.view, self.values = view, values
        p = view.params
        if p.jump is not None or p.page != self.params.page:
            self.params = replace(self.params, page=view.page, jump=None)
        if p.all_keys is not None and self.params.all_keys is None:
            self.params = replace(self.params, all_keys=p.all_keys)     # the first-read helper listed the keys

    def shown_stats(self) -> HeaderStats | None:
        """The header's figures of the run on screen (the run pane shows the same)."""
        view = self.view
        return view.header if view is not None and view.ref == self.params.ref else None

    def layout(self, **panes: Any) -> settings.Layout:
        """What is remembered per store: the view's layout choices, the log-y charts and `panes`."""
        p = self.params
        return settings.Layout(cols=p.cols, rows=p.rows, pattern=p.pattern, collapsed=sorted(p.collapsed),
                        smoothing=p.smoothing, xmode=p.xmode, logy=sorted(self.chart.logy_keys), **panes)

    # -- the cursor ------------------------------------------------------------------------------
    def has_axis(self) -> bool:
        return self.view is not None and self.view.axis is not None

    def cursor(self) -> int:
        """The step the cursor reads (the newest step until it is moved)."""
        return view_cursor(self.view, self.chart) if self.view is not None else 0

    def move_cursor(self, step: float) -> None:
        """Put the cursor on `step`: the readout shows what the envelopes know now, the rest follows."""
        self.chart = replace(self.chart, cursor_step=step)
        if self.view is not None:
            self.values = self.view.readout(self.cursor())
        self._listener(frozenset(), frozenset({"cursor_step"}))

    def step_cursor(self, buckets: int) -> None:
        if self.has_axis():
            self.move_cursor(float(self.view.bucket_end(self.cursor() + buckets * self.view.width)))

    def cursor_to_edge(self, end: int) -> None:
        if self.has_axis():
            self.move_cursor(float(self.view.hi if end else self.view.lo))

    def to_marker(self, direction: int) -> str | None:
        view = self.view
        if view is None or not view.markers:
            return "no markers in view"
        step = self.cursor()
        steps = sorted({m.step for m in view.markers})
        later = [s for s in steps if s > step] if direction > 0 else [s for s in steps if s < step]
        if not later:
            return "no more markers " + ("after" if direction > 0 else "before") + f" step {N.count(step)}"
        self.move_cursor(float(later[0] if direction > 0 else later[-1]))
        return None

    def explained_step(self) -> int:
        """The step `e` explains: the cursor's, or the anomaly or alert marker's beside it."""
        step = self.cursor()
        anomalies = [m for m in markers_near(self.view, step) if m.kind in ("anomaly", "alert")]
        return min(anomalies, key=lambda m: abs(m.step - step)).step if anomalies else step

    # -- the window --------------------------------------------------------------------------------
    def window(self) -> tuple[int, int]:
        """The step window asked for (a zoom pressed before the last one was read still counts)."""
        view, p = self.view, self.params
        lo = view.full_lo if p.lo is None else max(view.full_lo, p.lo)
        hi = view.full_hi if p.hi is None else min(view.full_hi, p.hi)
        return (lo, hi) if hi > lo else (view.full_lo, view.full_hi)

    def zoom(self, factor: float, around: float | None = None) -> str | None:
        """In (`factor` < 1) or out around `around` (the mouse), else around the cursor."""
        view = self.view
        if not self.has_axis():
            return None
        full = view.full_hi - view.full_lo
        if factor < 1 and full <= MIN_WINDOW:
            return f"this run has only {N.count(full + 1)} steps: nothing to zoom into"
        now_lo, now_hi = self.window()
        centre = around if around is not None else min(max(self.cursor(), now_lo), now_hi)
        half = max(MIN_WINDOW / 2, (now_hi - now_lo) * factor / 2)
        lo, hi = int(round(centre - half)), int(round(centre + half))
        shift = max(0, view.full_lo - lo) - max(0, hi - view.full_hi)
        lo, hi = max(view.full_lo, lo + shift), min(view.full_hi, hi + shift)
        if lo <= view.full_lo and hi >= view.full_hi:       # zoomed out to everything: the full range, following
            return self.reset_zoom(quiet=around is not None)
        if (lo, hi) == (now_lo, now_hi) and factor < 1:
            return (f"zoomed in as far as it goes: {N.count(hi - lo + 1)} steps across "
                    f"(the narrowest window is {MIN_WINDOW} steps)")
        self.ask(lo=lo, hi=hi)
        return None

    def pan(self, fraction: float) -> str | None:
        view = self.view
        if not self.has_axis():
            return None
        if self.params.lo is None and self.params.hi is None:
            return "showing the full range: zoom in (+) first, then pan"
        now_lo, now_hi = self.window()
        width = now_hi - now_lo
        lo = min(max(view.full_lo, now_lo + int(width * fraction)), view.full_hi - width)
        self.ask(lo=lo, hi=lo + width)
        return None

    def reset_zoom(self, quiet: bool = False) -> str | None:
        """The full range, following the live end (`quiet`: the mouse wheel says nothing)."""
        if self.params.lo is None and self.params.hi is None:
            return None if quiet or not self.has_axis() else "already showing every step (full range)"
        self.ask(lo=None, hi=None)
        return None

    # -- pages, the grid and sections -----------------------------------------------------------
    def page(self, delta: int) -> str | None:
        view = self.view
        if view is None:
            return None
        page = min(max(0, view.page + delta), view.pages - 1)
        if page == view.page:
            more = "" if view.total_keys is not None else " (still listing the run's keys)"
            return ("first" if delta < 0 else "last") + f" page of {view.pages}{more}"
        self.ask(page=page)
        return None

    def grid(self, dcols: int, drows: int) -> str | None:
        p = self.params
        cols, rows = min(settings.MAX_COLS, max(1, p.cols + dcols)), min(settings.MAX_ROWS, max(1, p.rows + drows))
        if (cols, rows) == (p.cols, p.rows):
            return f"the grid goes from 1×1 to {settings.MAX_COLS}×{settings.MAX_ROWS} (columns × rows)"
        first = self.view.page * p.cols * p.rows if self.view else 0
        self.ask(cols=cols, rows=rows, page=first // (cols * rows))
        return None

    def fold(self, key: str | None) -> None:
        """Fold or unfold the section showing `key` (else the page's first)."""
        view = self.view
        if view is None or not view.sections:
            return
        section = next((s for s in view.sections if key in s.keys), view.sections[0])
        self.fold_section(section.name)

    def fold_section(self, name: str) -> None:
        self.ask(collapsed=self.params.collapsed ^ {name})

    def fold_all(self) -> None:
        every = {CURATED} | {group_of(k) for k in browsable(list(self.params.all_keys or ()))}
        self.ask(collapsed=frozenset() if self.params.collapsed >= every else frozenset(every), page=0)

    def jump_to_key(self, key: str) -> None:
        """Show the page holding `key` (unfolded; the filter cleared if it hides it)."""
        pattern = self.params.pattern
        if pattern and key not in (self.view.page_of_key if self.view else {}):
            pattern = None
        self.ask(collapsed=self.params.collapsed - {group_of(key)}, pattern=pattern, page=0, jump=key)

    # -- what is drawn -------------------------------------------------------------------------------
    def cycle_smoothing(self) -> None:
        self.ask(smoothing=_next(SMOOTHINGS, self.params.smoothing))

    def cycle_xmode(self) -> None:
        self.ask(xmode=_next(X_MODES, self.params.xmode))

    def toggle_overlays(self) -> str | None:
        on = not self.params.overlays
        if on and self.params.xmode != "fraction":
            self.ask(overlays=on, xmode="fraction")
            return "overlays: x axis set to fraction of schedule so rungs line up"
        self.ask(overlays=on)
        return None

    def toggle_logy(self, key: str | None = None) -> None:
        """Log-y of chart `key` (against the all-charts choice), or of every chart."""
        if key is None:
            self.draw(logy=not self.chart.logy, logy_keys=frozenset())
        else:
            self.draw(logy_keys=self.chart.logy_keys ^ {key})

    # -- runs ---------------------------------------------------------------------------------------
    def show_run(self, ref: str) -> None:
        """Another run on screen: its full range, first page, the cursor at its newest step."""
        if ref == self.params.ref:
            return
        self.chart = replace(self.chart, cursor_step=None)
        self.ask(ref=ref, lo=None, hi=None, page=0, all_keys=None,
                 compare=tuple(r for r in self.params.compare if r != ref))

    def toggle_compare(self, ref: str) -> bool:
        """Draw run `ref` beside the shown one, or take it off again; True when it is now drawn."""
        compare = tuple(r for r in self.params.compare if r != ref)
        added = len(compare) == len(self.params.compare)
        self.ask(compare=compare + ((ref,) if added else ()))
        return added


def _next(modes: tuple[str, ...], current: str) -> str:
    return modes[(modes.index(current) + 1) % len(modes)]
