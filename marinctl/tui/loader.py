"""The watch screen's reads: thread workers for everything that waits on the store.

Each worker reads through its own short connection and posts a message back (tui/messages.py)
to the screen that holds the `Loader`; none touches a widget: what they need from the screen
(sizes, the theme, the panels now shown) is captured on the UI thread when they start (the
`job`). `reload` reads one page and builds the frames of the charts whose data or drawing
changed, `repaint` rebuilds frames when only the cursor or the drawing options changed, `keys`,
`pane` and `explain` feed paging and the filter, the run pane and the explain panel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from textual.dom import DOMNode
from textual.worker import get_current_worker

from marinctl.views.chart_data import Marker, PanelData
from marinctl.views.run_header import HeaderStats
from marinctl.views.watch_view import View, ViewParams, build_view, key_list
from marinctl.errors import MarinctlError
from marinctl.tui import messages as msg
from marinctl.tui.frames import Figures
from marinctl.tui.paint import ChartState, cursor_values, page_frames

if TYPE_CHECKING:
    from marinctl.store import Store
    from marinctl.tui.first_read import FirstRead
    from marinctl.tui.state import WatchState


class Loader:
    """Starts the reads on the UI thread; `finished` and `next` take each view read back."""

    def __init__(self, node: DOMNode, store: Store, state: WatchState, job: Callable[[], dict[str, Any]],
                 early: FirstRead | None = None) -> None:
        """`job()`: what a worker needs from the screen, read on the UI thread; `early`: the
        first-read helper whose view, frames and key list the first reads take."""
        self._node, self._store, self._state, self._job, self._early = node, store, state, job, early
        self.generation = 0          # reads started; a view read for an older one is dropped
        self.loading = False
        self._pending = False

    def reload(self) -> None:
        """Read the view again; while a read runs, one more is queued (never two at once)."""
        if self.loading:
            self._pending = True
            return
        self.loading, self._pending = True, False
        self.generation += 1
        params, generation, job = self._state.params, self.generation, self._job()
        self._run(lambda: self._load(params, generation, job), "load")

    def finished(self, message: msg.ViewLoaded) -> bool:
        """A read landed: True when it answers the newest request (show it, then `next`)."""
        self.loading = False
        return message.generation == self.generation

    def next(self) -> None:
        """Start the read asked for while the last one ran, if any."""
        if self._pending:
            self.reload()

    def repaint(self) -> None:
        """New frames for the charts on screen (cursor, log-y, y range moved; the data did not)."""
        view = self._state.view
        if view is not None:
            job = self._job()
            self._run(lambda: self._paint(view, job), "paint", exclusive=True)

    def plan(self, target: str | None, starting: str | None) -> None:
        """What TARGET shows and syncs, decided against the store: a `Planned` message."""
        self._run(lambda: self._plan(target, starting), "plan")

    def load_keys(self, ref: str | None) -> None:
        self._run(lambda: self._keys(ref), "keys", exclusive=True)

    def load_pane(self, ref: str | None, stats: HeaderStats | None = None) -> None:
        """The run pane of `ref`; `stats`: the header's figures of that run, already read."""
        self._run(lambda: self._pane(ref, stats), "pane", exclusive=True)

    def explain(self, ref: str | None, step: int, nearby: list[Marker]) -> None:
        self._run(lambda: self._explain(ref, step, nearby), "explain", exclusive=True)

    def _run(self, work: Callable[[], None], group: str, exclusive: bool = False) -> None:
        self._node.run_worker(work, thread=True, group=group, exclusive=exclusive, exit_on_error=False)

    def _post(self, message) -> None:
        self._node.post_message(message)

    def _store_free(self) -> bool:
        """False while the first-read helper may hold the store (catching a file up): the readout then
        does not wait for it, and a value the envelopes cannot tell shows '…' until its last view."""
        return self._early is None or self._early.wait_done(0)

    # -- the workers (threads) -------------------------------------------------------------
    def _plan(self, target: str | None, starting: str | None) -> None:
        from pathlib import Path

        from marinctl.sync import plan_watch

        ref = self._state.params.ref
        try:
            if starting and target and not Path(target).expanduser().exists():
                # demo: the trainer has not made its wandb/ dir yet; follow it once it has
                self._post(msg.Planned(ref, [], local_paths=[target]))
                return
            self._post(planned(*plan_watch(self._store, target), default=ref))
        except MarinctlError as exc:
            self._post(msg.Planned(ref, [], error=exc.message))
        except Exception as exc:  # noqa: BLE001 — a broken store must not crash the view
            self._post(msg.Planned(ref, [], error=f"{type(exc).__name__}: {exc}"))

    def _load(self, params: ViewParams, generation: int, job: dict[str, Any]) -> None:
        early = self._early
        try:
            view = (early.take(params) if early is not None else None) or build_view(self._store, params)
        except Exception as exc:  # noqa: BLE001
            self._post(msg.ViewLoaded(None, {}, generation, error=f"could not read the store: {exc}"))
            return
        _keep_unchanged(view, job["old"])
        drawn = early.take_frames(view, job) if early is not None else None     # the helper's first page
        if drawn is not None:
            values, job = drawn[0], {**job, "early": drawn[1]}
        else:
            values = cursor_values(self._store, view, job["state"], wait=self._store_free())
        frames = page_frames(view, job, values, _cancelled)
        self._post(msg.ViewLoaded(view, frames, generation, view.version, values=values))

    def _paint(self, view: View, job: dict[str, Any]) -> None:
        values = cursor_values(self._store, view, job["state"], wait=self._store_free())
        if get_current_worker().is_cancelled:
            return
        self._post(msg.FramesReady(page_frames(view, job, values, _cancelled), values=values, view=view))

    def _explain(self, ref: str | None, step: int, nearby: list[Marker]) -> None:
        """The same document and words as `marinctl explain step N`, for the run on screen."""
        from marinctl.analysis.explain.explain import explain
        from marinctl.render.explain import panel_text
        from marinctl.store.lineage import resolve_target

        try:
            with self._store.connect() as con:
                doc = explain(con, resolve_target(con, ref, stitched=True), step)
            text = panel_text(doc, nearby)
        except MarinctlError as exc:
            text = panel_text(None, nearby, error=f"could not explain step {step}: {exc.message}")
        except Exception as exc:  # noqa: BLE001 — shown in the panel, never a crash
            text = panel_text(None, nearby, error=f"could not explain step {step}: {type(exc).__name__}: {exc}")
        self._post(msg.ExplainReady(step, text))

    def _keys(self, ref: str | None) -> None:
        early = self._early
        try:
            keys = (early.take_keys(ref) if early is not None else None) or key_list(self._store, ref)
        except Exception:  # noqa: BLE001 — the grid then shows the curated page only
            return
        self._post(msg.KeysLoaded(ref, keys))

    def _pane(self, ref: str | None, stats: HeaderStats | None) -> None:
        from marinctl.views.run_panes import run_pane
        from marinctl.store.lineage import resolve_target

        try:
            with self._store.connect() as con:
                pane = run_pane(con, resolve_target(con, ref, stitched=True), stats)
        except Exception:  # noqa: BLE001 — the pane says it has nothing
            pane = None
        self._post(msg.PaneLoaded(pane))


