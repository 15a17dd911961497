"""The first view, read while Textual starts the screen.

From `App.run()` to the first layout Textual spends ~150 ms of a watch's start (styles,
mounting, the driver); the first read used to begin after it, because it needs the charts'
sizes. The view itself does not: it needs the terminal's width (the bucket count), which the
terminal already knows. So once the CLI has planned TARGET it starts this read in a thread,
before Textual is even imported, and the first load worker takes its view when the parameters
it was read with are still the ones asked for (else it reads afresh). DuckDB runs its queries
without the GIL, so the read overlaps Python's work on the main thread. Frames are drawn by
the worker as before, at the sizes the first layout gave.
"""

from __future__ import annotations

import shutil
import threading
from dataclasses import replace

from marinctl.analysis.watch_view import View, ViewParams, build_view
from marinctl.tui import settings


def params_for(layout: settings.Layout, ref: str | None) -> ViewParams:
    """The view a remembered layout asks for, of run `ref` (before the screen's size is known)."""
    return ViewParams(ref=ref, cols=layout.cols, rows=layout.rows, pattern=layout.pattern,
                      collapsed=frozenset(layout.collapsed), smoothing=layout.smoothing, xmode=layout.xmode,
                      system=layout.system_pane)


def start(store, plan: tuple[str | None, list[str]]) -> FirstRead:
    """The first view of a planned TARGET, read from now on."""
    params = params_for(settings.load(store.path), plan[0])
    return FirstRead(store, replace(params, buckets=bucket_guess(terminal_width())))


def bucket_guess(width: int) -> int:
    """Buckets per chart for a terminal `width` columns wide (the sidebar and margins take ~34)."""
    return int(max(80, min(600, max(60, width - 34))))


def terminal_width() -> int:
    return shutil.get_terminal_size((120, 40)).columns


class FirstRead:
    """`build_view(store, params)` started now in a daemon thread; `take` hands its view over once."""

    def __init__(self, store, params: ViewParams) -> None:
        self.params = params
        self._view: View | None = None
        self._done = threading.Event()
        self._taken = False
        self._lock = threading.Lock()
        threading.Thread(target=self._run, args=(store,), name="marinctl-first-read", daemon=True).start()

    def _run(self, store) -> None:
        try:
            self._view = build_view(store, self.params)
        except Exception:  # noqa: BLE001 — the load worker then reads afresh and reports the failure
            self._view = None
        finally:
            self._done.set()

    def take(self, params: ViewParams) -> View | None:
        """The view read early if `params` are the ones it was read with (waits for it), once; else None."""
        with self._lock:
            if self._taken or params != self.params:
                return None
            self._taken = True
        self._done.wait()
        return self._view
