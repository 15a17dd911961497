"""The key bar: Textual's Footer, recomposed only when the keys it shows change.

Textual's Footer rebuilds every key widget (and restyles each) on every bindings signal, and a
screen sends one per focus change: five times in watch's first second, about a fifth of the CPU
spent before the first chart. The keys shown change far less often (a modal, the filter box).
"""

from __future__ import annotations

from textual.screen import Screen
from textual.widgets import Footer


class KeyFooter(Footer):
    _shown: tuple | None = None

    def _signature(self, screen: Screen) -> tuple:
        """What the bar draws: each shown key with its label and whether it is enabled."""
        return tuple((binding.key, binding.description, binding.action, enabled)
                     for (_, binding, enabled, _tooltip) in screen.active_bindings.values() if binding.show)

    def bindings_changed(self, screen: Screen) -> None:
        if not screen.app.app_focus or not (self.is_attached and screen is self.screen):
            super().bindings_changed(screen)
            return
        shown = self._signature(screen)
        if shown == self._shown and self._bindings_ready:
            return
        self._shown = shown
        super().bindings_changed(screen)
