"""The local DuckDB mirror: one file, opened briefly per unit of work.

DuckDB lets one process write a file, or many processes read it, never both. So
marinctl never holds the file open for long: every reader and writer goes through
`Store.connect()`, which opens, does its work, and closes — retrying for a few seconds
while another process (a `watch` syncing, a `sync` in another terminal) holds the lock.
That is what lets `marinctl explain` run in one terminal while `watch` syncs in another.

A team's mirror is a DuckLake instead (`--store`, store/lake.py): `LakeStore` answers the same
interface — `connect`, `transaction`, `held`, `ensure_schema`, and what the layers above ask of
a store without naming a file (`describe`, `exists`, `stamp`, `parts_root`, `settings_key`,
`command_options`, the sync locks in store/synclock.py) — so nothing above the store knows which
it has. `open_store()` picks one from the command line's options.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from marinctl.errors import StoreLocked
from marinctl.store import schema
from marinctl.store.engine import duckdb

__all__ = ["Connection", "Store", "open_store", "first", "glance"]

# What store functions take and return; other layers name it in type hints without importing duckdb.
Connection = duckdb.DuckDBPyConnection

_LOCK_WORDS = ("lock", "Conflicting", "being used")
# New files are written in a storage format DuckDB 1.4 and later read: a file the default install
# (a newer DuckDB) makes stays readable by the DuckDB `marinctl[team]` pins, so a laptop's mirror
# can be copied into a team's lake
COMPATIBLE = "v1.4.0"
_NEWER = ("newer version", "storage version", "not supported by this version")


def first(cursor) -> tuple | None:
    """The first row of a result, read to the end: DuckDB (2.x) refuses to register a table
    on a connection whose last result was left half-fetched, as `fetchone()` leaves it."""
    rows = cursor.fetchall()
    return rows[0] if rows else None


def _is_lock_error(exc: Exception) -> bool:
    return isinstance(exc, (duckdb.IOException, duckdb.ConnectionException)) and any(
        w in str(exc) for w in _LOCK_WORDS
    )


class Store:
    """The embedded store: one DuckDB file."""

    kind = "embedded"

    def __init__(self, path: Path | str, *, lock_timeout: float = 15.0):
        self.path = Path(path)
        self.lock_timeout = lock_timeout
        self._migrated = False
        self._mutex = threading.Lock()

    # -- what the layers above ask of any store --------------------------------------------
    def __repr__(self) -> str:
        return f"<Store {self.path}>"

    def describe(self) -> str:
        """The store as messages name it."""
        return str(self.path)

    @property
    def settings_key(self) -> str:
        """What watch's remembered layout is filed under: the file's real path."""
        return str(self.path.resolve())

    def command_options(self) -> tuple[list[str], dict[str, str]]:
        """(global options, environment) a child `marinctl` process needs to open this store."""
        return ["--db", str(self.path)], {}

    def exists(self) -> bool:
        return self.path.exists()

    def parts_root(self) -> Path:
        """The folder W&B's exported parts are kept in: `marinctl.duckdb` → `marinctl.history/`."""
        return self.path.with_name(self.path.stem + ".history")

    def staging(self, home: Path) -> Path:
        """Where downloaded parts land before they are registered (the parts folder itself)."""
        return self.parts_root()

    def stamp(self) -> tuple:
        """A cheap data version, read without opening the file: the sizes and mtimes of the file and
        its WAL (any write moves one)."""
        out = []
        for p in (self.path, Path(f"{self.path}.wal")):
            try:
                st = p.stat()
                out.append((st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    @contextmanager
    def read_only(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of its own that DuckDB refuses every write on: what `marinctl sql` runs a
        user's text on."""
        from marinctl.errors import RuntimeFailure

        self.ensure_schema()
        try:
            con = duckdb.connect(str(self.path), read_only=True)
        except duckdb.Error as exc:
            raise RuntimeFailure(f"cannot open the store read-only: {exc}", "retry in a moment") from None
        try:
            con.execute("SET enable_progress_bar = false")
            yield con
        finally:
            con.close()

    @contextmanager
    def copying(self) -> Iterator[tuple[duckdb.DuckDBPyConnection, object]]:
        """A copy's destination: a connection of its own and `unit()`, one transaction each."""
        self.ensure_schema()
        con = self._open(read_only=False)
        con.execute("SET enable_progress_bar = false")

        @contextmanager
        def unit() -> Iterator[None]:
            con.execute("BEGIN TRANSACTION")
            try:
                yield
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

        try:
            yield con, unit
        finally:
            con.close()

    def attach_as(self, con: duckdb.DuckDBPyConnection, alias: str) -> None:
        """Attach this file read-only on `con` as `alias` (a copy's source)."""
        from marinctl.errors import RuntimeFailure

        path = str(self.path).replace("'", "''")
        try:
            con.execute(f"ATTACH '{path}' AS {alias} (READ_ONLY)")
        except duckdb.Error as exc:
            if any(w in str(exc) for w in _NEWER):
                raise newer_file(self.path, exc) from None
            if _is_lock_error(exc):
                raise StoreLocked(f"the store {self.path} is locked by another marinctl process",
                                  "wait for it to finish, or stop the `marinctl watch`/`sync` that holds it") from None
            raise RuntimeFailure(f"cannot read {self.path} as a marinctl store: {str(exc).splitlines()[0]}",
                                 "point store copy at a marinctl store file") from None

    # -- connections -------------------------------------------------------------------
    def _create(self) -> None:
        """Make the file in the storage format every supported DuckDB reads (COMPATIBLE)."""
        try:
            duckdb.connect(str(self.path), config={"storage_compatibility_version": COMPATIBLE}).close()
        except duckdb.Error:
            pass     # another process made it meanwhile, or a DuckDB without that setting: opened as it is

    def _open(self, read_only: bool, lock_timeout: float | None = None) -> duckdb.DuckDBPyConnection:
        deadline = time.monotonic() + (self.lock_timeout if lock_timeout is None else lock_timeout)
        delay = 0.02
        set_aside = False
        if not read_only and not self.path.exists():
            self._create()
        while True:
            try:
                return duckdb.connect(str(self.path), read_only=read_only)
            except duckdb.InternalException as exc:
                # a process killed between the migrations' commit and their checkpoint (schema.py)
                if set_aside or "replaying WAL" not in str(exc) or not schema.set_aside_interrupted_migration(self.path):
                    raise
                set_aside = True
                continue
            except duckdb.ConnectionException as exc:
                # This process already holds the file read-write: share that instance.
                if "different configuration" in str(exc):
                    if read_only:
                        read_only = False       # the read-write instance serves this read: again, at once
                        continue
                    # Another thread of this process is reading read-only: wait for it to close.
                    last = exc
                elif not _is_lock_error(exc):
                    raise
                else:
                    last = exc
            except duckdb.IOException as exc:
                if any(w in str(exc) for w in _NEWER):
                    raise newer_file(self.path, exc) from None
                if not _is_lock_error(exc):
                    raise
                last = exc
            except duckdb.BinderException as exc:
                # Another thread of this process is closing the file's last connection (its database
                # instance is being torn down) while this one opens it: open again in a moment.
                if "file handle conflict" not in str(exc):
                    raise
                last = exc
            if time.monotonic() >= deadline:
                raise StoreLocked(
                    f"the store {self.path} is locked by another marinctl process ({_holder(last)})",
                    "wait for it to finish, or stop the `marinctl watch`/`sync` that holds it",
                )
            time.sleep(delay)
            delay = min(delay * 2, 0.25)

    def ensure_schema(self, reader: duckdb.DuckDBPyConnection | None = None) -> None:
        """Migrate the file to the latest schema once per process; `reader`, a read-only
        connection the caller already holds, answers the version check (one open, not two)."""
        if self._migrated:
            return
        with self._mutex:
            if self._migrated:
                return
            if self.path.exists():
                con = reader or self._open(read_only=True)
                try:
                    current = schema.current_version(con)
                finally:
                    if reader is None:
                        con.close()
                if current >= schema.latest_version():
                    self._migrated = True
                    return
                if reader is not None:
                    # an older file: the caller closes its read-only connection first, then asks
                    # again (DuckDB opens a file one way per process: read-write would wait forever)
                    return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = self._open(read_only=False)
            try:
                schema.migrate(con)
            finally:
                con.close()
            self._migrated = True

    def _migrate_with(self, con: duckdb.DuckDBPyConnection) -> None:
        """Migrate the file to the latest schema on a read-write connection (once per process)."""
        with self._mutex:
            if not self._migrated:
                if schema.current_version(con) < schema.latest_version():
                    schema.migrate(con)
                self._migrated = True

    @contextmanager
    def connect(self, *, write: bool = False, lock_timeout: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A short-lived connection. Writers should wrap their work in one transaction.
        `lock_timeout`: how long a read waits for another process's hold (default: the store's)."""
        con = None
        if write and not self._migrated:
            # the version is checked (and the file migrated) on the writer's own connection: one
            # open, where a separate check would build a second database instance
            self.path.parent.mkdir(parents=True, exist_ok=True)
            con = self._open(read_only=False, lock_timeout=lock_timeout)
            try:
                self._migrate_with(con)
            except BaseException:
                con.close()
                raise
        elif not write and not self._migrated and self.path.exists():
            con = self._open(read_only=True, lock_timeout=lock_timeout)
            try:
                self.ensure_schema(reader=con)
            except BaseException:
                con.close()
                raise
            if not self._migrated:      # an older file: migrated by a writer, then read afresh
                con.close()
                con = None
        self.ensure_schema()
        con = con or self._open(read_only=not write, lock_timeout=lock_timeout)
        # DuckDB draws a progress bar on stdout for long queries; it would corrupt --json output.
        con.execute("SET enable_progress_bar = false")
        if write:
            # Bound a big sync's memory: DuckDB spills sorts to disk past this (default 80% of RAM).
            con.execute(f"SET memory_limit = '{os.environ.get('MARINCTL_DB_MEMORY', '512MB')}'")
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A write connection inside BEGIN/COMMIT: all of it lands, or none of it."""
        with self.connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @contextmanager
    def held(self) -> Iterator[None]:
        """Keep the store open read-write meanwhile, for a burst of short connections in this process.

        DuckDB serves a process's connections to one file from one database instance: the first
        open builds it (the catalog, the thread pool) and the last close checkpoints and tears it
        down; a `connect`/`transaction` inside a held instance costs a small fraction of that
        (bench/NOTES.md, "Start-up costs"). Other processes cannot open the file meanwhile (they wait, up to lock_timeout),
        so hold it for bursts of a few seconds at most (a watch's first view, the catch-up of a
        small run), never for a long sync. A store this process may only read is simply not held.
        """
        with ExitStack() as stack:
            try:
                stack.enter_context(self.connect(write=True))
            except duckdb.Error:
                pass
            yield


def newer_file(path: Path, exc: Exception):
    """The one line for a file a newer DuckDB wrote in its own format, which this one cannot read."""
    from marinctl.errors import RuntimeFailure

    version = getattr(duckdb, "__version__", "?")
    return RuntimeFailure(
        f"the store {path} was written by a newer DuckDB than this install's {version}",
        f"with the default install (pip install marinctl), copy it into a file both read:"
        f" marinctl store copy {path} {path.with_name(path.stem + '-compatible.duckdb')}")


def _holder(exc: Exception) -> str:
    msg = str(exc)
    if "PID" in msg:
        return "PID" + msg.split("PID", 1)[1].split(")")[0]
    if "different configuration" in msg:     # no other process: this one holds it read-only
        return f"this process (PID {os.getpid()}) reads it read-only"
    return "file lock held"


@contextmanager
def glance(path: Path | str) -> Iterator[duckdb.DuckDBPyConnection | None]:
    """A read-only connection for a look that must never wait or write (shell completion), or
    None: no file yet, another process holding it read-write (a sync), or a schema older than
    this code (a migration is a write, left to the next command)."""
    if not Path(path).is_file():
        yield None
        return
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error:
        yield None
        return
    try:
        try:    # the migrations table read directly: information_schema's views cost more than the look
            version = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]
        except duckdb.Error:
            version = 0
        yield con if version >= schema.latest_version() else None
    finally:
        con.close()


_LAKES: dict[tuple[str, str | None], object] = {}


def open_store(path: Path | str | None = None):
    """The store this command works on: the DuckLake `--store`/`$MARINCTL_STORE` names (one
    `LakeStore` per lake in a process), else the embedded file (`path`, else the home's)."""
    from marinctl import paths

    if path is None and (url := paths.store_url()):
        return lake_store(url, paths.store_data())
    return Store(path or paths.db_path())


def lake_store(url: str, data: str | None = None):
    """The `LakeStore` of a DuckLake URL (and data path), made once per process."""
    from marinctl.store import location
    from marinctl.store.lake import LakeStore

    lake = location.parse(url, data)
    key = (lake.url, lake.data)
    found = _LAKES.get(key)
    if found is None:
        found = _LAKES[key] = LakeStore(lake)
    return found
