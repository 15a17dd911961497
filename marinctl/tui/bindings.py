"""Keys, written once: each widget's BINDINGS, one help line per group of them, and the `?` screen
and the key bar read from those.

`keys(help, *bindings)` puts bindings under one line of the help (a Textual `Binding.Group`,
whose description is that line). `help_sections` lists the app's and the screen's keys, then
those of each kind of widget on the screen with keys of its own, under its `KEYS_TITLE`; the key
bar (widgets/footer.py) shows the bindings with a `description` that the focused widget and its
ancestors answer to. A widget added to the screen brings its keys to both.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from textual.binding import Binding

if TYPE_CHECKING:
    from textual.app import App
    from textual.screen import Screen

ANYWHERE = "anywhere"


def keys(help: str, *bindings: Binding) -> list[Binding]:
    """`bindings` under one line of the help screen, `help`."""
    group = Binding.Group(help)
    return [replace(b, group=group) for b in bindings]


def key_text(app: App, binding: Binding) -> str:
    """How `binding`'s keys read on screen (`pgdn >`, `←`, `^p`)."""
    return " ".join(app.get_key_display(replace(binding, key=k.strip())) for k in binding.key.split(","))


def help_sections(screen: Screen) -> list[tuple[str, list[tuple[str, str]]]]:
    """(where they act, [(keys, what they do)]) for every key of the app, `screen` and its widgets."""
    app = screen.app
    owners: list[type] = [type(app), type(screen)]
    for node in screen.walk_children():
        kind = type(node)
        if kind not in owners and "BINDINGS" in vars(kind) and getattr(kind, "KEYS_TITLE", ""):
            owners.append(kind)
    sections: dict[str, list[tuple[str, str]]] = {}
    for kind in owners:
        rows = sections.setdefault(getattr(kind, "KEYS_TITLE", ANYWHERE), [])
        groups: dict[object, list[Binding]] = {}
        for binding in vars(kind).get("BINDINGS", ()):
            if isinstance(binding, Binding):
                groups.setdefault(binding.group or binding.description or binding.action, []).append(binding)
        for group, bound in groups.items():
            line = group.description if isinstance(group, Binding.Group) else str(group)
            rows.append((" / ".join(key_text(app, b) for b in bound), line))
    return [(title, rows) for title, rows in sections.items() if rows]
