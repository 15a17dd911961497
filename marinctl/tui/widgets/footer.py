"""The key bar: the keys the focused widget, its containers, the screen and the app answer to.

Textual's Footer mounts a widget per key, binds each to its `compact` reactive and restyles each
on every rebuild, all before watch's first chart. This bar draws the same keys as one line,
rebuilt only when the keys shown change (a focus change, a modal, the filter box), in the
Footer's theme colours (app.tcss); clicking a key presses it, as with the Footer.
"""

from __future__ import annotations

from textual import events
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget


class KeyFooter(Widget):
    COMPONENT_CLASSES = {"key-bar--key", "key-bar--description"}
    _shown: tuple = ()
    _spans: list[tuple[int, int, str]] = []     # (first cell, end cell, key) of each key drawn

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.call_after_refresh(self.bindings_changed, self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        if not (self.is_attached and screen is self.screen):
            return
        shown = _shown_keys(screen)
        if shown != self._shown:
            self._shown = shown
            self.refresh()

    def render(self) -> Content:
        key_style = self.get_visual_style("key-bar--key", partial=True)
        text_style = self.get_visual_style("key-bar--description", partial=True)
        parts, spans, x = [], [], 0
        for key, display, description, enabled in self._shown:
            part = Content.assemble((f" {display}", key_style), (f" {description} " if description else " ", text_style))
            parts.append(part if enabled else part.stylize("dim"))
            spans.append((x, x + part.cell_length, key))
            x += part.cell_length
        self._spans = spans
        return Content("").join(parts)

    def on_click(self, event: events.Click) -> None:
        """A click on a key presses it (Textual's Footer did the same)."""
        key = next((k for a, b, k in self._spans if a <= event.x < b), None)
        if key is not None:
            event.stop()
            self.app.simulate_key(key)


def _shown_keys(screen: Screen) -> tuple:
    """(key, its display, description, enabled) of each binding shown: the app's first, then the
    screen's, then those of the focused widget and its containers (outermost first, a key where
    it is first bound, doing what its innermost binding does), the palette's last."""
    app = screen.app
    seen: set[str] = set()
    keys, palette = [], ()
    active = screen.active_bindings
    for key, (node, binding, enabled, _tooltip) in sorted(active.items(), key=lambda kv: _depth(kv[1].node)):
        if binding.action in ("command_palette", "app.command_palette"):
            if app.ENABLE_COMMAND_PALETTE and binding.key == app.COMMAND_PALETTE_BINDING:
                palette = ((binding.key, app.get_key_display(binding), binding.description, enabled),)
            continue
        if binding.show and binding.action not in seen:
            seen.add(binding.action)
            keys.append((binding.key, app.get_key_display(binding), binding.description, enabled))
    return tuple(keys) + palette


def _depth(node) -> int:
    return len(node.ancestors_with_self)
