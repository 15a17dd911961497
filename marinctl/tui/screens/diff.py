"""`d`: how the run on screen and the compared run differ, as `marinctl diff RUN_A RUN_B` says it.

The panel opens at once ("reading…") and reads in a thread worker: the same `diff_runs`
(analysis/diff.py) and the same text (render/diff.py) as the CLI, with A the run on screen and
B the run compared with it (sidebar `space`; of several, the last one picked), each as the
charts draw it. With no run compared, it says how to pick one.
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import ScrollableContainer
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Static

from marinctl.text import inert

HOW = ("No run is compared with this one yet. Tab to the runs sidebar, highlight a run (↑ ↓) and press space to"
       " draw it on the same charts; then d shows how the two differ: config keys changed, only in A, only in B,"
       " and per metric where they separate, the largest gap and the last values (as `marinctl diff RUN_A RUN_B`).")


class DiffScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,d", "dismiss", "close")]

    @dataclass
    class Read(Message):
        text: str

    def __init__(self, store, shown: str | None, compared: tuple[str, ...]) -> None:
        """`shown`: the run on screen as the view names it (None: the store's default run);
        `compared`: the runs drawn beside it."""
        super().__init__()
        self.store, self.shown, self.compared = store, shown, compared

    def compose(self) -> ComposeResult:
        with ScrollableContainer(id="diff-body"):     # the metrics table scrolls sideways (← →) when wider
            yield Static("[b]diff[/b] · the run on screen (A) and the compared run (B)\n", id="diff-title")
            yield Static(HOW if not self.compared else "reading both runs…", id="diff-text", markup=False)

    def on_mount(self) -> None:
        if self.compared:
            self.run_worker(self._read, thread=True, exit_on_error=False)

    def on_diff_screen_read(self, message: Read) -> None:
        text = self.query_one("#diff-text", Static)
        text.update(message.text)
        text.add_class("table")

    def _read(self) -> None:
        from marinctl.analysis.diff import diff_runs
        from marinctl.errors import MarinctlError
        from marinctl.render.diff import diff_text
        from marinctl.store.lineage import resolve_target

        other = self.compared[-1]
        more = (f"\n(comparing {len(self.compared)} runs: B is the last one picked; space on it in the sidebar"
                " takes it off)") if len(self.compared) > 1 else ""
        try:
            with self.store.connect() as con:
                a = resolve_target(con, self.shown, stitched=True)
                b = resolve_target(con, other, stitched=True)
                text = diff_text(diff_runs(con, a, b)) + more
        except MarinctlError as exc:
            text = f"could not diff these runs: {exc.message}"
        except Exception as exc:  # noqa: BLE001 — said in the panel, never a crash
            text = f"could not diff these runs: {type(exc).__name__}: {inert(exc, single_line=True)}"
        self.post_message(self.Read(text))
