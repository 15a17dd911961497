"""The store's schema, grown through numbered migrations.

Each migration is a numbered file in `store/migrations/` (`0001_core.sql`, `0002_…`);
`migrate()` applies the ones a database has not seen, together in one transaction, and records
each in `schema_migrations`. Never edit an applied migration: add the next number.

A DuckLake catalog has no sequences, primary keys or UNIQUE constraints, which 0001–0007 use:
a new lake starts from `lake_0007.sql` (the same tables without them) and is recorded as having
applied 0001–0007. Every later migration is plain `CREATE TABLE` / `ALTER TABLE … ADD COLUMN` and
applies to both kinds of store as it is; one that is not is refused on a lake by name.
"""

from __future__ import annotations

import os
import re
import time
from importlib import resources
from pathlib import Path

from marinctl.store.engine import duckdb

_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
LAKE_BASE = 7          # the migrations `lake_0007.sql` stands for on a DuckLake
# what a DuckLake catalog refuses (a migration past LAKE_BASE must hold none of it)
_NOT_ON_LAKE = re.compile(r"\b(CREATE\s+SEQUENCE|PRIMARY\s+KEY|UNIQUE|nextval|REFERENCES|CHECK\s*\()", re.I)


def migrations() -> list[tuple[int, str, str]]:
    """All migrations shipped with marinctl, as (version, name, sql), in order."""
    found = []
    for entry in resources.files("marinctl.store.migrations").iterdir():
        m = _NAME.match(entry.name)
        if m:
            found.append((int(m.group(1)), m.group(2), entry.read_text()))
    found.sort()
    versions = [v for v, _, _ in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate migration numbers: {versions}")
    return found


_CREATED = re.compile(r"\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\w+)", re.I)
_DROPPED = re.compile(r"\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?(\w+)", re.I)


def tables() -> list[str]:
    """Every table the migrations leave in a store, in the order they were created (what `sql`'s
    help lists), and `schema_migrations`."""
    made: list[str] = []
    for _, _, sql in migrations():
        made += [t for t in _CREATED.findall(sql) if t not in made]
        made = [t for t in made if t not in _DROPPED.findall(sql)]
    return made + ["schema_migrations"]
def lake_baseline() -> str:
    return resources.files("marinctl.store.migrations").joinpath(f"lake_{LAKE_BASE:04d}.sql").read_text()


def lake_problem(sql: str) -> str | None:
    """What in a migration a DuckLake catalog would refuse (None: nothing)."""
    body = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    m = _NOT_ON_LAKE.search(body)
    return m.group(1) if m else None


def current_version(con: duckdb.DuckDBPyConnection) -> int:
    exists = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = 'schema_migrations'"
        " AND table_catalog = current_database()"
    ).fetchall()[0][0]
    if not exists:
        return 0
    return con.execute("SELECT coalesce(max(version), 0) FROM schema_migrations").fetchall()[0][0]


def latest_version() -> int:
    return migrations()[-1][0]


def migrate(con: duckdb.DuckDBPyConnection, *, lake: bool = False) -> list[int]:
    """Apply pending migrations; return the versions applied. `lake`: the connection's catalog is a
    DuckLake (the caller holds its writer lock)."""
    con.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        f" version INTEGER {'NOT NULL' if lake else 'PRIMARY KEY'}, name VARCHAR,"
        " applied_at TIMESTAMPTZ DEFAULT current_timestamp)"
    )
    have = current_version(con)
    pending = [m for m in migrations() if m[0] > have]
    if not pending:
        return []
    for version, name, sql in pending:
        if lake and version > LAKE_BASE and (bad := lake_problem(sql)):
            raise RuntimeError(f"migration {version:04d}_{name} uses {bad}, which a DuckLake catalog lacks")
    # one transaction for all that are pending: a new file's first open committed (and synced to
    # disk) once per migration, and the first `watch` of a new home waits on it; a failure leaves
    # the store as it was. A lake takes 0001–0007 as its baseline.
    con.execute("BEGIN TRANSACTION")
    try:
        if lake and have < LAKE_BASE:
            con.execute(lake_baseline())
        for version, name, sql in pending:
            if not lake or version > LAKE_BASE:
                con.execute(sql)
            con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
        con.execute("COMMIT")
    except Exception:
        con.execute("ROLLBACK")
        raise
    if lake:
        return [version for version, _, _ in pending]
    # written into the file now, not left in the WAL: DuckDB 1.5 cannot replay an ALTER TABLE of a
    # table whose defaults call functions (nextval, current_timestamp), so a process killed after
    # its first open would leave a store no later process can open
    con.execute("CHECKPOINT")
    return [version for version, _, _ in pending]


def set_aside_interrupted_migration(path: Path) -> bool:
    """Set aside a WAL DuckDB cannot replay when it holds an interrupted migration, so the file
    opens at its previous version and the migrations run again; True when that was done.

    A process killed between the migrations' COMMIT and their CHECKPOINT (`migrate`) leaves them
    in the WAL, and DuckDB 1.5 cannot replay an ALTER TABLE of a table whose defaults call
    functions: every later open would fail. Only such a WAL is set aside (renamed, kept beside the
    file): the file without it must be at an older version, so the WAL began with the migration
    and nothing after it had been checkpointed; otherwise it is put back and the error stands."""
    wal = Path(f"{path}.wal")
    aside = wal.with_name(f"{wal.name}.unreplayable-{time.time_ns()}")
    try:
        os.replace(wal, aside)
    except FileNotFoundError:
        return True                      # another process set it aside first
    try:
        con = duckdb.connect(str(path), read_only=True)
        try:
            older = current_version(con) < latest_version()
        finally:
            con.close()
    except duckdb.Error:
        older = False
    if not older:
        os.replace(aside, wal)
    return older
