"""DuckDB as the store uses it: the compiled core everywhere, the whole package only where Arrow meets SQL.

`import duckdb` runs the package's Python layer (relations, expressions: dozens of modules, a
visible share of a watch's start: bench/NOTES.md, "Start-up costs"). Reading the store never
uses it: connections, queries, fetches and the error classes belong to the compiled core
(`_duckdb`), the very classes the package re-exports. Two things do need the package's set-up:
scanning an Arrow table registered on a connection, and building a relation (`con.sql()`,
`con.from_arrow()`). They go through `register`, `relation` and `from_arrow` below, which load it
first, once; connections opened before that work with it too. The history writer hands the core
NumPy columns instead (`metrics.replace_range`), so a `watch` catching a run up loads none of it.
"""

from __future__ import annotations

from typing import Any

try:
    import _duckdb as duckdb
except ImportError:                      # a DuckDB whose package is its own core
    import duckdb

__all__ = ["duckdb", "from_arrow", "register", "relation"]


def _package() -> None:
    import duckdb as package  # noqa: F401 — its import sets up the Arrow scans of every connection


def preload() -> None:
    """Load the package's Arrow scans now: a writer that will register Arrow tables (a project sync)
    loads them in a thread while it waits on the network, not on its critical path."""
    _package()


def register(con: Any, name: str, table: Any) -> None:
    """`con.register(name, table)` for an Arrow table (the package's Arrow scans loaded first)."""
    _package()
    con.register(name, table)


def relation(con: Any, sql: str, params: Any = None) -> Any:
    """`con.sql(sql, params=...)`: a relation (to_arrow_table, to_arrow_reader) from the package."""
    _package()
    return con.sql(sql) if params is None else con.sql(sql, params=params)


def from_arrow(con: Any, table: Any) -> Any:
    """`con.from_arrow(table)`: a relation over an Arrow table that keeps the table alive with it."""
    _package()
    return con.from_arrow(table)
