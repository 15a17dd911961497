"""`marinctl watch`: the live view of a run, its lineage, its markers, every metric, other runs.

The app starts things: it holds the store handle and what the command line asked for, opens the
watch screen (tui/screens/watch.py), which composes the widgets and keeps the view current, and keeps
the app-wide keys (quit, help, the command palette) and the charts' theme.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from textual.app import App
from textual.binding import Binding
from textual.screen import Screen

from marinctl.store import Store
from marinctl.tui.bindings import help_sections, keys
from marinctl.tui.commands import MetricKeys, view_commands
from marinctl.tui.first_read import FirstRead
from marinctl.tui.screens.watch import WatchScreen
from marinctl.tui.screens.help import HelpScreen

SyncFn = Callable[[Store, list[str]], dict]


def default_sync(store: Store, targets: list[str]) -> dict:
    from marinctl.sync import sync_targets

    return sync_targets(store, targets, following=True)


class WatchApp(App):
    """`watch TARGET` on a store: the watch screen, quit, help and the palette."""

    CSS_PATH = "app.tcss"
    TITLE = "marinctl watch"
    COMMANDS = App.COMMANDS | {MetricKeys}
    BINDINGS = [
        *keys("quit", Binding("q", "quit", "quit"), Binding("ctrl+c", "quit", "quit", show=False, priority=True)),
        *keys("this help", Binding("question_mark", "help", "help")),
        *keys("command palette: jump to any metric (type its name), themes, actions",
              Binding("ctrl+p", "command_palette", "palette", show=False, priority=True)),
    ]

    def __init__(self, target: str | None = None, interval: float = 30.0, *, store: Store | None = None,
                 sync_fn: SyncFn | None = None, autosync: bool = True, view_ref: str | None = None,
                 starting: str | None = None, plan: tuple[str | None, list[str]] | None = None,
                 first_read: FirstRead | None = None, rules: Any = None, sinks: Sequence = ()) -> None:
        """`starting`: what is being started (e.g. `marinctl demo`'s "starting the rung1 proxy…"),
        shown until the target has a run to show, instead of "the store holds no runs yet".
        `plan`: `plan_watch`'s answer when the caller already has it (the CLI checks TARGET before
        the screen opens): the first read then starts on mount instead of after planning again;
        `first_read`: that read, already started (tui/first_read.py); `rules`, `sinks`: what alerts the
        follow raises besides the built-in ones (`<home>/alerts.toml`) and where they go (`--notify`)."""
        super().__init__()
        if store is None:
            from marinctl.store import open_store

            store = open_store()
        self.store = store
        self._watch = dict(target=target, sync_fn=sync_fn or default_sync, interval=max(1.0, float(interval)),
                           autosync=autosync, view_ref=view_ref, starting=starting, plan=plan,
                           first_read=first_read, rules=rules, sinks=tuple(sinks))

    def get_default_screen(self) -> Screen:
        return WatchScreen(self.store, **self._watch)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_sections(self.screen)))

    def get_system_commands(self, screen: Screen):
        yield from super().get_system_commands(screen)
        if isinstance(screen, WatchScreen):
            yield from view_commands(screen)


def run_watch(target: str | None, interval: float, *, starting: str | None = None,
              plan: tuple[str | None, list[str]] | None = None, first_read: FirstRead | None = None,
              rules: Any = None, sinks: Sequence = ()) -> None:
    """Entry point for `marinctl watch` and `marinctl demo` (a local wandb/ dir target; `starting`
    says what is starting until its first steps are written; `plan`: TARGET already planned;
    `rules`, `sinks`: the alert rules and `--notify` sinks, checked by the CLI)."""
    WatchApp(target, interval, starting=starting, plan=plan, first_read=first_read, rules=rules, sinks=sinks).run()
