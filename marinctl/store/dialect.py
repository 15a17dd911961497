"""What differs between the embedded file and a DuckLake in the SQL the store writes: new ids.

The embedded file hands out ids from sequences (`DEFAULT nextval(…)`); a DuckLake has none, so
there a new id is the column's max + 1, which is unique because every lake write transaction
holds the lake's writer lock (store/lake.py). A connection says which it is: `LakeStore` sets
the `marinctl_lake` variable on each of its cursors. Upserts need no dialect: they are written
as a delete and an insert in one transaction, which both kinds of store take.
"""

from __future__ import annotations

from marinctl.store.engine import duckdb

__all__ = ["is_lake", "new_id", "intern"]

# the sequence behind each id column of the embedded schema
SEQUENCES = {("runs", "run_pk"): "run_pk_seq", ("metric_keys", "key_id"): "key_id_seq",
             ("system_keys", "key_id"): "system_key_seq", ("alerts", "alert_id"): "alert_id_seq",
             ("history_parts", "part_id"): "part_id_seq"}


def is_lake(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether this connection works on a DuckLake."""
    return con.execute("SELECT getvariable('marinctl_lake')").fetchall()[0][0] is True


def new_id(con: duckdb.DuckDBPyConnection, table: str, column: str) -> int:
    """A fresh id for one new row of `table`."""
    if is_lake(con):
        return int(con.execute(f"SELECT coalesce(max({column}), 0) + 1 FROM {table}").fetchall()[0][0])
    return int(con.execute(f"SELECT nextval('{SEQUENCES[(table, column)]}')").fetchall()[0][0])


def intern(con: duckdb.DuckDBPyConnection, table: str, names_sql: str, params: list | None = None) -> None:
    """Add to a (key_id, key) table every name `names_sql` (one column) selects that it lacks."""
    fresh = f"SELECT DISTINCT n FROM ({names_sql}) s(n) WHERE n NOT IN (SELECT key FROM {table})"
    if is_lake(con):
        con.execute(f"INSERT INTO {table} (key_id, key) SELECT (SELECT coalesce(max(key_id), 0) FROM {table})"
                    f" + row_number() OVER (ORDER BY n), n FROM ({fresh})", params or [])
    else:
        con.execute(f"INSERT INTO {table} (key) {fresh}", params or [])
