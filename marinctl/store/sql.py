"""`marinctl sql`: a user's own read-only SQL over the store, with a `history` view.

The store is opened read-only (the file, or a DuckLake attached READ_ONLY: DuckDB refuses
every write there), so nothing a user types can change what is stored. `history` is every stored value in the shape people expect,
(run, uid, step, key, value): the long `metrics` rows and the exported parquet parts, read in
place (store/scan.py), so a query over all keys of a hero-sized run decodes its parts.
"""

from __future__ import annotations

from typing import Any

from marinctl.errors import UserError
from marinctl.store import Store, scan
from marinctl.store.engine import duckdb


def history_view(con: duckdb.DuckDBPyConnection) -> str:
    """The `history` view over both stored forms of history."""
    return ("CREATE OR REPLACE TEMP VIEW history AS SELECT r.run_id AS run, r.uid, h.step, h.key, h.value"
            f" FROM ({scan.inline_sql(con)}) h JOIN runs r USING (run_pk)")


# Statements that only read. DuckDB's read-only file still lets a session drop its own temp
# view or copy rows out to a file; `marinctl sql` refuses those too instead of saying "Success".
READING = {"SELECT", "EXPLAIN", "PRAGMA", "CALL"}


def query(store: Store, text: str) -> tuple[list[str], list[tuple[Any, ...]]] | None:
    """(column names, rows) of one read-only query; None for a statement without a result."""
    with store.read_only() as con:
        con.execute(history_view(con))
        try:
            kinds = [st.type.name for st in con.extract_statements(text)]
            writing = [k for k in kinds if k not in READING]
            if writing:
                raise UserError(f"{writing[0]} refused: the store is read-only here (marinctl sql only reads)",
                                "marinctl sql \"SELECT run, max(step) FROM history GROUP BY run\"")
            cur = con.execute(text)
        except duckdb.Error as exc:
            msg = str(exc).splitlines()[0]
            raise UserError(f"SQL error: {msg}",
                            "see the tables with `marinctl sql \"SHOW TABLES\"`, a table's columns with `DESCRIBE history`") from None
        if cur.description is None:
            return None
        return [d[0] for d in cur.description], cur.fetchall()
