"""The command palette (ctrl+p): every metric key to jump to, and the view's actions by name (read
from the bindings that carry a palette title)."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Iterable

from textual.app import SystemCommand
from textual.command import DiscoveryHit, Hit, Hits, Provider

from marinctl.text import inert
from marinctl.tui.bindings import palette_entries
from marinctl.views.metric_pages import browsable, is_system

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
    """The watch actions by name, beside Textual's own (theme, quit …): every group of keys bound
    with a palette title (tui/bindings.py `keys`), on the screen or the widget that binds it."""
    for title, help, node, action in palette_entries(screen):
        yield SystemCommand(title, help, partial(node.run_action, action))
