"""Reads handed to Python callers as DuckDB relations that outlive the store connection.

A DuckDB relation lives on the connection that made it, and a connection to the store file
holds the file: a notebook that kept one would stop `sync --follow` from writing (DuckDB lets one
process write a file only while no other process has it open). So a read is fetched as an Arrow
table inside a short store connection, and handed out as a relation over that table on a
private in-memory connection (`memory()`): `.df()`, `.pl()`, `.arrow()` and further SQL on it
work after the store file is closed, and each relation keeps only its own table alive.
"""

from __future__ import annotations

from itertools import count
from typing import TYPE_CHECKING, Any, Sequence

from marinctl.store import engine
from marinctl.store.engine import duckdb

if TYPE_CHECKING:
    import pyarrow as pa

_NAMES = count()


def memory() -> duckdb.DuckDBPyConnection:
    """A private in-memory DuckDB: the connection the relations handed out live on."""
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    return con


def table(mem: duckdb.DuckDBPyConnection, data: pa.Table) -> Any:
    """`data` as a relation on `mem`."""
    return engine.from_arrow(mem, data)


def rows(mem: duckdb.DuckDBPyConnection, items: Sequence[dict[str, Any]], schema: pa.Schema) -> Any:
    """Plain rows (dicts) as a relation with `schema`'s columns, also when there are none."""
    import pyarrow as pa

    return table(mem, pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in items], schema=schema))


def wide(mem: duckdb.DuckDBPyConnection, long: pa.Table, keys: Sequence[str]) -> Any:
    """Long history (step, key, value) pivoted: one row per step, a column per key in `keys`'
    order, NULL where a step has no value for a key (NaN stays NaN), rows by step."""
    import pyarrow as pa

    if not long.num_rows:
        schema = pa.schema([("step", pa.int64())] + [(k, pa.float64()) for k in keys])
        return table(mem, schema.empty_table())
    name = f"_long_{next(_NAMES)}"
    engine.register(mem, name, long)
    try:
        # PIVOT's columns come out in the keys' sorted order; the select puts them in `keys`' order
        out = engine.relation(mem, f"PIVOT {name} ON key USING first(value) GROUP BY step ORDER BY step").to_arrow_table()
    finally:
        mem.unregister(name)
    present = set(out.column_names)
    columns = [out.column("step")] + [out.column(k) if k in present else pa.nulls(out.num_rows, pa.float64())
                                       for k in keys]
    return table(mem, pa.table(columns, names=["step", *keys]))
