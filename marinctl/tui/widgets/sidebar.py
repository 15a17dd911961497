"""Runs sidebar: hero lineage (stitched, with its fork segments), ladder rungs, local and repro runs,
narrowed by the run filter (widgets/run_filter.py) when one is set."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from marinctl import numbers
from marinctl.run_query import Selection, parse
from marinctl.errors import UserError
from marinctl.views.run_list import SidebarEntry
from marinctl.render.chart import overlay_color
from marinctl.text import inert
from marinctl.tui.bindings import keys
from marinctl.tui.state import WatchState
from marinctl.tui.widgets.run_filter import RunFilter

_DOT = {"live": ("●", "green"), "stale": ("●", "yellow"), "crashed": ("✖", "red"), "finished": ("✔", "cyan")}


class RunsSidebar(OptionList):
    """Select a run to show it (enter), or draw it beside the shown one (space: a coloured ━ marks it);
    the first mark says live / stale / crashed / finished."""

    KEYS_TITLE = "the runs sidebar (tab to it, ↑ ↓)"
    BINDINGS = [
        *keys("show the highlighted run (or click it)", Binding("enter", "select", "show", show=False, key_display="enter")),
        *keys("compare: draw the highlighted run on the same charts (again: off)",
              Binding("space", "compare", "compare", show=False)),
        *keys("take every compared run off the charts", Binding("delete", "clear_compare", show=False),
              palette="Clear compared runs"),
        *keys("filter the runs as `runs --where` does: state:running group~d512 cfg.KEY>=X tag:T name~RE, -term"
              " negates (empty: every run)", Binding("f", "filter", "filter runs")),
    ]

    def __init__(self, state: WatchState, expression: str | None = None, **kw) -> None:
        """`expression`: the run filter remembered for this store (one that no longer parses is dropped)."""
        super().__init__(**kw)
        self.state = state
        self._compared: list[str] = []
        self._entries: tuple[list[SidebarEntry], str | None] | None = None
        self._labels: list | None = None
        try:
            self.selection: Selection | None = parse(expression) if expression else None
        except UserError:
            self.selection = None

    @property
    def expression(self) -> str | None:
        return self.selection.text if self.selection is not None else None

    def select(self, selection: Selection | None) -> None:
        """Show only the runs `selection` keeps (None: every run)."""
        self.selection = selection
        if self._entries is not None:
            self._labels = None
            self.show_entries(*self._entries)

    def action_filter(self) -> None:
        self.query_ancestor(RunsColumn).open_filter()

    def on_mount(self) -> None:
        self.border_title = "runs"

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.state.show_run(event.option.id)
            self.compared = list(self.state.params.compare)

    def action_compare(self) -> None:
        """Draw the highlighted run on the same charts (again: take it off)."""
        if self.highlighted is None:
            self.notify("highlight a run in the sidebar first (tab to it, ↑ ↓)")
            return
        ref = self.get_option_at_index(self.highlighted).id
        if ref is None:
            return
        current = self._entries[1] if self._entries is not None else None
        if ref in (self.state.params.ref, current) or (self.state.view and ref == self.state.view.ref):
            self.notify("that is the run on screen; pick another run to compare with it")
            return
        if self.state.toggle_compare(ref):
            self.notify(f"comparing with {inert(str(ref), single_line=True)} (d: how they differ; space again: take"
                        " it off)", timeout=3, markup=False)
        self.compared = list(self.state.params.compare)

    def action_clear_compare(self) -> None:
        self.state.ask(compare=())
        self.compared = []

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
        """The runs of `entries` the filter keeps; `current`: the sidebar ref of the run on screen."""
        self._entries = (entries, current)
        every = entries
        if self.selection is not None:
            entries = [e for e in entries if self.selection(e.record)]
        runs = sum(1 for e in every if e.kind != "hero")       # the stitched lineage is a view of runs listed below it
        self.border_subtitle = (f"{sum(1 for e in entries if e.kind != 'hero')} of {runs} runs"
                                if self.selection is not None else "")
        labels = [(e.label, e.liveness, e.last_step, e.segment_start) for e in entries] + [tuple(self._compared)]
        if [o.id for o in self.options] == [e.ref for e in entries] and self._labels == labels:
            return
        self._labels = labels
        highlighted = self.highlighted
        was = self.options[highlighted].id if highlighted is not None and highlighted < len(self.options) else None
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
        if not entries and self.selection is not None:
            self.add_option(Option(Text("no run matches: f to change the filter", style="dim"), disabled=True))
        refs = [e.ref for e in entries]
        if was in refs and was != current:          # a live refresh keeps the run the user moved to
            self.highlighted = refs.index(was)
        elif current in refs:
            self.highlighted = refs.index(current)
        elif highlighted is not None and highlighted < len(refs):
            self.highlighted = highlighted


class RunsColumn(Vertical):
    """The runs sidebar with its filter box over it (hidden until `f`, or `w` anywhere)."""

    def __init__(self, sidebar: RunsSidebar, **kw) -> None:
        super().__init__(**kw)
        self.sidebar = sidebar

    def compose(self) -> ComposeResult:
        yield RunFilter(id="run-filter")
        yield self.sidebar

    def open_filter(self) -> None:
        self.display = True
        self.query_one(RunFilter).open(self.sidebar.expression or "")

    def on_run_filter_applied(self, message: RunFilter.Applied) -> None:
        self.sidebar.select(message.selection)     # and on to the screen, which remembers it

    def on_run_filter_closed(self, message: RunFilter.Closed) -> None:
        message.stop()
        self.sidebar.focus()


def fit(text: str, width: int) -> str:
    """Shorten in the middle so both the run's prefix and its fork suffix stay readable."""
    if len(text) <= width:
        return text
    keep = width - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2:]
