"""The watch app's thread workers: everything that waits on the store or the network.

Each reads through its own short connection and posts a message back (tui/messages.py);
none touches a widget: what they need from the screen (sizes, the theme, the panels now
shown) is captured on the UI thread when they start. `load` reads one page and builds the
frames of the charts whose data or drawing changed, `paint` rebuilds frames when only the
cursor or the drawing options changed, `sync` appends to the store under the per-target
sync lock, `explain`, `keys` and `pane` feed the explain panel, paging and the run pane.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from textual.worker import get_current_worker

from marinctl.views.chart_data import Marker, PanelData
from marinctl.views.watch_view import View, ViewParams, build_view, key_list
from marinctl.errors import MarinctlError, RuntimeFailure
from marinctl.tui import messages as msg
from marinctl.tui.charts import register_theme
from marinctl.tui.paint import cursor_values, page_frames

if TYPE_CHECKING:
    from marinctl.tui.app import WatchApp


class Workers:
    """Mixed into WatchApp: the workers, and the methods that start them."""

    # -- starting them (UI thread) ---------------------------------------------------------
    def reload(self: WatchApp) -> None:
        """Read the view again; while a read runs, one more is queued (never two at once)."""
        if self._loading:
            self._reload_pending = True
            return
        self._loading, self._reload_pending = True, False
        self._generation += 1
        job = self._paint_job()
        self.run_worker(lambda p=self.params, g=self._generation, j=job: self._load_worker(p, g, j), thread=True,
                        group="load", exit_on_error=False)

    def repaint(self: WatchApp) -> None:
        """New frames for the charts on screen (cursor, log-y, y range moved; the data did not)."""
        if self.view is None:
            return
        job = self._paint_job()
        self.run_worker(lambda v=self.view, j=job: self._paint_worker(v, j), thread=True, exclusive=True,
                        group="paint", exit_on_error=False)

    def _paint_job(self: WatchApp) -> dict[str, Any]:
        """What a worker needs from the screen, read here on the UI thread."""
        page = self._page
        system = self._system_pane
        old = {c.key: c.panel for c in list(page.charts.values()) + list(system.charts.values()) if c.panel is not None}
        sizes = {slot: (c.size.width, c.size.height) for slot, c in page.charts.items() if c.size.width > 0}
        shown = {slot: c._frame for slot, c in [*page.charts.items(), *system.charts.items()] if c._frame is not None}
        return {"state": self.chart_state, "theme": register_theme(self), "page": (page.size.width, page.size.height),
                "system": system.chart_size() if system.display else None, "old": old, "shown": shown,
                "figures": self.figures, "layout": page._layout, "sizes": sizes}

    def sync_now(self: WatchApp) -> None:
        if self._syncing or not self.sync_targets:
            return
        self._syncing = True
        self._header.syncing = True
        self._header.redraw()
        self.run_worker(lambda t=list(self.sync_targets): self._sync_worker(t), thread=True, group="sync",
                        exit_on_error=False)

    def load_keys(self: WatchApp, ref: str | None) -> None:
        self.run_worker(lambda r=ref: self._keys_worker(r), thread=True, group="keys", exclusive=True,
                        exit_on_error=False)

    def load_pane(self: WatchApp) -> None:
        self.run_worker(lambda r=self.params.ref: self._pane_worker(r), thread=True, group="pane", exclusive=True,
                        exit_on_error=False)

    def explain_step(self: WatchApp, ref: str | None, step: int, nearby: list[Marker]) -> None:
        self.run_worker(lambda: self._explain_worker(ref, step, nearby), thread=True, group="explain",
                        exclusive=True, exit_on_error=False)

    # -- the workers (threads) -------------------------------------------------------------
    def _load_worker(self: WatchApp, params: ViewParams, generation: int, job: dict[str, Any]) -> None:
        early = self._first_read_early
        try:
            view = (early.take(params) if early is not None else None) or build_view(self.store, params)
        except Exception as exc:  # noqa: BLE001
            self.post_message(msg.ViewLoaded(None, {}, generation, error=f"could not read the store: {exc}"))
            return
        _keep_unchanged(view, job["old"])
        drawn = early.take_frames(view, job) if early is not None else None     # the helper's first page
        if drawn is not None:
            values, job = drawn[0], {**job, "early": drawn[1]}
        else:
            values = cursor_values(self.store, view, job["state"], wait=self._store_free())
        frames = page_frames(view, job, values, _cancelled)
        self.post_message(msg.ViewLoaded(view, frames, generation, view.version, values=values))

    def _store_free(self: WatchApp) -> bool:
        """False while the first-read helper may hold the store (catching a file up): the readout then
        does not wait for it, and a value the envelopes cannot tell shows '…' until its last view."""
        early = self._first_read_early
        return early is None or early.wait_done(0)

    def _paint_worker(self: WatchApp, view: View, job: dict[str, Any]) -> None:
        values = cursor_values(self.store, view, job["state"], wait=self._store_free())
        if get_current_worker().is_cancelled:
            return
        self.post_message(msg.FramesReady(page_frames(view, job, values, _cancelled), values=values, view=view))

    def _sync_worker(self: WatchApp, targets: list[str]) -> None:
        from marinctl.store import synclock

        try:
            with synclock.acquire_all(self.store.path, targets, owner="watch"):
                report = self.sync_fn(self.store, targets)
        except RuntimeFailure as exc:
            busy = "already syncing" in exc.message
            self.post_message(msg.SyncFinished(False, "", error=exc.message, offline=not busy))
            return
        except MarinctlError as exc:
            self.post_message(msg.SyncFinished(False, "", error=exc.message))
            return
        except Exception as exc:  # noqa: BLE001 — e.g. a network error class we did not map
            self.post_message(msg.SyncFinished(False, "", error=f"{type(exc).__name__}: {exc}", offline=True))
            return
        runs = (report or {}).get("runs") or []
        rows = sum(int(r.get("rows_added") or 0) for r in runs)
        first = runs[-1].get("run") if runs else None
        self.post_message(msg.SyncFinished(True, f"{rows} rows" + (f"|{first}" if first else "")))

    def _explain_worker(self: WatchApp, ref: str | None, step: int, nearby: list[Marker]) -> None:
        """The same document and words as `marinctl explain step N`, for the run on screen."""
        from marinctl.analysis.explain.explain import explain
        from marinctl.render.explain import panel_text
        from marinctl.store.lineage import resolve_target

        try:
            with self.store.connect() as con:
                doc = explain(con, resolve_target(con, ref, stitched=True), step)
            text = panel_text(doc, nearby)
        except MarinctlError as exc:
            text = panel_text(None, nearby, error=f"could not explain step {step}: {exc.message}")
        except Exception as exc:  # noqa: BLE001 — shown in the panel, never a crash
            text = panel_text(None, nearby, error=f"could not explain step {step}: {type(exc).__name__}: {exc}")
        self.post_message(msg.ExplainReady(step, text))

    def _keys_worker(self: WatchApp, ref: str | None) -> None:
        early = self._first_read_early
        try:
            keys = (early.take_keys(ref) if early is not None else None) or key_list(self.store, ref)
        except Exception:  # noqa: BLE001 — the grid then shows the curated page only
            return
        self.post_message(msg.KeysLoaded(ref, keys))

    def _pane_worker(self: WatchApp, ref: str | None) -> None:
        from marinctl.views.run_panes import run_pane
        from marinctl.store.lineage import resolve_target

        try:
            with self.store.connect() as con:
                pane = run_pane(con, resolve_target(con, ref, stitched=True))
        except Exception:  # noqa: BLE001 — the pane says it has nothing
            pane = None
        self.post_message(msg.PaneLoaded(pane))


def _cancelled() -> bool:
    return get_current_worker().is_cancelled


def _keep_unchanged(view: View, old: dict[str, PanelData]) -> None:
    """Hand back the previous panel object where the data is the same: its chart is then not redrawn."""
    for panels in (view.panels, view.system_panels):
        for i, panel in enumerate(panels):
            prev = old.get(panel.key)
            if prev is not None and prev.same_as(panel):
                panels[i] = prev
