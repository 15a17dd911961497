"""Keys, written once: each widget's BINDINGS, one help line per group of them, and the `?` screen
and the key bar read from those.

`keys(help, *bindings)` puts bindings under one line of the help (a `KeyGroup`, Textual's
`Binding.Group` whose description is that line); `palette=TITLE` also makes the group's first
binding an entry of the command palette (`palette_entries`), with that line as its help. `help_sections` lists the app's and the screen's keys, then
those of each kind of widget on the screen with keys of its own, under its `KEYS_TITLE`; the key
bar (widgets/footer.py) shows the bindings with a `description` that the focused widget and its
ancestors answer to. A widget added to the screen brings its keys to both.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterator

from textual.binding import Binding

if TYPE_CHECKING:
    from textual.app import App
    from textual.dom import DOMNode
    from textual.screen import Screen

ANYWHERE = "anywhere"


@dataclass(frozen=True)
class KeyGroup(Binding.Group):
    """One line of the help; `palette`: the title of its command palette entry ("": none)."""

    palette: str = ""


def keys(help: str, *bindings: Binding, palette: str = "") -> list[Binding]:
    """`bindings` under one line of the help screen, `help`; `palette`: the title under which the
    command palette runs the first binding's action (its help: `help`)."""
    group = KeyGroup(help, palette=palette)
    return [replace(b, group=group) for b in bindings]


def key_text(app: App, binding: Binding) -> str:
    """How `binding`'s keys read on screen (`pgdn >`, `←`, `^p`)."""
    return " ".join(app.get_key_display(replace(binding, key=k.strip())) for k in binding.key.split(","))


def _owners(screen: Screen) -> dict[type, DOMNode]:
    """The app, `screen` and the first of each kind of widget on it with keys of its own, by kind."""
    owners: dict[type, DOMNode] = {type(screen.app): screen.app, type(screen): screen}
    for node in screen.walk_children():
        kind = type(node)
        if kind not in owners and "BINDINGS" in vars(kind) and getattr(kind, "KEYS_TITLE", ""):
            owners[kind] = node
    return owners


def palette_entries(screen: Screen) -> Iterator[tuple[str, str, DOMNode, str]]:
    """(title, help, node, action) for each group of keys with a palette title: the action the
    group's first binding runs, on the screen or the widget that binds it."""
    for kind, node in _owners(screen).items():
        seen: set[KeyGroup] = set()
        for binding in vars(kind).get("BINDINGS", ()):
            group = getattr(binding, "group", None)
            if isinstance(group, KeyGroup) and group.palette and group not in seen:
                seen.add(group)
                yield group.palette, group.description, node, binding.action


def help_sections(screen: Screen) -> list[tuple[str, list[tuple[str, str]]]]:
    """(where they act, [(keys, what they do)]) for every key of the app, `screen` and its widgets."""
    app = screen.app
    sections: dict[str, list[tuple[str, str]]] = {}
    for kind in _owners(screen):
        rows = sections.setdefault(getattr(kind, "KEYS_TITLE", ANYWHERE), [])
        groups: dict[object, list[Binding]] = {}
        for binding in vars(kind).get("BINDINGS", ()):
            if isinstance(binding, Binding):
                groups.setdefault(binding.group or binding.description or binding.action, []).append(binding)
        for group, bound in groups.items():
            line = group.description if isinstance(group, Binding.Group) else str(group)
            rows.append((" / ".join(key_text(app, b) for b in bound), line))
    return [(title, rows) for title, rows in sections.items() if rows]
