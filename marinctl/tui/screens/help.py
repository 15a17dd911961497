"""`?`: every key of the watch screen in one place."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("?", "this help"), ("q", "quit"), ("ctrl+p", "command palette (themes, actions)"),
    ("tab / shift+tab", "move focus: runs sidebar, filter, charts"), ("enter", "show the highlighted run"),
    ("/", "filter panels by a regex over every key (esc clears)"),
    ("← →", "move the cursor one bucket (shift: ten)"), ("home / end", "cursor to the first / last step"),
    ("n / p", "cursor to the next / previous marker (anomaly ✕, GitHub event │)"),
    ("e", "explain the step under the cursor"), ("+ / -", "zoom in / out around the cursor"),
    ("[ / ]", "pan left / right"), ("0", "reset zoom (follow the live end)"),
    ("y", "log-y on/off"), ("s", "smoothing: none → EMA → debiased EMA"),
    ("x", "x axis: step → tokens → fraction of schedule → wall time"),
    ("o", "overlays: ladder rungs and repro runs (fraction axis), ladder prediction band"),
    ("r", "sync now"), ("mouse", "click a chart to put the cursor there; click a run to show it"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        width = max(len(k) for k, _ in KEYS)
        lines = ["[b]marinctl watch — keys[/b]", ""]
        lines += [f"[b $accent]{k.ljust(width)}[/]  {v}" for k, v in KEYS]
        lines += ["", "[dim]Markers: ✕ anomaly (table anomalies), │ GitHub event. Faint lines: raw min/max "
                      "envelope per bucket (every spike kept); bright line: smoothed.[/dim]"]
        with VerticalScroll(id="help-body"):
            yield Static("\n".join(lines), id="help-text")
