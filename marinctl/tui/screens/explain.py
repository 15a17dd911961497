"""The explain panel: why step N looks the way it does (the text of `marinctl explain step N`,
written by render/explain.py, plus the markers near the step)."""

from __future__ import annotations

import re
import textwrap

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from marinctl import numbers


# a context line: its label, then two or more spaces, then the value ("  schedule     warm-up ends …")
_LABELLED = re.compile(r"^(\s*\S+(?: \S+)?\s{2,})\S")


def hang(text: str, width: int) -> str:
    """`text` wrapped to `width` columns, each long line's rest under its value (a labelled line) or
    under its own start, so no word of a line is left alone at the panel's left edge."""
    out = []
    for line in text.splitlines():
        if len(line) <= width:
            out.append(line)
            continue
        labelled = _LABELLED.match(line)
        lead = len(labelled.group(1)) if labelled else len(line) - len(line.lstrip())
        out += textwrap.wrap(line, width=width, subsequent_indent=" " * lead, drop_whitespace=True,
                             break_on_hyphens=False) or [line]
    return "\n".join(out)


class _Hanging(Static):
    """Plain text wrapped by `hang` to the width the panel gives it."""

    def __init__(self, text: str, **kw) -> None:
        super().__init__(**kw)
        self._text = text

    def get_content_height(self, container, viewport, width: int) -> int:
        return hang(self._text, width).count("\n") + 1

    def render(self) -> Text:
        return Text(hang(self._text, self.content_region.width or 80), no_wrap=True)


class ExplainScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,e", "dismiss", "close")]

    def __init__(self, step: int, text: str) -> None:
        super().__init__()
        self.step = step
        self.text = text

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="explain-body"):
            yield Static(f"[b]step {numbers.count(self.step)}[/b]\n\n", id="explain-title")
            yield _Hanging(self.text, id="explain-text")
