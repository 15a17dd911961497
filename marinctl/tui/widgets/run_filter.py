"""The run filter over the runs sidebar (`f` there, `w` anywhere): `runs --where`'s language.

An expression box (run_query.py: `cfg.KEY>=X`, `group~REGEX`, `state:S`, `tag:T`,
`name~REGEX`, `-term` negates) opens over the list, holding the filter in force; enter applies
what it holds, an empty box shows every run again, esc leaves the filter as it was. A bad term
is said under the box in the words `runs --where` uses, and the box stays open to fix it.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Static

from marinctl.run_query import Selection, parse
from marinctl.errors import UserError
from marinctl.text import inert

HELP = "enter: apply · empty: every run · esc: back"


class RunFilter(Vertical):
    """The box and its note line; `Applied` carries the parsed expression (None: no filter)."""

    BINDINGS = [Binding("escape", "close", show=False)]

    @dataclass
    class Applied(Message):
        selection: Selection | None

    @dataclass
    class Closed(Message):
        """The box closed (applied or not): focus goes back to the list."""

    def compose(self) -> ComposeResult:
        yield Input(placeholder="state:running group~d512", id="run-filter-box")
        yield Static(HELP, id="run-filter-note", markup=False)

    def on_mount(self) -> None:
        self.display = False

    def open(self, text: str) -> None:
        box = self.query_one(Input)
        box.value = text
        box.cursor_position = len(text)
        self._note(HELP)
        self.display = True
        box.focus()

    def action_close(self) -> None:
        self.display = False
        self.post_message(self.Closed())

    @on(Input.Submitted, "#run-filter-box")
    def _apply(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        try:
            selection = parse(text) if text else None
        except UserError as exc:
            self._note(exc.message + (f"\n{exc.hint}" if exc.hint else ""), error=True)
            return
        self.post_message(self.Applied(selection))
        self.action_close()

    def _note(self, text: str, error: bool = False) -> None:
        note = self.query_one("#run-filter-note", Static)
        note.update(inert(text))
        note.set_class(error, "error")
