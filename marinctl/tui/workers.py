"""The watch app's thread workers: everything that waits on the store or the network.

Each reads through its own short connection and posts a message back (tui/messages.py);
none touches a widget. `load` reads one frame and pre-builds the chart frames, `paint`
rebuilds frames when only the cursor or log-y changed, `sync` appends to the store under
the per-target sync lock, `explain` and `keys` feed the explain panel and the `/` filter.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from marinctl.analysis.chart_data import Marker
from marinctl.analysis.watch_view import View, ViewParams, build_view
from marinctl.errors import MarinctlError, RuntimeFailure
from marinctl.tui import messages as msg
from marinctl.tui.charts import PaintOptions

if TYPE_CHECKING:
    from marinctl.tui.app import WatchApp


class Workers:
    """Mixed into WatchApp: the workers, and the methods that start them."""

    # -- starting them (UI thread) ---------------------------------------------------------
    def reload(self: WatchApp) -> None:
        self.run_worker(lambda p=self.params, o=self.options: self._load_worker(p, o), thread=True,
                        exclusive=True, group="load", exit_on_error=False)

    def repaint(self: WatchApp) -> None:
        self.run_worker(lambda o=self._options_for(self.options, self.view): self._paint_worker(o), thread=True,
                        exclusive=True, group="paint", exit_on_error=False)

    def sync_now(self: WatchApp) -> None:
        if self._syncing or not self.sync_targets:
            return
        self._syncing = True
        self._header.syncing = True
        self.run_worker(lambda t=list(self.sync_targets): self._sync_worker(t), thread=True, group="sync",
                        exit_on_error=False)

    def load_keys(self: WatchApp, ref: str | None) -> None:
        self.run_worker(lambda r=ref: self._keys_worker(r), thread=True, group="keys", exit_on_error=False)

    def explain_step(self: WatchApp, ref: str | None, step: int, nearby: list[Marker]) -> None:
        self.run_worker(lambda: self._explain_worker(ref, step, nearby), thread=True, group="explain",
                        exclusive=True, exit_on_error=False)

    def _options_for(self: WatchApp, options: PaintOptions, view: View | None) -> PaintOptions:
        if self.cursor_step is None and view is not None and view.panels:
            return replace(options, cursor_step=None)
        return replace(options, cursor_step=self.cursor_step)

    # -- the workers (threads) -------------------------------------------------------------
    def _load_worker(self: WatchApp, params: ViewParams, options: PaintOptions) -> None:
        try:
            view = build_view(self.store, params)
        except Exception as exc:  # noqa: BLE001
            self.call_from_thread(self.notify, f"could not read the store: {exc}", severity="error")
            return
        frames: dict[str, Any] = {}
        charts = dict(self._charts())
        axis = view.axis
        for panel in view.panels:
            chart = charts.get(panel.key)
            if chart is None or axis is None or chart.size.width <= 0:
                continue
            size = (chart.size.width, chart.size.height)
            frames[panel.key] = (size, chart.prepare(panel, axis, self._options_for(options, view), size))
        self.post_message(msg.ViewLoaded(view, frames))

    def _paint_worker(self: WatchApp, options: PaintOptions) -> None:
        view = self.view
        if view is None or view.axis is None:
            return
        frames = {}
        for key, chart in dict(self._charts()).items():
            panel = next((p for p in view.panels if p.key == key), None)
            if panel is None or chart.size.width <= 0:
                continue
            size = (chart.size.width, chart.size.height)
            frames[key] = (size, chart.prepare(panel, view.axis, options, size))
        self.post_message(msg.FramesReady(options, frames))

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
        from marinctl.analysis.explain import explain
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
        from marinctl.store.lineage import resolve_target
        from marinctl.store.metrics import run_keys

        try:
            with self.store.connect() as con:
                target = resolve_target(con, ref, stitched=True)
                keys = run_keys(con, target.run_pks)
        except Exception:  # noqa: BLE001 — the filter then computes keys itself
            return
        self.post_message(msg.KeysLoaded(keys))
