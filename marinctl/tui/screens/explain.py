"""The explain panel: why step N looks the way it does (the text of `marinctl explain step N`,
written by render/explain.py, plus the markers near the step)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from marinctl import numbers


class ExplainScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,e", "dismiss", "close")]

    def __init__(self, step: int, text: str) -> None:
        super().__init__()
        self.step = step
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="explain-body"):
            yield Static(f"[b]step {numbers.count(self.step)}[/b]\n\n", id="explain-title")
            yield Static(self.text, id="explain-text", markup=False)
