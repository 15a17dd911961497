"""`marinctl watch`: the live view of a run, its lineage, its markers and the ladder.

The UI thread never waits on the network or the database. Three kinds of thread worker
post messages back (tui/messages.py): `sync` (every `interval` seconds, appends to the
store under the per-target sync lock), `load` (reads one frame's data through a short
connection and pre-builds the chart frames) and `paint` (rebuilds frames when only the
cursor or log-y changed). Failures become notifications; the last good frame stays up.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer, Input, OptionList, Static

from marinctl.analysis import series_view as sv
from marinctl.errors import MarinctlError, RuntimeFailure
from marinctl.store import Store
from marinctl.tui import messages as msg
from marinctl.tui.charts import MetricChart, PaintOptions
from marinctl.tui.screens.explain import ExplainScreen
from marinctl.tui.screens.help import HelpScreen
from marinctl.tui.widgets.grid import ChartGrid
from marinctl.tui.widgets.sidebar import RunsSidebar
from marinctl.tui.widgets.status import StatusHeader

SyncFn = Callable[[Store, list[str]], dict]


def default_sync(store: Store, targets: list[str]) -> dict:
    from marinctl.sync import sync_targets

    return sync_targets(store, targets)


class WatchApp(App):
    """Runs sidebar, header, metric grid, cursor readout; keys in screens/help.py."""

    CSS_PATH = "app.tcss"
    TITLE = "marinctl watch"
    BINDINGS = [
        Binding("q", "quit", "quit"),
        Binding("ctrl+c", "quit", "quit", show=False, priority=True),
        Binding("question_mark", "help", "help"),
        Binding("slash", "filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("left", "cursor(-1)", "cursor", show=False),
        Binding("right", "cursor(1)", "cursor", show=False),
        Binding("shift+left", "cursor(-10)", show=False),
        Binding("shift+right", "cursor(10)", show=False),
        Binding("home", "cursor_edge(0)", show=False),
        Binding("end", "cursor_edge(1)", show=False),
        Binding("n", "marker(1)", "next marker", show=False),
        Binding("p", "marker(-1)", "prev marker", show=False),
        Binding("e", "explain", "explain"),
        Binding("plus,equals_sign", "zoom(0.5)", "zoom", show=False),
        Binding("minus", "zoom(2.0)", show=False),
        Binding("left_square_bracket", "pan(-0.25)", show=False),
        Binding("right_square_bracket", "pan(0.25)", show=False),
        Binding("0", "reset_zoom", show=False),
        Binding("y", "toggle_logy", "log-y"),
        Binding("s", "cycle_smoothing", "smooth"),
        Binding("x", "cycle_xmode", "x-axis"),
        Binding("o", "toggle_overlays", "overlays"),
        Binding("r", "sync_now", "sync"),
    ]

    def __init__(self, target: str | None = None, interval: float = 30.0, *, store: Store | None = None,
                 sync_fn: SyncFn | None = None, autosync: bool = True, view_ref: str | None = None) -> None:
        super().__init__()
        if store is None:
            from marinctl.store import open_store

            store = open_store()
        self.store = store
        self.target = target
        self.interval = max(1.0, float(interval))
        self.sync_fn = sync_fn or default_sync
        self.autosync = autosync
        self.sync_targets: list[str] = []
        self.params = sv.ViewParams(ref=view_ref)
        self.view: sv.View | None = None
        self.options = PaintOptions()
        self.cursor_step: float | None = None          # None: follow the newest step
        self.all_keys: tuple[str, ...] | None = None
        self._planned = False
        self._syncing = False
        self._last_error: str | None = None
        self.ui_seconds = 0.0                           # UI-thread time in view handlers (bench, tests)
        self.refreshes = 0

    # -- layout --------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(id="header")
        with Horizontal(id="body"):
            yield RunsSidebar(id="sidebar")
            with Vertical(id="main"):
                yield Input(placeholder="regex over every key, e.g. router|drop  (enter: apply, esc: clear)", id="filter")
                yield Static("", id="notice")
                yield ChartGrid(id="grid")
                yield Static("", id="readout")
        yield Footer()

    def on_mount(self) -> None:
        # Keep references: while a modal (help, explain) is up, app.query_one() searches the modal.
        self._header = self.query_one(StatusHeader)
        self._sidebar = self.query_one(RunsSidebar)
        self._grid = self.query_one("#grid", ChartGrid)
        self._filter = self.query_one("#filter", Input)
        self._notice = self.query_one("#notice", Static)
        self._readout = self.query_one("#readout", Static)
        self._filter.display = False
        self._sidebar.border_title = "runs"
        self._grid.focus()
        self.params = self._with(buckets=self._bucket_guess())
        self.run_worker(self._plan_worker, thread=True, group="plan", exit_on_error=False)
        self.set_interval(1.0, self._header.redraw)

    def _bucket_guess(self) -> int:
        width = max(60, self.size.width - 34)
        return int(max(80, min(600, width)))

    def _with(self, **changes: Any) -> sv.ViewParams:
        from dataclasses import replace

        return replace(self.params, **changes)

    # -- workers (thread) ----------------------------------------------------------------
    def _plan_worker(self) -> None:
        from marinctl.sync import plan_watch

        try:
            ref, targets = plan_watch(self.store, self.target)
            self.post_message(msg.Planned(ref or self.params.ref, targets))
        except MarinctlError as exc:
            self.post_message(msg.Planned(self.params.ref, [], error=exc.message))
        except Exception as exc:  # noqa: BLE001 — a broken store must not crash the view
            self.post_message(msg.Planned(self.params.ref, [], error=f"{type(exc).__name__}: {exc}"))

    def _load_worker(self, params: sv.ViewParams, options: PaintOptions) -> None:
        try:
            view = sv.build_view(self.store, params)
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

    def _paint_worker(self, options: PaintOptions) -> None:
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

    def _sync_worker(self, targets: list[str]) -> None:
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

    def _explain_worker(self, ref: str, step: int, nearby: list[sv.Marker]) -> None:
        try:
            with self.store.connect() as con:
                text = sv.explain_text(con, ref, step, nearby)
        except Exception as exc:  # noqa: BLE001
            text = f"could not explain step {step}: {exc}"
        self.post_message(msg.ExplainReady(step, text))

    def _keys_worker(self, ref: str | None) -> None:
        from marinctl.store.lineage import resolve_target
        from marinctl.store.metrics import run_keys

        try:
            with self.store.connect() as con:
                target = resolve_target(con, ref, stitched=True)
                keys = run_keys(con, target.run_pks)
        except Exception:  # noqa: BLE001 — the filter then computes keys itself
            return
        self.post_message(msg.KeysLoaded(keys))

    # -- scheduling ----------------------------------------------------------------------
    def reload(self) -> None:
        self.run_worker(lambda p=self.params, o=self.options: self._load_worker(p, o), thread=True,
                        exclusive=True, group="load", exit_on_error=False)

    def repaint(self) -> None:
        self.run_worker(lambda o=self._options_for(self.options, self.view): self._paint_worker(o), thread=True,
                        exclusive=True, group="paint", exit_on_error=False)

    def sync_now(self) -> None:
        if self._syncing or not self.sync_targets:
            return
        self._syncing = True
        self._header.syncing = True
        self.run_worker(lambda t=list(self.sync_targets): self._sync_worker(t), thread=True, group="sync",
                        exit_on_error=False)

    def _options_for(self, options: PaintOptions, view: sv.View | None) -> PaintOptions:
        from dataclasses import replace

        if self.cursor_step is None and view is not None and view.panels:
            return replace(options, cursor_step=None)
        return replace(options, cursor_step=self.cursor_step)

    # -- message handlers (UI thread: keep them short) -------------------------------------
    def on_planned(self, message: msg.Planned) -> None:
        self._planned = True
        self.sync_targets = message.sync_targets
        if message.error:
            self.notify(message.error, title="watch", severity="error")
        self.params = self._with(ref=message.view_ref)
        self.reload()
        self.run_worker(lambda r=message.view_ref: self._keys_worker(r), thread=True, group="keys", exit_on_error=False)
        if self.autosync and self.sync_targets:
            self.sync_now()
            self.set_interval(self.interval, self.sync_now)
        elif self.autosync:
            # Nothing to sync from here (another process may be writing): just re-read.
            self.set_interval(self.interval, self.reload)

    def on_view_loaded(self, message: msg.ViewLoaded) -> None:
        t0 = time.perf_counter()
        view = message.view
        self.view = view
        self.refreshes += 1
        header = self._header
        cache = view.cache_time.strftime("%Y-%m-%d %H:%M UTC") if view.cache_time else "never"
        if header.offline_since is not None:
            header.offline_since = cache
        header.update_stats(view.header, self._view_line(view))
        self._sidebar.show_entries(view.sidebar, view.ref)
        text = ""
        if view.error:
            text = view.error
        elif view.params.pattern and not view.panels:
            text = f"no key matches /{view.params.pattern}/"
        elif view.matched > len(view.panels):
            text = f"showing {len(view.panels)} of {view.matched} matching keys — narrow the filter"
        notice = self._notice
        notice.update(text)
        notice.display = bool(text)
        self._sync_charts(view, message.frames)
        self._update_readout()
        self.ui_seconds += time.perf_counter() - t0

    def _sync_charts(self, view: sv.View, frames: dict[str, Any]) -> None:
        grid = self._grid
        charts = self._charts()
        keys = [p.key for p in view.panels]
        if list(charts) != keys:
            grid.remove_children()
            new = [MetricChart(k, classes="chart") for k in keys]
            if new:
                grid.mount_all(new)
            charts = dict(zip(keys, new))
        options = self._options_for(self.options, view)
        for panel in view.panels:
            charts[panel.key].set_panel(panel, view.axis, options, frames.get(panel.key))

    def on_frames_ready(self, message: msg.FramesReady) -> None:
        t0 = time.perf_counter()
        view = self.view
        if view is None:
            return
        for key, chart in self._charts().items():
            panel = next((p for p in view.panels if p.key == key), None)
            if panel is not None:
                chart.set_panel(panel, view.axis, message.options, message.frames.get(key))
        self.ui_seconds += time.perf_counter() - t0

    def on_sync_finished(self, message: msg.SyncFinished) -> None:
        self._syncing = False
        header = self._header
        header.syncing = False
        if message.ok:
            header.synced_at = time.time()
            header.offline_since = None
            _, _, first = message.summary.partition("|")
            if self.params.ref is None and first:
                self.params = self._with(ref=first)
            self.reload()
        else:
            if message.offline:
                cache = self.view.cache_time if self.view else None
                header.offline_since = cache.strftime("%Y-%m-%d %H:%M UTC") if cache else "never"
            else:
                self.reload()          # another process is syncing this target: show what it wrote
            if message.error != self._last_error:      # one toast per new failure, not one per interval
                self.notify(message.error or "sync failed", title="sync", severity="warning")
        self._last_error = message.error
        header.redraw()

    def on_keys_loaded(self, message: msg.KeysLoaded) -> None:
        self.all_keys = tuple(message.keys)
        self.params = self._with(all_keys=self.all_keys)

    def on_explain_ready(self, message: msg.ExplainReady) -> None:
        self.push_screen(ExplainScreen(message.step, message.text))

    @on(MetricChart.Clicked)
    def _chart_clicked(self, message: MetricChart.Clicked) -> None:
        self.cursor_step = message.step
        self._cursor_moved()

    @on(OptionList.OptionSelected, "#sidebar")
    def _run_selected(self, event: OptionList.OptionSelected) -> None:
        ref = event.option.id
        if ref and ref != self.params.ref:
            self.params = self._with(ref=ref, lo=None, hi=None)
            self.cursor_step = None
            self.reload()
            self.run_worker(lambda r=ref: self._keys_worker(r), thread=True, group="keys", exit_on_error=False)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        pattern = event.value.strip() or None
        if pattern:
            try:
                re.compile(pattern)
            except re.error as exc:
                self.notify(f"bad regex: {exc}", severity="error")
                return
        self.params = self._with(pattern=pattern)
        self._grid.focus()
        self.reload()

    # -- readout ---------------------------------------------------------------------------
    def _view_line(self, view: sv.View) -> str:
        p = view.params
        zoom = "full range" if p.lo is None and p.hi is None else f"steps {view.lo:,}–{view.hi:,}"
        parts = [f"x: {view.axis.label if view.axis else p.xmode}", f"smoothing: {p.smoothing}",
                 f"log-y: {'on' if self.options.logy else 'off'}", zoom]
        if p.overlays:
            parts.append("overlays on")
        if p.pattern:
            parts.append(f"filter /{p.pattern}/")
        return " · ".join(parts)

    def _update_readout(self) -> None:
        view = self.view
        readout = self._readout
        if view is None or not view.panels:
            readout.update("")
            return
        step = self.cursor_step if self.cursor_step is not None else float(view.hi)
        parts = [f"▏step {int(round(step)):,}"]
        if view.axis is not None and view.axis.mode != "step":
            parts[0] += f" ({view.axis.label} {float(view.axis.x([step])[0]):.4g})"
        for panel in view.panels[:6]:
            text = panel.readout(step)
            if text:
                parts.append(text)
        near = self._markers_near(step)
        if near:
            parts.append(" ".join(("✕ " if m.kind == "anomaly" else "│ ") + m.label[:40] for m in near[:2]))
        from marinctl.text import inert

        readout.update(inert("  ".join(parts), single_line=True))

    def _bucket_width(self) -> float:
        view = self.view
        if view is None:
            return 1.0
        return max(1.0, (view.hi - view.lo) / max(1, view.params.buckets))

    def _markers_near(self, step: float) -> list[sv.Marker]:
        if self.view is None:
            return []
        w = self._bucket_width()
        return [m for m in self.view.markers if abs(m.step - step) <= w]

    def _cursor_moved(self) -> None:
        self._update_readout()
        self.repaint()

    def _charts(self) -> dict[str, MetricChart]:
        return {c.key: c for c in self._grid.query(MetricChart)}

    # -- actions ---------------------------------------------------------------------------
    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def action_filter(self) -> None:
        box = self._filter
        box.display = True
        box.value = self.params.pattern or ""
        box.focus()

    def action_clear_filter(self) -> None:
        box = self._filter
        box.display = False
        if self.params.pattern:
            self.params = self._with(pattern=None)
            self.reload()
        self._grid.focus()

    def action_cursor(self, buckets: int) -> None:
        view = self.view
        if view is None:
            return
        step = self.cursor_step if self.cursor_step is not None else float(view.hi)
        self.cursor_step = float(min(view.hi, max(view.lo, step + buckets * self._bucket_width())))
        self._cursor_moved()

    def action_cursor_edge(self, end: int) -> None:
        if self.view is not None:
            self.cursor_step = float(self.view.hi if end else self.view.lo)
            self._cursor_moved()

    def action_marker(self, direction: int) -> None:
        view = self.view
        if view is None or not view.markers:
            self.notify("no markers in view")
            return
        step = self.cursor_step if self.cursor_step is not None else float(view.hi)
        steps = sorted({m.step for m in view.markers})
        later = [s for s in steps if s > step + 0.5] if direction > 0 else [s for s in steps if s < step - 0.5]
        if not later:
            return
        self.cursor_step = float(later[0] if direction > 0 else later[-1])
        self._cursor_moved()

    def action_explain(self) -> None:
        view = self.view
        if view is None or view.error:
            self.notify("nothing to explain yet")
            return
        step = int(round(self.cursor_step if self.cursor_step is not None else view.hi))
        near = self._markers_near(step)
        anomalies = [m for m in near if m.kind == "anomaly"]
        if anomalies:                      # `e` on a marker explains the marker's step
            step = min(anomalies, key=lambda m: abs(m.step - step)).step
        ref = view.target_name or view.ref or "hero"
        self.run_worker(lambda: self._explain_worker(ref, step, near), thread=True, group="explain",
                        exclusive=True, exit_on_error=False)

    def action_zoom(self, factor: float) -> None:
        view = self.view
        if view is None:
            return
        centre = self.cursor_step if self.cursor_step is not None else float(view.hi)
        half = max(10.0, (view.hi - view.lo) * factor / 2)
        lo, hi = int(centre - half), int(centre + half)
        if lo <= view.full_lo and hi >= view.full_hi:
            self.action_reset_zoom()
            return
        shift = max(0, view.full_lo - lo) - max(0, hi - view.full_hi)
        self.params = self._with(lo=max(view.full_lo, lo + shift), hi=min(view.full_hi, hi + shift))
        self.reload()

    def action_pan(self, fraction: float) -> None:
        view = self.view
        if view is None:
            return
        width = view.hi - view.lo
        delta = int(width * fraction)
        lo = min(max(view.full_lo, view.lo + delta), view.full_hi - width)
        self.params = self._with(lo=lo, hi=lo + width)
        self.reload()

    def action_reset_zoom(self) -> None:
        self.params = self._with(lo=None, hi=None)
        self.reload()

    def action_toggle_logy(self) -> None:
        from dataclasses import replace

        self.options = replace(self.options, logy=not self.options.logy)
        if self.view is not None:
            self._header.update_stats(self.view.header, self._view_line(self.view))
        self.repaint()

    def action_cycle_smoothing(self) -> None:
        modes = sv.SMOOTHINGS
        self.params = self._with(smoothing=modes[(modes.index(self.params.smoothing) + 1) % len(modes)])
        self.reload()

    def action_cycle_xmode(self) -> None:
        modes = sv.X_MODES
        self.params = self._with(xmode=modes[(modes.index(self.params.xmode) + 1) % len(modes)])
        self.reload()

    def action_toggle_overlays(self) -> None:
        on_ = not self.params.overlays
        changes: dict[str, Any] = {"overlays": on_}
        if on_ and self.params.xmode != "fraction":
            changes["xmode"] = "fraction"
            self.notify("overlays: x axis set to fraction of schedule so rungs line up")
        self.params = self._with(**changes)
        self.reload()

    def action_sync_now(self) -> None:
        if not self.sync_targets:
            self.notify("nothing to sync for this view (showing the store as is)")
            return
        self.sync_now()

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        yield SystemCommand("Log-y", "Toggle a logarithmic y axis", self.action_toggle_logy)
        yield SystemCommand("Smoothing", "Cycle none / EMA / debiased EMA", self.action_cycle_smoothing)
        yield SystemCommand("X axis", "Cycle step / tokens / fraction of schedule / wall time", self.action_cycle_xmode)
        yield SystemCommand("Overlays", "Ladder rungs, repro runs and the predicted band", self.action_toggle_overlays)
        yield SystemCommand("Sync now", "Pull new history for this target", self.action_sync_now)
        yield SystemCommand("Reset zoom", "Show the full range and follow the live end", self.action_reset_zoom)


def run_watch(target: str | None, interval: float) -> None:
    """Entry point for `marinctl watch` and `marinctl demo` (a local wandb/ dir target)."""
    WatchApp(target, interval).run()
