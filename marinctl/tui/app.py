"""`marinctl watch`: the live view of a run, its lineage, its markers, every metric, other runs.

The app starts things: it holds the store handle and what the command line asked for, opens the
watch screen (tui/screens/watch.py), which composes the widgets and keeps the view current, and keeps
the app-wide keys (quit, help, the command palette) and the charts' theme.
"""

from __future__ import annotations

import asyncio

from textual.app import App
from textual.binding import Binding
from textual.screen import Screen

from marinctl.store import Store
from marinctl.threads import JoinedExecutor
from marinctl.tui.bindings import help_sections, keys
from marinctl.tui.commands import MetricKeys, view_commands
from marinctl.tui.options import WatchOptions
from marinctl.tui.screens.help import HelpScreen
from marinctl.tui.screens.watch import WatchScreen


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

    def __init__(self, options: WatchOptions | None = None, *, store: Store | None = None) -> None:
        """`options`: what the command line asked for (tui/options.py); `store`: default, the data home's."""
        super().__init__()
        if store is None:
            from marinctl.store import open_store

            store = open_store()
        self.store = store
        self.options = options or WatchOptions()

    def on_load(self) -> None:
        # Textual's thread workers run on the loop's default executor: joined at the app's end, bounded
        asyncio.get_running_loop().set_default_executor(JoinedExecutor(thread_name_prefix="watch-worker"))

    def get_default_screen(self) -> Screen:
        return WatchScreen(self.store, self.options)

    def action_help(self) -> None:
        self.push_screen(HelpScreen(help_sections(self.screen)))

    def get_system_commands(self, screen: Screen):
        yield from super().get_system_commands(screen)
        if isinstance(screen, WatchScreen):
            yield from view_commands(screen)


def run_watch(options: WatchOptions) -> None:
    """Entry point for `marinctl watch` and `marinctl demo`."""
    WatchApp(options).run()