def paint_job(page, system, state: ChartState, theme: str, figures: Figures) -> dict[str, Any]:
    """What a worker needs from the screen (tui/paint.py `page_frames`), read on the UI thread: the
    chart `page`'s and the `system` pane's sizes, panels and frames on screen."""
    charts = [*page.charts.items(), *system.charts.items()]
    return {"state": state, "theme": theme, "page": (page.size.width, page.size.height),
            "system": system.chart_size() if system.display else None,
            "old": {c.key: c.panel for _, c in charts if c.panel is not None},
            "shown": {slot: c.frame for slot, c in charts if c.frame is not None},
            "figures": figures, "layout": page.layout_shown,
            "sizes": {slot: (c.size.width, c.size.height) for slot, c in page.charts.items() if c.size.width > 0}}


def planned(ref: str | None, targets: list[str], default: str | None) -> msg.Planned:
    """`plan_watch`'s answer as the screen takes it: local targets are followed, the rest synced."""
    from marinctl.sync.targets import local_targets

    local = local_targets(targets)
    return msg.Planned(ref or default, [t for t in targets if t not in local], local_paths=local)


def _cancelled() -> bool:
    return get_current_worker().is_cancelled


def _keep_unchanged(view: View, old: dict[str, PanelData]) -> None:
    """Hand back the previous panel object where the data is the same: its chart is then not redrawn."""
    for panels in (view.panels, view.system_panels):
        for i, panel in enumerate(panels):
            prev = old.get(panel.key)
            if prev is not None and prev.same_as(panel):
                panels[i] = prev
