"""The first view of `watch TARGET`, planned and read in a helper process while Textual starts.

Before the first chart a watch spends its CPU on two independent things: importing Textual and
laying the screen out (~0.55 s), and planning TARGET against the store and reading the first
view (~0.15 s, DuckDB and NumPy). In one interpreter they take turns on the GIL, so the second
waited on the first. `start` forks before either: the helper (the CLI's own process image, so no
interpreter start) plans TARGET and reads the view on another core, and sends both back
pickled through a pipe, while this process imports Textual. `plan()` then answers at once, a
bad TARGET raising the helper's error (exit 2 before the screen opens), and the first load
worker takes the view when the parameters it was read with are still the ones asked for (else
it reads afresh). The run's key list (for paging and the filter) comes with the view of a short
run; a long run's view is sent first, then the same view knowing the keys, then the list itself
for the app's keys worker: listing scans every stored row, and at hero scale the first chart
used to wait for it (4 s in a terminal).

A local run (a `wandb/` dir, a `.wandb` file) is also caught up there: the helper takes the
target's sync lock, reads the file window by window (the sync pipeline's `sync_files`, each
window committed with its position) and says "changed" at most every PROGRESS_EVERY_S and once
at the end, then exits. The first view is what is stored, sent before the file is read; for a
run never synced, as soon as the first window has landed.
The app's follower starts tailing when the helper is gone, from where it stopped. So the
decoding (and pyarrow, ~35 MiB) stays in a process that ends, on the other core. The helper keeps
one DuckDB instance open from the plan to the first view, and to the end of a catch-up of up to
HOLD_BYTES (each open builds one: ~35 ms; a 5 MB run read in four windows opened it eleven times);
meanwhile the app's readout does not wait for the store (tui/loader.py `_store_free`).

Where there is no `fork`, or this process already runs other threads (a forked copy of a lock
another thread holds stays locked forever: DuckDB's, the allocator's, the import lock), or the
helper fails or does not answer within HELPER_WAIT_S, planning and the first read run here and
the follower catches up as before. The helper never touches the terminal; quitting the app
stops it (a SIGTERM: every committed window stays, the follower resumes from it next time).
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import struct
import sys
import threading
import time
from contextlib import ExitStack
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marinctl.views.watch_view import View, ViewParams
    from marinctl.store import Store
    from marinctl.tui import settings

Plan = tuple[str | None, list[str]]
PROGRESS_EVERY_S = 2.0   # after the first view, how often the helper says more has landed (as tui/live.py)
HOLD_BYTES = 32 << 20    # a catch-up of files up to this size (~3 s of decoding) keeps the store open throughout
HELPER_WAIT_S = 60.0     # a plan or first view later than this (the store's lock timeout is 15 s): do it here
# a run shorter than this is sent with its key list (listing scans its stored rows, ~2.6 ns each:
# 40 ms for 20k steps × 750 keys); a longer one's list follows its view (0.2 s at 389k steps × 746 keys)
KEYS_INLINE_STEPS = 20_000
FRAMES_WAIT_S = 0.5      # the first load waits this long at most for frames the helper is drawing (~8 ms each)


def params_for(layout: settings.Layout, ref: str | None) -> ViewParams:
    """The view a remembered layout asks for, of run `ref` (before the screen's size is known)."""
    from marinctl.views.watch_view import ViewParams

    return ViewParams(ref=ref, cols=layout.cols, rows=layout.rows, pattern=layout.pattern,
                      collapsed=frozenset(layout.collapsed), smoothing=layout.smoothing, xmode=layout.xmode,
                      system=layout.system_pane)


def bucket_guess(width: int) -> int:
    """Buckets per chart for a terminal `width` columns wide (the sidebar and margins take ~34)."""
    return int(max(80, min(600, max(60, width - 34))))


def terminal_size() -> tuple[int, int]:
    """(columns, lines) of the terminal the app will fill."""
    size = shutil.get_terminal_size((120, 40))
    return size.columns, size.lines


def _plan_and_read(store: Store, target: str | None, terminal: tuple[int, int], send, *, catch_up: bool) -> None:
    """Plan TARGET, `send` the plan (or the error), catch a local run up and draw the first page
    (when `catch_up`: in the helper process), `send` the view."""
    # one DuckDB instance from the plan to the first view (each open of the file builds one: ~35 ms)
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
    from marinctl.tui import settings, startup

    try:
        plan = plan_watch(store, target)
    except MarinctlError as exc:
        release()
        send(("error", type(exc).__name__, exc.message, exc.hint))
        return
    send(("plan", plan))
    layout = settings.load(store.path)
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
            # a big run's list (seconds at hero scale, a scan of every stored row) follows its view:
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
    its screen out (in the app they took ~60–150 ms of the CPU it starts on, before the first chart).
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
        with synclock.acquire_all(store.path, paths, owner="watch"):
            for path in paths:
                results = sync_files(store, path, progress=progress, warn=lambda text: send(("warn", text)))
                changed += [r.as_json() for r in results if r.run is not None and r.changed]
    except MarinctlError:
        pass     # another marinctl syncs it, or nothing readable yet: the app's follower says so
    return changed


class FirstRead:
    """TARGET's plan and first view, computed from now on beside this process."""

    def __init__(self, store: Store, target: str | None) -> None:
        self._store, self._target = store, target
        self._planned = threading.Event()
        self._viewed = threading.Event()
        self._answer: tuple | None = None          # ("plan", plan) or ("error", kind, message, hint)
        self._params: ViewParams | None = None
        self._view: View | None = None
        self._fresh = False                        # `_view` arrived after the last one handed out
        self._asked = False
        self._keys: tuple[str | None, list[str]] | None = None   # (ref, its keys) sent with the newest view
        self._keyed = threading.Event()
        self._keys_asked = False
        self._drawing = threading.Event()          # the helper draws the first page's frames
        self._drawn = threading.Event()            # ... and has sent them (or said it could not)
        self._frames: dict | None = None
        self._retired = False
        self._lock = threading.Lock()
        self._done = threading.Event()             # the helper has exited (the follower may take the lock)
        self._listener = None
        self._pending: list[tuple] = []            # ("changed", runs) / ("progress", text) / ("warn", text)
        self._pid = self._fork(terminal_size()) if _may_fork() else None
        if self._pid is None:
            threading.Thread(target=self._here, name="marinctl-first-read", daemon=True).start()

    # -- the helper process ----------------------------------------------------------------
    def _fork(self, terminal: tuple[int, int]) -> int | None:
        r, w = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(r)
            os.close(w)
            return None
        if pid == 0:                               # the helper: never returns
            os.close(r)
            try:
                # the terminal belongs to the app: a stray warning here would land on its screen
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                sys.stdout = sys.stderr = open(os.devnull, "w")
                _plan_and_read(self._store, self._target, terminal, lambda m: _send(w, m), catch_up=True)
            except BaseException:  # noqa: BLE001 — the parent then does the work itself
                pass
            finally:
                os._exit(0)
        os.close(w)
        threading.Thread(target=self._receive, args=(r, pid), name="marinctl-first-read", daemon=True).start()
        return pid

    def _receive(self, r: int, pid: int) -> None:
        """Take the helper's messages as they come; reap it at the end."""
        try:
            with os.fdopen(r, "rb") as pipe:
                for message in _messages(pipe):
                    if message[0] in ("plan", "error"):
                        self._answer = message
                        self._planned.set()
                    elif message[0] in ("view", "keys"):
                        self._keep(message)
                    elif message[0] == "drawing":
                        self._drawing.set()
                    elif message[0] == "frames":
                        with self._lock:
                            self._frames = message[1]
                        self._drawn.set()
                    else:
                        self._tell(message)
        except Exception:  # noqa: BLE001 — a broken helper: whatever did not arrive is done here
            pass
        finally:
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            self._ended()

    def _keep(self, message: tuple) -> None:
        """A view or a key list the helper read: kept for `take` / `take_keys`."""
        with self._lock:
            if message[0] == "view":
                self._params, self._view, self._fresh = message[1], message[2], True
            else:
                self._keys = (message[1], message[2])
        (self._viewed if message[0] == "view" else self._keyed).set()

    def _ended(self) -> None:
        for event in (self._planned, self._viewed, self._keyed, self._drawn, self._done):
            event.set()

    # -- no fork: the same work in a thread ------------------------------------------------
    def _here(self) -> None:
        def keep(message: tuple) -> None:
            if message[0] in ("view", "keys"):
                self._keep(message)
            else:
                self._answer = message
                self._planned.set()

        try:
            _plan_and_read(self._store, self._target, terminal_size(), keep, catch_up=False)
        except Exception:  # noqa: BLE001 — `plan()` plans again and reports it; the first load reads afresh
            pass
        finally:
            self._ended()

    def _tell(self, message: tuple) -> None:
        with self._lock:
            listener = self._listener
            if listener is None:
                self._pending.append(message)
                return
        listener(message)

    # -- what the CLI and the app ask ----------------------------------------------------------
    def listen(self, listener) -> None:
        """Hand the helper's ("changed", runs), ("progress", text) and ("warn", text) to `listener`
        (called on the receiving thread), those that came before included."""
        with self._lock:
            self._listener, pending, self._pending = listener, self._pending, []
        for message in pending:
            listener(message)

    def wait_done(self, timeout: float | None = None) -> bool:
        """Wait for the helper to exit (its sync lock is then free)."""
        return self._done.wait(timeout)

    def stop(self) -> None:
        """Stop the helper if it still runs (the app is quitting, or the helper is not answering)."""
        if self._pid is not None and not self._done.is_set():
            for sig in (signal.SIGTERM, signal.SIGKILL):      # SIGKILL: one stuck where SIGTERM is not heard
                try:
                    os.kill(self._pid, sig)
                except ProcessLookupError:
                    pass
                if self._done.wait(5):
                    break

    def plan(self) -> Plan:
        """TARGET's plan (waits for it); a bad TARGET raises its UserError (exit 2)."""
        from marinctl import errors

        if not self._planned.wait(HELPER_WAIT_S):
            self.stop()                            # stuck: whatever it holds goes with it
        answer = self._answer
        if answer is None:                         # the helper died or hung before planning: plan here
            from marinctl.sync import plan_watch

            return plan_watch(self._store, self._target)
        if answer[0] == "error":
            kind = getattr(errors, answer[1], errors.MarinctlError)
            raise kind(answer[2], answer[3])
        return answer[1]

    def take(self, params: ViewParams) -> View | None:
        """The newest view the helper read, if it answers `params` (`_answers`) and was not handed
        out before; else None (the caller reads afresh). The first call waits for a view."""
        if not self._asked:
            self._asked = True
            if not self._viewed.wait(HELPER_WAIT_S):
                self.stop()
        with self._lock:
            if self._retired or not self._fresh or not _answers(params, self._params):
                return None
            self._fresh = False
            return self._view

    def take_frames(self, view: View, job: dict[str, Any]) -> tuple[dict, dict] | None:
        """(cursor values, frames by chart slot) of the first page the helper drew, recoloured in
        the app's theme, when they were drawn from `view`'s very data for the page size and the
        choices `job` holds (tui/loader.py `paint_job`); else None. Handed out once; waits at most
        FRAMES_WAIT_S for frames the helper is still drawing."""
        from marinctl.tui.frames import Frame, chart_slot, recoloured

        if self._drawing.is_set():
            self._drawn.wait(FRAMES_WAIT_S)
        with self._lock:
            drawn, self._frames = self._frames, None
        if drawn is None or view.error or not _answers(view.params, drawn["params"]) \
                or drawn["state"] != job["state"] or tuple(drawn["page"]) != tuple(job["page"]):
            return None
        panels = {p.key: p for p in view.panels}
        if any(k not in panels or not panels[k].same_as(p) for k, p in drawn["panels"].items()):
            return None
        keys = {chart_slot(s, k): k for s in view.sections for k in s.keys}
        frames = {}
        for slot, f in drawn["frames"].items():
            if keys.get(slot) in drawn["panels"]:
                spec = replace(f.token[1], theme=job["theme"])
                frames[slot] = Frame(f.size, (id(panels[keys[slot]]), spec), recoloured(f.text, job["theme"]), f.plot_cols)
        return drawn["values"], frames

    def take_keys(self, ref: str | None) -> list[str] | None:
        """The key list the helper sent with its newest view, if it is run `ref`'s and was not
        handed out before; else None (the caller lists them). The first call waits for one."""
        if not self._keys_asked:
            self._keys_asked = True
            self._keyed.wait(HELPER_WAIT_S)        # a helper stuck is stopped by `plan` / `take`, not here
        with self._lock:
            keys, self._keys = self._keys, None
        return keys[1] if keys is not None and keys[0] == ref else None

    def retire(self) -> None:
        """Hand out no more views: someone else (the app's follower) writes the store from now on."""
        with self._lock:
            self._retired = True


def _may_fork() -> bool:
    """Fork only a process with no other thread: in the child, a lock another thread held at the
    fork stays held for good (the CLI forks before it starts any; a test runner or a library
    caller may have many)."""
    if not hasattr(os, "fork"):
        return False
    try:
        return len(os.listdir("/proc/self/task")) == 1     # native threads too (DuckDB's, BLAS's)
    except OSError:
        return threading.active_count() == 1


def _answers(asked: ViewParams, read: ViewParams | None) -> bool:
    """Does a view read with `read` answer `asked`? The helper lists the run's keys itself, so its
    key list (`all_keys`) may be newer than the app's; the rest must be the same."""
    return read is not None and replace(asked, all_keys=None) == replace(read, all_keys=None) and (
        asked.all_keys is None or read.all_keys is not None)


def _send(fd: int, message: Any) -> None:
    data = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _messages(pipe):
    while True:
        head = pipe.read(8)
        if len(head) < 8:
            return
        data = pipe.read(struct.unpack("<Q", head)[0])
        yield pickle.loads(data)
