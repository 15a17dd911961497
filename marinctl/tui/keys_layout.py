"""What the layout keys of the watch screen do: pages, grid size, sections, panes, compared runs,
and the focused chart's own log-y, y range and full screen. Layout choices are remembered per
store (tui/settings.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from marinctl.views.metric_pages import CURATED
from marinctl.text import inert
from marinctl.tui import settings as S
from marinctl.tui.charts import MetricChart

if TYPE_CHECKING:
    from marinctl.tui.app import WatchApp


class LayoutActions:
    """Mixed into WatchApp: the `action_*` handlers of the layout keys."""

    # -- pages and the grid ------------------------------------------------------------------
    def action_page(self: WatchApp, delta: int) -> None:
        view = self.view
        if view is None:
            return
        page = min(max(0, view.page + delta), view.pages - 1)
        if page == view.page:
            more = "" if view.total_keys is not None else " (still listing the run's keys)"
            self.notify(("first" if delta < 0 else "last") + f" page of {view.pages}{more}", timeout=2)
            return
        self.set_params(page=page)

    def action_grid(self: WatchApp, dcols: int, drows: int) -> None:
        cols = min(S.MAX_COLS, max(1, self.params.cols + dcols))
        rows = min(S.MAX_ROWS, max(1, self.params.rows + drows))
        if (cols, rows) == (self.params.cols, self.params.rows):
            self.notify(f"the grid goes from 1×1 to {S.MAX_COLS}×{S.MAX_ROWS} (columns × rows)", timeout=2)
            return
        first = self.view.page * self.params.cols * self.params.rows if self.view else 0
        self.set_params(cols=cols, rows=rows, page=first // (cols * rows))
        self.save_layout()

    def action_toggle_section(self: WatchApp) -> None:
        """Fold or unfold the focused chart's section (else the page's first section)."""
        view = self.view
        if view is None or not view.sections:
            return
        key = self.focused_chart()
        section = next((s for s in view.sections if key in s.keys), view.sections[0])
        self.toggle_section(section.name)

    def toggle_section(self: WatchApp, name: str) -> None:
        self.set_params(collapsed=self.params.collapsed ^ {name})
        self.save_layout()

    def action_toggle_all_sections(self: WatchApp) -> None:
        from marinctl.views.metric_pages import browsable, group_of

        keys = browsable(list(self.params.all_keys or ()))
        every = {CURATED} | {group_of(k) for k in keys}
        collapsed = frozenset() if self.params.collapsed >= every else frozenset(every)
        self.set_params(collapsed=collapsed, page=0)
        self.save_layout()

    def jump_to_key(self: WatchApp, key: str) -> None:
        """The palette's `key:` commands: show the page holding `key` and focus its chart."""
        from marinctl.views.metric_pages import group_of

        collapsed = self.params.collapsed - {group_of(key)}
        pattern = self.params.pattern
        if pattern and key not in (self.view.page_of_key if self.view else {}):
            pattern = None                         # the filter hides it: clear the filter
        self._focus_after_load = key
        self.set_params(collapsed=collapsed, pattern=pattern, page=0, jump=key)

    # -- panes -------------------------------------------------------------------------------
    def action_run_pane(self: WatchApp) -> None:
        pane = self._run_pane
        pane.display = not pane.display
        self._update_panes()
        if pane.display:
            self.load_pane()
        self.save_layout()

    def action_system_pane(self: WatchApp) -> None:
        pane = self._system_pane
        pane.display = not pane.display
        self._update_panes()
        self.set_params(system=pane.display)
        self.save_layout()

    def action_pane_width(self: WatchApp, delta: int) -> None:
        """`{` `}`: the side panes narrower / wider (the charts take the rest), remembered."""
        if not self._panes.display:
            self.notify("open the run pane (i) or the system pane (m) first", timeout=2)
            return
        now = int(self._panes.styles.width.value) if self._panes.styles.width else 46
        self.set_pane_width(now + delta, done=True)

    def set_pane_width(self: WatchApp, width: int, done: bool) -> None:
        """The side panes `width` columns wide (the charts take the rest); `done`: redraw and remember."""
        width = max(S.MIN_PANE, min(S.MAX_PANE, self.size.width - 60, width))
        if self._panes.styles.width is None or int(self._panes.styles.width.value) != width:
            self._panes.styles.width = width
        if done:
            self.call_after_refresh(self.repaint)
            self.save_layout()

    def action_sidebar(self: WatchApp) -> None:
        self._sidebar.display = not self._sidebar.display

    def _update_panes(self: WatchApp) -> None:
        self._panes.display = self._run_pane.display or self._system_pane.display

    # -- compared runs -----------------------------------------------------------------------
    def action_compare(self: WatchApp) -> None:
        """`space`: draw the run highlighted in the sidebar on the same charts (again: take it off)."""
        sidebar = self._sidebar
        if sidebar.highlighted is None:
            self.notify("highlight a run in the sidebar first (tab to it, ↑ ↓)")
            return
        option = sidebar.get_option_at_index(sidebar.highlighted)
        ref = option.id
        if ref == self.params.ref or (self.view and ref == self.view.ref):
            self.notify("that is the run on screen; pick another run to compare with it")
            return
        compare = tuple(r for r in self.params.compare if r != ref)
        if len(compare) == len(self.params.compare):
            compare += (ref,)
            self.notify(f"comparing with {inert(str(ref), single_line=True)} (space again: take it off)", timeout=3)
        self.set_params(compare=compare)
        sidebar.compared = list(compare)

    def action_clear_compare(self: WatchApp) -> None:
        self.set_params(compare=())
        self._sidebar.compared = []

    # -- the focused chart -------------------------------------------------------------------
    def focused_chart(self: WatchApp) -> str | None:
        from textual.app import ScreenStackError

        try:
            widget = self.focused
        except ScreenStackError:            # a worker's message arriving while the app shuts down
            return None
        return widget.key if isinstance(widget, MetricChart) else None

    def action_chart_yfit(self: WatchApp) -> None:
        """`a`: the focused chart's y range around its lines (spikes above show as ▲); again: the full range."""
        key = self.focused_chart()
        if key is None:
            if self.chart_state.yfit_keys:
                self.set_chart_state(yfit_keys=frozenset())
                self.notify("y ranges reset on every chart", timeout=2)
            else:
                self.notify("focus a chart (tab, or click it) to fit its y range", timeout=3)
            return
        self.set_chart_state(yfit_keys=self.chart_state.yfit_keys ^ {key})

    def action_fullscreen(self: WatchApp) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        key = self.focused_chart()
        if key is None:
            self.notify("focus a chart (tab, or click it) to show it full screen", timeout=3)
            return
        screen.maximize(self.focused, container=False)
        self.call_after_refresh(self.repaint)

    def save_layout(self: WatchApp) -> None:
        p = self.params
        S.save(self.store.path, S.Layout(
            cols=p.cols, rows=p.rows, pattern=p.pattern, collapsed=sorted(p.collapsed), smoothing=p.smoothing,
            xmode=p.xmode, logy=sorted(self.chart_state.logy_keys), run_pane=self._run_pane.display,
            system_pane=self._system_pane.display,
            pane_width=int(self._panes.styles.width.value) if self._panes.styles.width else 46))
