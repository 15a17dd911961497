"""Threads joined before the interpreter exits, within a bound.

A thread still inside DuckDB or Arrow when Python finalises can abort the process (exit -6,
"terminate called after throwing an instance of ''"): finalisation ends such a thread by forced
unwinding, which C++ frames do not let through. So a command's threads are told to stop (each
owner's own event) and then joined here, for at most JOIN_S in all: `JoinedExecutor` is the
event loop's executor in `watch` (Textual's thread workers), whose shutdown waits that long at
most instead of for ever, and the `marinctl` process joins every other thread (`join_others`)
before it exits, ending with `os._exit` when one still runs at the bound (cli/__init__.py `run`;
its transaction is lost whole, as when the process is killed: a sync resumes from its last commit).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

JOIN_S = 5.0      # the longest a quit waits for a thread to finish what it is in (a sync window, an alert pass)


def join_others(timeout: float = JOIN_S) -> list[str]:
    """Join every thread but this one and the main one, for `timeout` seconds in all; the names of
    those still running."""
    deadline = time.monotonic() + timeout
    me, main = threading.current_thread(), threading.main_thread()
    for thread in threading.enumerate():
        if thread not in (me, main) and not isinstance(thread, threading._DummyThread):   # noqa: SLF001
            thread.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in threading.enumerate() if t not in (me, main) and t.is_alive()
            and not isinstance(t, threading._DummyThread)]                                  # noqa: SLF001


class JoinedExecutor(ThreadPoolExecutor):
    """The default executor of an event loop whose thread workers are joined at its end, for
    JOIN_S at most (asyncio's own waits for them for ever)."""

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        super().shutdown(wait=False, cancel_futures=True)
        if wait:
            deadline = time.monotonic() + JOIN_S
            for thread in list(self._threads):
                thread.join(max(0.0, deadline - time.monotonic()))
