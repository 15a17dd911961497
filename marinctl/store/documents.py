"""Reads of mirrored GitHub text: a repository file by path, event bodies that say a phrase.

`mix` reads the hero's mixture file and `ladder` looks for a pre-registered loss in the
issue thread; both are plain lookups over what `sync` mirrored, never parsed here.
"""

from __future__ import annotations

import duckdb


def repo_file(con: duckdb.DuckDBPyConnection, repo: str, path: str) -> tuple[str, str | None] | None:
    """(content, sha) of a mirrored repository file, or None when it was never synced."""
    row = con.execute("SELECT content, sha FROM repo_files WHERE repo = ? AND path = ?", [repo, path]).fetchone()
    return (row[0], row[1]) if row else None


def event_bodies_containing(con: duckdb.DuckDBPyConnection, phrase: str) -> list[str]:
    """Bodies of stored events that contain `phrase` (case-insensitive), in text order."""
    rows = con.execute("SELECT body FROM events WHERE contains(lower(body), lower(?)) ORDER BY 1", [phrase]).fetchall()
    return [r[0] for r in rows]
