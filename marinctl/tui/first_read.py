"""The first view of `watch TARGET`, planned and read in a helper process while Textual starts.

Before the first chart a watch spends its CPU on two independent things: importing Textual and
laying the screen out, and planning TARGET against the store and reading the first view (DuckDB
and NumPy). In one interpreter they take turns on the GIL, so the second waited on the first.
`FirstRead` forks before either: the helper (the CLI's own process image, so no interpreter
start; its work is tui/first_read_work.py) plans TARGET and reads the view on another core, and sends both
back pickled through a pipe, while this process imports Textual. `plan()` then answers at once, a
bad TARGET raising the helper's error (exit 2 before the screen opens), and the first load
worker takes the view when the parameters it was read with are still the ones asked for (else
it reads afresh). The run's key list (for paging and the filter) comes with the view of a short
run; a long run's view is sent first, then the same view knowing the keys, then the list itself
for the app's keys worker: listing scans every stored row, and the first chart must not wait
for it. A local run is caught up by the helper; the app's follower starts tailing when the
helper is gone, from where it stopped.

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
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

from marinctl.tui.first_read_work import plan_and_read, send_message
from marinctl.tui.options import Plan

if TYPE_CHECKING:
    from marinctl.views.watch_view import View, ViewParams
    from marinctl.store import Store

Work = Callable[..., None]     # (store, target, terminal, send, *, catch_up)
HELPER_WAIT_S = 60.0     # a plan or first view later than this (the store's lock timeout is 15 s): do it here
FRAMES_WAIT_S = 0.5      # the first load waits this long at most for frames the helper is drawing


def terminal_size() -> tuple[int, int]:
    """(columns, lines) of the terminal the app will fill."""
    size = shutil.get_terminal_size((120, 40))
    return size.columns, size.lines



class FirstRead:
    """TARGET's plan and first view, computed from now on beside this process."""

    def __init__(self, store: Store, target: str | None, *, work: Work = plan_and_read) -> None:
        """`work`: what the helper (or the thread) runs, `plan_and_read`'s signature; a test hands in
        one that is noisy or never answers."""
        self._store, self._target, self._work = store, target, work
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
                self._work(self._store, self._target, terminal, lambda m: send_message(w, m), catch_up=True)
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
            self._work(self._store, self._target, terminal_size(), keep, catch_up=False)
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


def _messages(pipe):
    while True:
        head = pipe.read(8)
        if len(head) < 8:
            return
        data = pipe.read(struct.unpack("<Q", head)[0])
        yield pickle.loads(data)
