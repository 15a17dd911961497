"""What the first-read helper process does (tui/first_read.py forks it before Textual is imported):
plan TARGET, read the first view and the run's key list, draw the first page's frames, catch a
local run up, and send each as it comes through the pipe.

A local run (a `wandb/` dir, a `.wandb` file) is caught up here: the helper takes the target's
sync lock, reads the file window by window (the sync pipeline's `sync_files`, each window
committed with its position) and says "changed" at most every PROGRESS_EVERY_S and once at the
end, then exits. The first view is what is stored, sent before the file is read; for a run never
synced, as soon as the first window has landed. The decoding (and pyarrow) stays in a process
that ends, on the other core. One DuckDB instance is kept open from the plan to the first view,
and to the end of a catch-up of up to HOLD_BYTES (each open of the file builds one); meanwhile
the app's readout does not wait for the store (tui/loader.py `_store_free`).

Without `fork` the same work runs in a thread of the app's process (`catch_up=False`).
"""

from __future__ import annotations

import os
import pickle
import struct
import time
from contextlib import ExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from marinctl.tui import settings
from marinctl.tui.settings import SIDEBAR_COLUMNS

if TYPE_CHECKING:
    from marinctl.views.watch_view import View, ViewParams
    from marinctl.store import Store

PROGRESS_EVERY_S = 2.0   # after the first view, how often the helper says more has landed (as tui/live.py)
HOLD_BYTES = 32 << 20    # a catch-up of files up to this size keeps the store open throughout
# a run shorter than this is sent with its key list (listing scans every stored row: a fraction of a
# short run's view); a longer one's list follows its view, so the first chart does not wait for it
KEYS_INLINE_STEPS = 20_000


def params_for(layout: settings.Layout, ref: str | None) -> ViewParams:
    """The view a remembered layout asks for, of run `ref` (before the screen's size is known)."""
    from marinctl.views.watch_view import ViewParams

    return ViewParams(ref=ref, cols=layout.cols, rows=layout.rows, pattern=layout.pattern,
                      collapsed=frozenset(layout.collapsed), smoothing=layout.smoothing, xmode=layout.xmode,
                      system=layout.system_pane)


def bucket_guess(width: int) -> int:
    """Buckets per chart for a terminal `width` columns wide (the runs sidebar takes its share)."""
    return int(max(80, min(600, max(60, width - SIDEBAR_COLUMNS))))


def plan_and_read(store: Store, target: str | None, terminal: tuple[int, int], send, *, catch_up: bool) -> None:
    """Plan TARGET, `send` the plan (or the error), catch a local run up and draw the first page
    (when `catch_up`: in the helper process), `send` the view."""
    # one DuckDB instance from the plan to the first view (each open of the file builds one anew)
    # and, for a small catch-up, to the last; else let go after the first view (the app may read)
    with ExitStack() as held:
        held.enter_context(store.held())
        _plan_and_read_held(store, target, terminal, send, catch_up=catch_up, release=held.close)


