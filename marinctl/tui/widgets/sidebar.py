"""Runs sidebar: hero lineage (stitched, with its fork segments), ladder rungs, local and repro runs."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from marinctl import numbers
from marinctl.analysis.run_list import SidebarEntry
from marinctl.text import inert

_DOT = {"live": ("●", "green"), "stale": ("●", "yellow"), "crashed": ("✖", "red"), "finished": ("✔", "cyan")}


class RunsSidebar(OptionList):
    """Select a run to show it; the marker says live / stale / crashed / finished."""

    def show_entries(self, entries: list[SidebarEntry], current: str | None) -> None:
        if [o.id for o in self._options] == [e.ref for e in entries] and getattr(self, "_labels", None) == [
                (e.label, e.liveness, e.last_step, e.segment_start) for e in entries]:
            return
        self._labels = [(e.label, e.liveness, e.last_step, e.segment_start) for e in entries]
        highlighted = self.highlighted
        self.clear_options()
        for e in entries:
            glyph, color = _DOT.get(e.liveness, ("·", "dim"))
            label = Text()
            label.append(f"{glyph} ", style=color)
            step = f" {numbers.count(e.last_step)}" if e.last_step is not None else ""
            name = inert(e.label, single_line=True)
            if e.kind == "segment":
                name = f"↳ {name} @{numbers.count(e.segment_start or 0)}"
            label.append(fit(name, 28 - len(step)), style="bold" if e.kind == "hero" else "")
            label.append(step, style="dim")
            self.add_option(Option(label, id=e.ref))
        refs = [e.ref for e in entries]
        if current in refs:
            self.highlighted = refs.index(current)
        elif highlighted is not None and highlighted < len(refs):
            self.highlighted = highlighted


def fit(text: str, width: int) -> str:
    """Shorten in the middle so both the run's prefix and its fork suffix stay readable."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2:]
