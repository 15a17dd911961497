"""Migrations on a DuckLake: a lake starts from the 0001–0007 baseline, and every later migration
applies to it as it is — or, holding what DuckLake lacks, is refused by name."""

from __future__ import annotations

import pytest


def test_every_migration_after_the_baseline_is_lake_friendly():
    from marinctl.store import schema

    later = [(v, n) for v, n, sql in schema.migrations() if v > schema.LAKE_BASE and schema.lake_problem(sql)]
    assert later == [], f"these use what a DuckLake catalog lacks (sequences, keys, UNIQUE): {later}"


def test_the_baseline_has_the_embedded_schemas_tables_and_columns(tmp_path, pg_cluster):
    """The lake made by `store init` and an embedded file at the same version hold the same tables,
    each with the same columns in the same order (what `store copy` and every query rely on)."""
    from marinctl.store import Store, lake_store
    from tests.lake import init_lake

    url = pg_cluster.url(pg_cluster.new_database())
    init_lake(url, tmp_path / "data")
    file = Store(tmp_path / "m.duckdb")
    file.ensure_schema()

    def columns(store) -> dict[str, list[tuple[str, str]]]:
        out: dict[str, list[tuple[str, str]]] = {}
        with store.connect() as con:
            for table, column, kind in con.execute(
                    "SELECT table_name, column_name, data_type FROM information_schema.columns"
                    " WHERE table_catalog = current_database() AND table_schema = 'main'"
                    " ORDER BY table_name, ordinal_position").fetchall():
                out.setdefault(table, []).append((column, kind))
        return out

    assert columns(lake_store(url, str(tmp_path / "data"))) == columns(file)


def test_a_new_plain_migration_applies_to_a_lake_and_one_with_a_key_is_refused(tmp_path, pg_cluster, monkeypatch):
    from marinctl.store import lake_store, schema
    from tests.lake import init_lake

    url = pg_cluster.url(pg_cluster.new_database())
    init_lake(url, tmp_path / "data")
    shipped = schema.migrations()
    top = shipped[-1][0]
    plain = (top + 1, "synthetic_notes", "CREATE TABLE synthetic_notes (run_uid VARCHAR NOT NULL, note VARCHAR);\n"
                                         "ALTER TABLE runs ADD COLUMN synthetic_flag BOOLEAN;")
    monkeypatch.setattr(schema, "migrations", lambda: [*shipped, plain])
    store = lake_store(url, str(tmp_path / "data"))
    with store.connect() as con:           # an older lake is migrated by the first command that opens it
        assert schema.current_version(con) == top + 1
        con.execute("SELECT run_uid, note FROM synthetic_notes").fetchall()
        con.execute("SELECT synthetic_flag FROM runs").fetchall()
    keyed = (top + 2, "synthetic_keyed", "CREATE TABLE synthetic_keyed (id INTEGER PRIMARY KEY)")
    monkeypatch.setattr(schema, "migrations", lambda: [*shipped, plain, keyed])
    store._migrated = False
    with pytest.raises(RuntimeError, match="synthetic_keyed uses PRIMARY KEY"):
        store.ensure_schema()
