"""`?`: every key of the watch screen in one place."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS = [
    ("?", "this help"), ("q", "quit"), ("ctrl+p", "command palette: jump to any metric (type its name), themes, actions"),
    ("tab / shift+tab", "focus: runs sidebar → each chart → the cursor bar (all charts)"),
    ("enter", "show the highlighted run"), ("space", "compare: draw the highlighted run on the same charts (again: off)"),
    ("/", "filter the keys by a regex (the header counts the matches; esc clears)"),
    ("pagedown / pageup", "next / previous page of charts (also > and <)"),
    ("c / C", "one more / one fewer column of charts"), ("v / V", "one more / one fewer row of charts"),
    ("g / G", "fold or unfold the focused chart's section / every section (or click a section's header)"),
    ("← →", "move the cursor one bucket (shift: ten); the readout names the step of each value"),
    ("home / end", "cursor to the first / last step"),
    ("n / p", "cursor to the next / previous marker (anomaly ✕, GitHub event │)"),
    ("e", "explain the step under the cursor"),
    ("+ / -", "zoom in / out around the cursor (mouse wheel: around the pointer)"),
    ("[ / ]", "pan left / right"), ("0", "reset zoom (follow the live end)"),
    ("y", "log-y of the focused chart (of every chart when the cursor bar has focus)"),
    ("Y", "log-y of every chart"), ("a", "the focused chart's y range around its lines (spikes as ▲); again: full"),
    ("f", "the focused chart full screen (f or esc: back)"),
    ("s", "smoothing: none → EMA → debiased EMA"),
    ("x", "x axis: step → tokens → fraction of schedule → wall time (compared runs on their own schedule)"),
    ("o", "overlays: ladder rungs and repro runs (fraction axis), ladder prediction band"),
    ("i", "run pane: overview, config, summary and console (type to search)"),
    ("m", "system metrics pane (GPU, CPU, memory … when the run recorded them)"),
    ("b", "hide / show the runs sidebar"), ("{ / }", "narrow / widen the run and system panes (or drag a pane's left border)"),
    ("r", "refresh now: read the run's file, or sync from W&B"),
    ("mouse", "click or drag on a chart: focus it and put the cursor there; wheel: zoom; click a run: show it;"
              " drag a pane's left border: resize the panes"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        width = max(len(k) for k, _ in KEYS)
        lines = ["[b]marinctl watch — keys[/b]", ""]
        lines += [f"[b $accent]{k.ljust(width)}[/]  {v}" for k, v in KEYS]
        lines += ["", "[dim]Markers: ✕ anomaly (table anomalies), │ GitHub event, ▲ a spike above a fitted y range."
                      " Faint lines: raw min/max envelope per bucket (every spike kept); bright line: smoothed."
                      " Values: the one logged at the step shown (@N: logged at step N, the last that logged it),"
                      " [min…max]: the envelope of its bucket.[/dim]"]
        with VerticalScroll(id="help-body"):
            yield Static("\n".join(lines), id="help-text")
