"""PostgreSQL advisory locks on a session of marinctl's own: the team store's locks between machines.

A DuckLake on a PostgreSQL catalog is written by processes on many machines, and DuckLake
settles concurrent commits only where they delete from the same table: two inserts of the
same new run, key or alert would both commit. So every process that writes a lake takes the
lake's writer lock for each write transaction, and a sync holds a lock per target for its
whole run; both are PostgreSQL's session advisory locks, on one connection per process kept
for them. The server drops a session's locks the moment its socket closes, so a killed
process (SIGKILL included) never leaves one behind.

A session's advisory locks are re-entrant, so the process keeps its own count: the writer
lock is also a thread lock, and a target this process already syncs is refused here as it
would be on another machine. Each session names itself (`application_name`): who holds a
lock is read back from `pg_stat_activity` for the message another process prints.
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from contextlib import contextmanager
from typing import Iterator

from marinctl.errors import StoreLocked, StoreUnavailable, SyncBusy

__all__ = ["Session", "session_for"]

_SESSIONS: dict[str, "Session"] = {}
_SESSIONS_LOCK = threading.Lock()


def key_of(name: str) -> int:
    """A lock's 64-bit key (signed, as PostgreSQL takes it)."""
    return int.from_bytes(hashlib.sha1(f"marinctl:{name}".encode()).digest()[:8], "big", signed=True)


class Session:
    """One libpq connection of this process to the catalog's server, holding its advisory locks."""

    def __init__(self, conninfo: str, shown: str):
        self.conninfo = conninfo
        self.shown = shown                  # the catalog as messages name it (no password)
        self.me = f"marinctl pid {os.getpid()} on {socket.gethostname()}"
        self._con = None
        self._io = threading.Lock()         # one statement at a time on the connection
        self._writer = threading.RLock()    # one writing thread at a time in this process
        self._held: set[int] = set()        # sync locks this process holds
        self._state = threading.Lock()      # guards `_held` with the lock taken or given back

    # -- the connection ------------------------------------------------------------------------
    def _connection(self):
        import psycopg

        if self._con is None or self._con.closed or self._con.broken:
            try:
                # keepalives both ways: a machine that vanishes without closing its socket (power, network)
                # has its locks dropped by the server within about a minute, not TCP's two hours
                con = psycopg.connect(self.conninfo, autocommit=True, application_name=self.me[:63],
                                      connect_timeout=10, keepalives=1, keepalives_idle=20, keepalives_interval=5,
                                      keepalives_count=3)
                con.execute("SET tcp_keepalives_idle = 20; SET tcp_keepalives_interval = 5;"
                            " SET tcp_keepalives_count = 3")
                self._con = con
            except psycopg.Error as exc:
                raise _unreachable(self.shown, exc) from None
        return self._con

    def _one(self, sql: str, params: tuple) -> object:
        import psycopg

        with self._io:
            try:
                row = self._connection().execute(sql, params).fetchone()
            except psycopg.OperationalError as exc:
                self._con = None
                raise _unreachable(self.shown, exc) from None
        return row[0] if row else None

    def _try(self, key: int) -> bool:
        return bool(self._one("SELECT pg_try_advisory_lock(%s)", (key,)))

    def _unlock(self, key: int) -> None:
        try:
            self._one("SELECT pg_advisory_unlock(%s)", (key,))
        except StoreUnavailable:
            pass        # the session is gone, and its locks with it

    def holder(self, key: int) -> str | None:
        """Who holds `key` (another session's `application_name`), None when nobody does."""
        hi, lo = (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF
        return self._one("SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a USING (pid)"
                         " WHERE l.locktype = 'advisory' AND l.classid::bigint = %s AND l.objid::bigint = %s"
                         " AND l.objsubid = 1 AND l.granted AND l.pid <> pg_backend_pid() LIMIT 1", (hi, lo))

    # -- the writer lock -----------------------------------------------------------------------
    @contextmanager
    def writing(self, timeout: float) -> Iterator[None]:
        """Hold the lake's writer lock (this thread of this process alone writes meanwhile)."""
        key = key_of("writer")
        deadline = time.monotonic() + timeout
        if not self._writer.acquire(timeout=max(0.0, timeout)):
            raise StoreLocked(f"the store {self.shown} is being written by another thread of this process",
                              "wait for it to finish")
        try:
            delay = 0.01
            while not self._try(key):
                if time.monotonic() >= deadline:
                    who = self.holder(key) or "another marinctl process"
                    raise StoreLocked(f"the store {self.shown} is locked by {who}",
                                      "wait for it to finish, or stop the `marinctl sync` that holds it")
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
            try:
                yield
            finally:
                self._unlock(key)
        finally:
            self._writer.release()

    # -- per-target sync locks -----------------------------------------------------------------
    @contextmanager
    def syncing(self, target: str, owner: str) -> Iterator[None]:
        """Hold the sync lock of `target`, or fail at once naming who holds it (as synclock does)."""
        key = key_of("sync:" + target.strip())
        with self._state:       # the held set and the lock are changed together
            if key in self._held or not self._try(key):
                who = "this process" if key in self._held else (self.holder(key) or "another marinctl process")
                raise SyncBusy(f"{who} is already syncing {target}",
                                     "let it finish (a running `marinctl watch` keeps it in sync), or stop it first")
            self._held.add(key)
        try:
            yield
        finally:
            with self._state:
                self._held.discard(key)
                self._unlock(key)

    def close(self) -> None:
        with self._io:
            if self._con is not None:
                self._con.close()
                self._con = None


def session_for(conninfo: str, shown: str) -> Session:
    """This process's lock session for a catalog (one per catalog, made on first use)."""
    with _SESSIONS_LOCK:
        found = _SESSIONS.get(conninfo)
        if found is None or found.me != f"marinctl pid {os.getpid()} on {socket.gethostname()}":
            found = _SESSIONS[conninfo] = Session(conninfo, shown)   # a forked child makes its own
        return found


def _unreachable(shown: str, exc: Exception) -> StoreUnavailable:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return StoreUnavailable(f"the store's catalog {shown} cannot be reached: {text}",
                            "check that its PostgreSQL server is up and reachable, then run the command again")
