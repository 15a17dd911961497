"""Runs sidebar: hero lineage (stitched, with its fork segments), ladder rungs, local and repro runs."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from marinctl import numbers
from marinctl.views.run_list import SidebarEntry
from marinctl.render.chart import overlay_color
from marinctl.text import inert

_DOT = {"live": ("●", "green"), "stale": ("●", "yellow"), "crashed": ("✖", "red"), "finished": ("✔", "cyan")}


class RunsSidebar(OptionList):
    """Select a run to show it (enter), or draw it beside the shown one (space: a coloured ━ marks it);
    the first mark says live / stale / crashed / finished."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self._compared: list[str] = []
        self._entries: tuple[list[SidebarEntry], str | None] | None = None

    @property
    def compared(self) -> list[str]:
        return self._compared

    @compared.setter
    def compared(self, refs) -> None:
        self._compared = list(refs)
        if self._entries is not None:
            self._labels = None
            self.show_entries(*self._entries)

    def show_entries(self, entries: list[SidebarEntry], current: str | None) -> None:
        self._entries = (entries, current)
        labels = [(e.label, e.liveness, e.last_step, e.segment_start) for e in entries] + [tuple(self._compared)]
        if [o.id for o in self._options] == [e.ref for e in entries] and getattr(self, "_labels", None) == labels:
            return
        self._labels = labels
        highlighted = self.highlighted
        was = self._options[highlighted].id if highlighted is not None and highlighted < len(self._options) else None
        self.clear_options()
        for e in entries:
            glyph, color = _DOT.get(e.liveness, ("·", "dim"))
            label = Text()
            if e.ref in self._compared:
                c = overlay_color(self._compared.index(e.ref))
                label.append("━", style=f"bold rgb({c[0]},{c[1]},{c[2]})")
            label.append(f"{glyph} ", style=color)
            step = f" {numbers.count(e.last_step)}" if e.last_step is not None else ""
            name = inert(e.label, single_line=True)
            if e.kind == "segment":
                name = f"↳ {name} @{numbers.count(e.segment_start or 0)}"
            label.append(fit(name, 28 - len(step)), style="bold" if e.kind == "hero" else "")
            label.append(step, style="dim")
            self.add_option(Option(label, id=e.ref))
        refs = [e.ref for e in entries]
        if was in refs and was != current:          # a live refresh keeps the run the user moved to
            self.highlighted = refs.index(was)
        elif current in refs:
            self.highlighted = refs.index(current)
        elif highlighted is not None and highlighted < len(refs):
            self.highlighted = highlighted


def fit(text: str, width: int) -> str:
    """Shorten in the middle so both the run's prefix and its fork suffix stay readable."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2:]
