"""The command palette (ctrl+p): every metric key to jump to, and the view's actions by name."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Iterable

from textual.app import SystemCommand
from textual.command import DiscoveryHit, Hit, Hits, Provider

from marinctl.views.metric_pages import browsable, is_system
from marinctl.text import inert

if TYPE_CHECKING:
    from marinctl.tui.app import WatchApp


class MetricKeys(Provider):
    """`key: train/loss`: jump to the page that shows a key (the filter is cleared if it hides it)."""

    def _keys(self) -> list[str]:
        app: WatchApp = self.app  # type: ignore[assignment]
        return [k for k in browsable(list(app.params.all_keys or ())) if not is_system(k)]

    async def discover(self) -> Hits:
        for key in self._keys()[:40]:
            yield DiscoveryHit(f"key: {inert(key, single_line=True)}", partial(self.app.jump_to_key, key),
                               help="show the page with this metric")

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for key in self._keys():
            text = f"key: {key}"
            score = matcher.match(text)
            if score > 0:
                yield Hit(score, matcher.highlight(inert(text, single_line=True)), partial(self.app.jump_to_key, key),
                          text=text, help="show the page with this metric")


def view_commands(app: WatchApp) -> Iterable[SystemCommand]:
    """The watch actions by name, beside Textual's own (theme, quit …)."""
    yield SystemCommand("Log-y (all charts)", "Toggle a logarithmic y axis on every chart", app.action_toggle_logy_all)
    yield SystemCommand("Smoothing", "Cycle none / EMA / debiased EMA", app.action_cycle_smoothing)
    yield SystemCommand("X axis", "Cycle step / tokens / fraction of schedule / wall time", app.action_cycle_xmode)
    yield SystemCommand("Overlays", "Ladder rungs, repro runs and the predicted band", app.action_toggle_overlays)
    yield SystemCommand("Sync now", "Read the run's file or pull new history now", app.action_sync_now)
    yield SystemCommand("Reset zoom", "Show the full range and follow the live end", app.action_reset_zoom)
    yield SystemCommand("Run pane", "Overview, config and summary of the run", app.action_run_pane)
    yield SystemCommand("System metrics", "GPU, CPU, memory … the run recorded", app.action_system_pane)
    yield SystemCommand("Clear compared runs", "Take every compared run off the charts", app.action_clear_compare)
    yield SystemCommand("Fold or unfold all sections", "Collapse every prefix section, or open them all",
                        app.action_toggle_all_sections)
