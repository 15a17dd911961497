"""`?`: every key of the watch screen in one place, read from the bindings (tui/bindings.py)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, VerticalScroll
from textual.markup import escape
from textual.screen import ModalScreen
from textual.widgets import Static

MOUSE = ("click or drag on a chart: focus it and put the cursor there; wheel: zoom; click a run: show it;"
         " drag a pane's left border: resize the panes")
LEGEND = ("Markers: ✕ anomaly (table anomalies), ⚑ alert fired while following (`marinctl alerts`; a new one is"
          " also a notification), │ GitHub event, ▲ a spike above a fitted y range."
          " Faint lines: raw min/max envelope per bucket (every spike kept); bright line: smoothed."
          " Values: the one logged at the step shown (@N: logged at step N, the last that logged it),"
          " [min…max]: the envelope of its bucket.")


class HelpScreen(ModalScreen[None]):
    """The keys by where they act, then the mouse and what the charts' marks mean."""

    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def __init__(self, sections: list[tuple[str, list[tuple[str, str]]]]) -> None:
        super().__init__()
        self.sections = sections

    def compose(self) -> ComposeResult:
        # one grid row a key: a description that wraps stays in its own column, under its first line
        with VerticalScroll(id="help-body"):
            yield Static("[b]marinctl watch — keys[/b]")
            for title, section in self.sections:
                yield Static(f"[dim]{escape(title)}[/dim]", classes="help-section")
                with Grid(classes="help-keys"):
                    for k, v in section:
                        yield Static(f"[b $accent]{escape(k)}[/]", classes="help-key")
                        yield Static(escape(v), classes="help-what")
            with Grid(classes="help-keys"):
                yield Static("[b $accent]mouse[/]", classes="help-key")
                yield Static(escape(MOUSE), classes="help-what")
            yield Static(f"[dim]{escape(LEGEND)}[/dim]", classes="help-section")

    def on_mount(self) -> None:
        width = max(len(k) for _, section in self.sections for k, _ in section)
        for grid in self.query(".help-keys"):
            grid.styles.grid_columns = f"{max(width, len('mouse'))} 1fr"
