"""The command palette (ctrl+p): every metric key to jump to, and the view's actions by name."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Iterable

from textual.app import SystemCommand
from textual.command import DiscoveryHit, Hit, Hits, Provider

from marinctl.views.metric_pages import browsable, is_system
from marinctl.text import inert

if TYPE_CHECKING:
    from marinctl.tui.screens.watch import WatchScreen


class MetricKeys(Provider):
    """`key: train/loss`: jump to the page that shows a key (the filter is cleared if it hides it)."""

    def _keys(self) -> list[str]:
        from marinctl.tui.screens.watch import WatchScreen

        if not isinstance(self.screen, WatchScreen):     # the palette opened over another screen
            return []
        return [k for k in browsable(list(self.screen.state.params.all_keys or ())) if not is_system(k)]

    async def discover(self) -> Hits:
        for key in self._keys()[:40]:
            yield DiscoveryHit(f"key: {inert(key, single_line=True)}", partial(self.screen.grid.jump_to_key, key),
                               help="show the page with this metric")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for key in self._keys():
            text = f"key: {key}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(inert(text, single_line=True)),
                          partial(self.screen.grid.jump_to_key, key), text=text, help="show the page with this metric")


def view_commands(screen: WatchScreen) -> Iterable[SystemCommand]:
    """The watch actions by name, beside Textual's own (theme, quit …)."""
    yield SystemCommand("Log-y (all charts)", "Toggle a logarithmic y axis on every chart", screen.action_logy)
    yield SystemCommand("Smoothing", "Cycle none / EMA / debiased EMA", screen.action_smoothing)
    yield SystemCommand("X axis", "Cycle step / tokens / fraction of schedule / wall time", screen.action_xmode)
    yield SystemCommand("Overlays", "Ladder rungs, repro runs and the predicted band", screen.action_overlays)
    yield SystemCommand("Sync now", "Read the run's file or pull new history now", screen.action_sync)
    yield SystemCommand("Reset zoom", "Show the full range and follow the live end", screen.grid.action_reset_zoom)
    yield SystemCommand("Run pane", "Overview, config and summary of the run", screen.action_run_pane)
    yield SystemCommand("System metrics", "GPU, CPU, memory … the run recorded", screen.action_system_pane)
    yield SystemCommand("Filter runs", "Narrow the runs sidebar as `runs --where` does (state:running group~d512 …)",
                        screen.action_filter_runs)
    yield SystemCommand("Clear compared runs", "Take every compared run off the charts", screen.sidebar.clear_compare)
    yield SystemCommand("Fold or unfold all sections", "Collapse every prefix section, or open them all",
                        screen.action_fold_all)