def _plan_and_read_held(store: Store, target: str | None, terminal: tuple[int, int], send, *, catch_up: bool,
                        release) -> None:
    from marinctl.views.watch_view import build_view, key_list, with_keys
    from marinctl.errors import MarinctlError
    from marinctl.sync import plan_watch
    from marinctl.sync.targets import local_targets
    from marinctl.tui import startup

    try:
        plan = plan_watch(store, target)
    except MarinctlError as exc:
        release()
        send(("error", type(exc).__name__, exc.message, exc.hint))
        return
    send(("plan", plan))
    layout = settings.load(store.settings_key)
    params = replace(params_for(layout, plan[0]), buckets=bucket_guess(terminal[0]))
    local = local_targets(plan[1]) if catch_up else []
    # a small catch-up is read in the same instance: the app waits at most a few seconds to open the store
    keep = bool(local) and _file_bytes(local) <= HOLD_BYTES
    viewed = False

    def view() -> None:
        nonlocal viewed
        shown = build_view(store, params)
        keys = None
        if shown.error is None and shown.full_hi - shown.full_lo < KEYS_INLINE_STEPS:
            keys = key_list(store, shown.ref)    # a short run: its list costs a fraction of its view
        keyed = with_keys(shown, keys) if keys is not None else None
        if not keep:
            release()
        send(("view", (keyed or shown).params, keyed or shown))
        if keyed is not None:
            send(("keys", shown.ref, keys))
        if not viewed and catch_up and not catching_up and shown.error is None:
            # what is stored, sent while the app still starts (drawn here on the other core); a view
            # sent from inside a catch-up comes when the app waits for it, and it draws its own
            _draw_first_page(store, keyed or shown, layout, terminal, send)
        if not viewed:
            if catch_up:                     # the helper process (read in a thread, the app resumes it)
                startup.resume()             # the collector the CLI paused, for a catch-up of any length
            if hasattr(os, "nice"):
                os.nice(5)    # the rest of the catch-up yields to the screen starting on the other core
        viewed = True
        if keyed is None and shown.error is None:
            # a big run's list (a scan of every stored row) follows its view:
            # the view that knows the keys (the page count; no second read in the app), then the keys
            keys = keys if keys is not None else key_list(store, shown.ref)
            keyed = with_keys(shown, keys) or build_view(store, replace(params, all_keys=tuple(keys)))
            send(("view", keyed.params, keyed))
            send(("keys", shown.ref, keys))
        elif shown.error is not None:
            send(("keys", shown.ref, None))

    catching_up = False
    if plan[0] is not None or not local:
        view()     # what is stored, at once; the file is caught up after
    if local:
        catching_up = True
        changed = _catch_up(store, local, send, first=None if viewed else view)
        if changed or not viewed:
            if params.ref is None and changed:
                # the app shows the run the "changed" names (tui/app.py on_store_changed): read that view
                params = replace(params, ref=changed[-1].get("uid") or changed[-1].get("run"), page=0)
            view()                               # the view after the catch-up, then what changed
            send(("changed", changed))
    elif not viewed:
        view()


def _draw_first_page(store: Store, view: View, layout: settings.Layout, terminal: tuple[int, int], send) -> None:
    """`send` the frames of `view`'s first page, drawn here while the app imports Textual and lays
    its screen out (in the app they would take the CPU it starts on, just before the first chart).
    Sized for the page the app will lay out on `terminal` (`frames.page_size_guess`), drawn with the
    choices it starts with and in stand-in colours (the theme is Textual's): `FirstRead.take_frames`
    hands them to the first load when all of that holds, recoloured; else the app draws its own."""
    from marinctl.tui import frames as F
    from marinctl.tui.paint import ChartState, cursor_values, page_frames

    send(("drawing",))
    try:
        state = ChartState(logy_keys=frozenset(layout.logy))
        page = F.page_size_guess(terminal, layout)
        values = cursor_values(store, view, state, wait=False)
        job = {"state": state, "theme": F.stand_in_theme(), "page": page, "system": None, "shown": {},
               "figures": F.Figures(), "layout": None, "sizes": {}}
        frames = page_frames(view, job, values)
        drawn = {f.token[0] for f in frames.values()}
        panels = {p.key: p for p in view.panels if id(p) in drawn}
    except Exception:  # noqa: BLE001 — the app draws them itself
        send(("frames", None))
        return
    send(("frames", {"params": view.params, "state": state, "page": page, "values": values, "panels": panels,
                     "frames": frames}))


def _file_bytes(paths: list[str]) -> int:
    from marinctl.sync.targets import local_bytes

    try:
        return local_bytes(paths)
    except OSError:
        return HOLD_BYTES + 1


def _catch_up(store: Store, paths: list[str], send, *, first) -> list[dict]:
    """Read the local targets' files to their current end under their sync locks; `first()` (if
    any) once the first window has landed, ("changed", []) at most every PROGRESS_EVERY_S after
    it, ("progress"/"warn", text) for the header. Returns the sync dicts of the runs that changed."""
    from marinctl.errors import MarinctlError
    from marinctl.store import synclock
    from marinctl.sync.local import sync_files

    said = [time.monotonic(), False]

    def progress(run: str, done: int, total: int) -> None:
        send(("progress", f"reading {run}: {done * 100 // max(1, total)}%"))
        if not said[1]:
            said[1] = True
            if first is not None:
                first()
        elif time.monotonic() - said[0] >= PROGRESS_EVERY_S:
            send(("changed", []))
        said[0] = time.monotonic()

    changed = []
    try:
        with synclock.acquire_all(store, paths, owner="watch"):
            for path in paths:
                results = sync_files(store, path, progress=progress, warn=lambda text: send(("warn", text)))
                changed += [r.as_json() for r in results if r.run is not None and r.changed]
    except MarinctlError:
        pass     # another marinctl syncs it, or nothing readable yet: the app's follower says so
    return changed


def send_message(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]
