"""`LakeStore`: the store on a DuckLake — a catalog in PostgreSQL (or a `.ducklake` file), data as
Parquet in a shared folder or on S3 — with the embedded `Store`'s interface, so every layer above
works on either unchanged.

Connections. Loading the extensions costs a few hundred milliseconds, so a process builds one
in-memory DuckDB with them (and the lake attached) on first use and hands each `connect()` a
cursor of it: a cursor is its own transaction context. A read runs in one transaction, so it
sees one committed snapshot throughout, never half of a sync's unit; a later read sees newer
snapshots. A `.ducklake` file catalog is a DuckDB file, which one process may write at a time
(like the embedded store), so it is attached only while some `connect()` uses it.

Writes. DuckLake turns concurrent commits away only where both delete from one table; two
inserts of the same new run, key or alert would both land. So a write transaction holds the
lake's writer lock from before its first read to after its commit (store/pglocks.py: a
PostgreSQL advisory lock; a `.ducklake` file's own DuckDB lock), and the store functions keep
ids and uniqueness as they would in one process: a new id is the column's max + 1, an upsert
a delete and an insert (store/dialect.py). Maintenance (merging files) takes the same lock.

Failures. The catalog server going away (or never answering) is `StoreUnavailable`, one line
naming the catalog, exit 1; nothing is lost, as no transaction commits half.

Files. `--store-data DIR` holds DuckLake's Parquet under `DIR/lake/` and W&B's exported
history parts, kept as they are (store/parts.py), under `DIR/history/`: a reader on another
machine reads both from the shared folder. On S3 a part's rows go to the long table instead.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from marinctl.errors import MarinctlError, NoStore, StoreLocked, StoreUnavailable, UserError
from marinctl.store import extensions, schema
from marinctl.store.engine import duckdb
from marinctl.store.location import Lake

__all__ = ["LakeStore", "ALIAS"]

ALIAS = "marinctl_lake"
META = f"__ducklake_metadata_{ALIAS}"
LAKE_DIR, HISTORY_DIR = "lake", "history"

# what DuckDB says when the catalog's server cannot be reached (or went away mid-query)
_GONE = ("Unable to connect to Postgres", "Failed to query most recent snapshot", "server closed the connection",
         "terminating connection", "could not connect", "Connection refused", "connection to server",
         "no connection to the server", "SSL SYSCALL")
_NOT_THERE = "creating a new DuckLake is explicitly disabled"
_FILE_LOCK = ("Could not set lock", "Conflicting lock", "being used")


class LakeStore:
    """A DuckLake as marinctl's store (see the module docstring)."""

    kind = "lake"

    def __init__(self, lake: Lake, *, lock_timeout: float = 15.0):
        self.lake = lake
        self.lock_timeout = lock_timeout
        self._migrated = False
        self._mutex = threading.RLock()     # failure() resets the instance, also from inside its making
        self._instance: duckdb.DuckDBPyConnection | None = None
        self._data_root: str | None = None        # what holds lake/ and history/ (a folder or s3://…)
        self._file = threading.Condition()        # a file catalog's attachment, shared while in use
        self._file_users = 0
        self._file_rw = False
        self._file_writer = threading.RLock()

    # -- what the layers above ask of any store ----------------------------------------------------
    def __repr__(self) -> str:
        return f"<LakeStore {self.describe()}>"

    def describe(self) -> str:
        """The store as messages name it (a password in the URL is never shown)."""
        return self.lake.describe()

    @property
    def settings_key(self) -> str:
        """What watch's remembered layout is filed under."""
        return self.describe()

    def command_options(self) -> tuple[list[str], dict[str, str]]:
        """(global options, environment) a child `marinctl` process needs to open this store. The URL
        goes by the environment: a `password=` in it would show in the process list on the command line."""
        env = {"MARINCTL_STORE": self.lake.url}
        if self.lake.data:
            env["MARINCTL_STORE_DATA"] = self.lake.data
        return [], env

    def exists(self) -> bool:
        """Whether the lake holds a marinctl store (created by `store init`)."""
        try:
            with self.connect() as con:
                return con is not None
        except NoStore:
            return False

    def parts_root(self) -> Path | None:
        """The folder W&B's exported parts are kept in (None on S3: their rows go to the long table)."""
        if self._data_root is None:
            with self._raw(False, None):
                pass
        return self.parts_root_cached()

    def staging(self, home: Path) -> Path:
        """Where a download waits before its rows are stored (S3: a folder of the home)."""
        return self.parts_root() or (home / "lake-staging")

    def stamp(self) -> tuple:
        """A cheap data version: the lake's newest snapshot id (one catalog query)."""
        with self.connect() as con:
            return (con.execute(f"SELECT id FROM {ALIAS}.current_snapshot()").fetchall()[0][0],)

    # -- the instance: extensions loaded, the lake attached ----------------------------------------
    def _ensure_instance(self) -> duckdb.DuckDBPyConnection:
        with self._mutex:
            if self._instance is None:
                inst = self._base()
                if self.lake.on_postgres:
                    try:
                        self._attach(inst)
                    except BaseException:
                        inst.close()
                        raise
                self._instance = inst
            return self._instance

    def _base(self) -> duckdb.DuckDBPyConnection:
        con = duckdb.connect(":memory:", config=extensions.CONFIG)
        try:
            con.execute("SET enable_progress_bar = false")
            con.execute(f"SET memory_limit = '{os.environ.get('MARINCTL_DB_MEMORY', '512MB')}'")
            names = ["ducklake"]
            if self.lake.on_postgres:
                names.append("postgres_scanner")   # loaded first: DuckLake would try to download it
            if not self.lake.data or self.lake.on_s3:    # the data the catalog recorded may be on S3
                names.append("httpfs")
            extensions.load(con, *names)
            if "httpfs" in names:
                _s3_secret(con)
        except BaseException:
            con.close()
            raise
        return con

    def _attach(self, con: duckdb.DuckDBPyConnection, *, read_only: bool = False, create: bool = False,
                alias: str = ALIAS) -> None:
        options = []
        if self.lake.data:
            options.append(f"DATA_PATH {_quote(_join(self.lake.data, LAKE_DIR))}")
            if not create:
                options.append("OVERRIDE_DATA_PATH true")   # this machine mounts the data elsewhere
        elif create:
            if self.lake.on_postgres:
                raise UserError("a new DuckLake on PostgreSQL needs a place for its data",
                                f"marinctl store init '{self.lake.url}' --data /shared/marinctl/ (or s3://bucket/prefix/)")
        if not create:
            options.append("CREATE_IF_NOT_EXISTS false")
        if read_only:
            options.append("READ_ONLY")
        sql = f"ATTACH {_quote(self.lake.attach_target())} AS {alias}" + (f" ({', '.join(options)})" if options else "")
        deadline = time.monotonic() + self.lock_timeout
        delay = 0.02
        while True:
            try:
                con.execute(sql)
                break
            except duckdb.Error as exc:
                if self.lake.path is not None and any(w in str(exc) for w in _FILE_LOCK):
                    if time.monotonic() < deadline:
                        time.sleep(delay)
                        delay = min(delay * 2, 0.25)
                        continue
                    raise StoreLocked(f"the store {self.describe()} is locked by another marinctl process",
                                      "wait for it to finish, or stop the `marinctl watch`/`sync` that holds it") from None
                raise self.failure(exc) from None
        if self._data_root is None:
            self._data_root = self._recorded_root(con, alias)

    def _recorded_root(self, con: duckdb.DuckDBPyConnection, alias: str) -> str | None:
        if self.lake.data:
            return self.lake.data
        row = con.execute(f"SELECT value FROM __ducklake_metadata_{alias}.ducklake_metadata WHERE key = 'data_path'"
                          ).fetchall()
        if not row or not row[0][0]:
            return None
        path = row[0][0].rstrip("/")
        if not path.startswith("s3://") and not os.path.isabs(path) and self.lake.path is not None:
            path = str(self.lake.path.parent / path)
        return path[: -len(LAKE_DIR)].rstrip("/") if path.endswith("/" + LAKE_DIR) else path

    def _cursor(self, inst: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        cur = inst.cursor()
        root = self.parts_root_cached()
        cur.execute(f"USE {ALIAS}; SET enable_progress_bar = false; SET VARIABLE marinctl_lake = true;"
                    f" SET VARIABLE marinctl_parts_root = {_quote(str(root)) if root else 'NULL'}")
        return cur

    def parts_root_cached(self) -> Path | None:
        root = self._data_root
        return None if root is None or root.startswith("s3://") else Path(root) / HISTORY_DIR

    # -- a file catalog's attachment -------------------------------------------------------------------
    @contextmanager
    def _file_attached(self, write: bool) -> Iterator[duckdb.DuckDBPyConnection]:
        inst = self._ensure_instance()
        with self._file:
            while self._file_users and write and not self._file_rw:
                self._file.wait()
            if self._file_users == 0:
                self._attach(inst, read_only=not write)
                self._file_rw = write
            self._file_users += 1
        try:
            yield inst
        finally:
            with self._file:
                self._file_users -= 1
                if self._file_users == 0:
                    try:
                        inst.execute("USE memory")
                        inst.execute(f"DETACH {ALIAS}")
                    except duckdb.Error:
                        pass
                    self._file.notify_all()

    # -- connections -----------------------------------------------------------------------------------
    @contextmanager
    def _raw(self, write: bool, lock_timeout: float | None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor on the attached lake (the writer lock held when `write`), errors mapped."""
        timeout = self.lock_timeout if lock_timeout is None else lock_timeout
        with self._mapped(), self._held_for(write, timeout) as inst:
            cur = self._cursor(inst)
            try:
                yield cur
            finally:
                cur.close()

    @contextmanager
    def _mapped(self) -> Iterator[None]:
        """DuckDB's errors from the lake as marinctl's (`failure`: a catalog gone is one line)."""
        try:
            yield
        except MarinctlError:
            raise
        except duckdb.Error as exc:
            mapped = self.failure(exc)
            if mapped is exc:
                raise
            raise mapped from None

    @contextmanager
    def _held_for(self, write: bool, timeout: float) -> Iterator[duckdb.DuckDBPyConnection]:
        if self.lake.on_postgres:
            inst = self._ensure_instance()
            if not write:
                yield inst
                return
            with self._write_lock(timeout):
                yield inst
            return
        if write:
            with self._write_lock(timeout), self._file_attached(True) as inst:
                yield inst
        else:
            with self._file_attached(False) as inst:
                yield inst

    @contextmanager
    def _write_lock(self, timeout: float | None = None) -> Iterator[None]:
        """The lake's writer lock: PostgreSQL's advisory lock (between machines), or for a file
        catalog a thread lock (DuckDB's file lock keeps other processes out while attached)."""
        timeout = self.lock_timeout if timeout is None else timeout
        if self.lake.on_postgres:
            from marinctl.store import pglocks

            with pglocks.session_for(self.lake.conninfo, self.describe()).writing(timeout):
                yield
            return
        if not self._file_writer.acquire(timeout=timeout):
            raise StoreLocked(f"the store {self.describe()} is being written by another thread", "wait for it")
        try:
            yield
        finally:
            self._file_writer.release()

    @contextmanager
    def copying(self) -> Iterator[tuple[duckdb.DuckDBPyConnection, object]]:
        """A copy's destination: a cursor on the lake and `unit()`, one transaction each under the
        writer lock (other writers wait a unit, not the whole copy)."""
        self.ensure_schema()
        held = self._file_attached(True) if not self.lake.on_postgres else _instance_of(self)
        with self._mapped(), held as inst:
            cur = self._cursor(inst)

            @contextmanager
            def unit() -> Iterator[None]:
                with self._write_lock():
                    cur.execute("BEGIN TRANSACTION")
                    try:
                        yield
                    except BaseException:
                        try:
                            cur.execute("ROLLBACK")
                        except duckdb.Error:
                            pass
                        raise
                    cur.execute("COMMIT")

            try:
                yield cur, unit
            finally:
                cur.close()

    def attach_as(self, con: duckdb.DuckDBPyConnection, alias: str) -> None:
        """Attach this lake read-only on `con` as `alias` (a copy's source)."""
        names = ["ducklake"] + (["postgres_scanner"] if self.lake.on_postgres else [])
        if (self.lake.data or "").startswith("s3://"):
            names.append("httpfs")
        extensions.load(con, *names)
        self._attach(con, read_only=True, alias=alias)

    def ensure_schema(self) -> None:
        """Bring the lake's schema to this marinctl's (once per process); NoStore when it holds none."""
        if self._migrated:
            return
        with self._raw(False, None) as con:
            try:    # the table read directly: information_schema's views would read every catalog's
                have = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]
            except duckdb.CatalogException:
                have = 0
        if have == 0:
            raise NoStore(f"no marinctl store in the DuckLake {self.describe()}",
                          f"create it with `marinctl store init '{self.lake.url}'`")
        if have < schema.latest_version():
            with self._raw(True, None) as con:
                schema.migrate(con, lake=True)
        self._migrated = True

    @contextmanager
    def connect(self, *, write: bool = False, lock_timeout: float | None = None) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for one unit of work: a read sees one committed snapshot throughout."""
        self.ensure_schema()
        with self._raw(write, lock_timeout) as con:
            if write:
                yield con
                return
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            finally:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A write connection inside BEGIN/COMMIT under the writer lock: all of it lands, or none."""
        with self.connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass
                raise
            con.execute("COMMIT")

    @contextmanager
    def held(self) -> Iterator[None]:
        """A burst of short connections: a file catalog stays attached meanwhile (a PostgreSQL one always is)."""
        if self.lake.on_postgres:
            yield
            return
        try:
            ctx = self._file_attached(True)
            ctx.__enter__()
        except MarinctlError:
            yield
            return
        try:
            yield
        finally:
            ctx.__exit__(None, None, None)

    @contextmanager
    def glance(self) -> Iterator[duckdb.DuckDBPyConnection | None]:
        """A read that never waits, writes or fails (shell completion): a snapshot, or None when
        the lake cannot be read now or its schema is not this marinctl's."""
        from contextlib import ExitStack

        stack = ExitStack()
        try:
            con = stack.enter_context(self._raw(False, 0.0))
            con.execute("BEGIN TRANSACTION")
            version = con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]
            if version < schema.latest_version():
                con = None
        except (MarinctlError, duckdb.Error):
            stack.close()
            con = None
        with stack:
            yield con

    @contextmanager
    def read_only(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of its own with the lake attached READ_ONLY (DuckDB refuses every write
        there): what `marinctl sql` runs a user's text on."""
        self.ensure_schema()
        inst = self._base()
        try:
            self._attach(inst, read_only=True)
            cur = self._cursor(inst)
            yield cur
            cur.close()
        except duckdb.Error as exc:
            mapped = self.failure(exc)
            if mapped is exc:
                raise
            raise mapped from None
        finally:
            inst.close()

    def maintain(self, keep_hours: float = 1.0) -> dict[str, int]:
        """DuckLake's own upkeep, under the writer lock (readers go on reading): inlined rows
        flushed to Parquet, small adjacent files merged, snapshots older than `keep_hours` expired
        and the files no snapshot needs any more deleted once they are that old too."""
        keep = f"now() - INTERVAL '{float(keep_hours) * 3600:.0f} seconds'"
        out = {}
        with self._raw(True, None) as con:
            before = _files(con)
            con.execute(f"CALL ducklake_flush_inlined_data('{ALIAS}')")
            con.execute(f"CALL ducklake_merge_adjacent_files('{ALIAS}')")
            out["snapshots_expired"] = len(con.execute(
                f"CALL ducklake_expire_snapshots('{ALIAS}', older_than => {keep})").fetchall())
            out["files_deleted"] = len(con.execute(
                f"CALL ducklake_cleanup_old_files('{ALIAS}', older_than => {keep})").fetchall())
            out["files_before"], out["files_after"] = before, _files(con)
        return out

    # -- creating and failing ----------------------------------------------------------------------------
    def init(self) -> tuple[bool, int]:
        """Create the lake (or bring an existing one's schema up to date): (created, schema version)."""
        inst = self._base()
        try:
            if self.lake.path is not None:
                self.lake.path.parent.mkdir(parents=True, exist_ok=True)
            if self.lake.data and not self.lake.data.startswith("s3://"):
                Path(self.lake.data, LAKE_DIR).mkdir(parents=True, exist_ok=True)
            if self.lake.path is not None and not self.lake.data:
                self.lake = Lake(self.lake.url, path=self.lake.path, data=str(self.lake.path) + ".data")
                Path(self.lake.data, LAKE_DIR).mkdir(parents=True, exist_ok=True)
            try:
                self._attach(inst, create=True, alias="marinctl_init")
            except MarinctlError:
                raise
            cur = inst.cursor()
            cur.execute("USE marinctl_init")
            cur.execute("SET VARIABLE marinctl_lake = true")
            with self._write_lock():
                before = schema.current_version(cur)
                schema.migrate(cur, lake=True)
                after = schema.current_version(cur)
            cur.close()
        except duckdb.Error as exc:
            raise self.failure(exc) from None
        finally:
            inst.close()
        self._data_root = None
        return before == 0, after

    def failure(self, exc: BaseException) -> BaseException:
        """A DuckDB error as the one line a person reads (`exc` itself when it is none of these)."""
        text = str(exc)
        if _NOT_THERE in text:
            return NoStore(f"no marinctl store in the DuckLake {self.describe()}",
                           f"create it with `marinctl store init '{self.lake.url}'`")
        if self.lake.on_postgres and any(w in text for w in _GONE):
            with self._mutex:          # the instance may hold dead connections: the next use builds a new one
                if self._instance is not None:
                    try:
                        self._instance.close()
                    except duckdb.Error:
                        pass
                    self._instance = None
            return StoreUnavailable(f"the store's catalog {self.describe()} cannot be reached: {_libpq_line(text)}",
                                    "check that its PostgreSQL server is up and reachable, then run the command again")
        return exc


@contextmanager
def _instance_of(store: LakeStore) -> Iterator[duckdb.DuckDBPyConnection]:
    yield store._ensure_instance()


def _files(con: duckdb.DuckDBPyConnection) -> int:
    """Live data files of the lake's tables."""
    return int(con.execute(f"SELECT count(*) FROM {META}.ducklake_data_file WHERE end_snapshot IS NULL").fetchall()[0][0])


def _libpq_line(text: str) -> str:
    """The part of DuckDB's message libpq wrote, on one line."""
    for marker in ('": ', "Error: "):
        if marker in text and "connection" in text:
            text = text.split(marker, 1)[1] if marker == '": ' else text
            break
    text = text.split("\n\n", 1)[0]
    return " ".join(text.split())[:240]


def _quote(text: str) -> str:
    return "'" + str(text).replace("'", "''") + "'"


def _join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name + "/"


def _s3_secret(con: duckdb.DuckDBPyConnection) -> None:
    """S3 credentials as the AWS tools take them from the environment: keys, session token, region,
    and `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`) for S3-compatible storage (path-style there)."""
    env = os.environ
    parts = ["TYPE s3"]
    if env.get("AWS_ACCESS_KEY_ID"):
        parts.append(f"KEY_ID {_quote(env['AWS_ACCESS_KEY_ID'])}")
        parts.append(f"SECRET {_quote(env.get('AWS_SECRET_ACCESS_KEY', ''))}")
    if env.get("AWS_SESSION_TOKEN"):
        parts.append(f"SESSION_TOKEN {_quote(env['AWS_SESSION_TOKEN'])}")
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        parts.append(f"REGION {_quote(region)}")
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        from urllib.parse import urlsplit

        url = urlsplit(endpoint if "://" in endpoint else "https://" + endpoint)
        parts.append(f"ENDPOINT {_quote(url.netloc)}")
        parts.append("URL_STYLE 'path'")
        parts.append(f"USE_SSL {'false' if url.scheme == 'http' else 'true'}")
    con.execute(f"CREATE OR REPLACE SECRET marinctl_s3 ({', '.join(parts)})")
