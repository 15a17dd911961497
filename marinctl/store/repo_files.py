"""The `repo_files` table: repository files mirrored from GitHub (mixture JSON, logbooks).

The raw text at the ref it was read from, so `marinctl mix` reads the hero mixture offline
and a re-sync can tell (by blob sha / ETag) that nothing changed.
"""

from __future__ import annotations

from marinctl.store import Connection, first


def save(con: Connection, repo: str, path: str, sha: str | None, content: str, url: str | None) -> None:
    """Store (or replace) one file's text as of the default branch."""
    con.execute("DELETE FROM repo_files WHERE repo = ? AND path = ?", [repo, path])
    con.execute(
        "INSERT INTO repo_files (repo, path, ref, sha, content, url, fetched_at)"
        " VALUES (?, ?, NULL, ?, ?, ?, current_timestamp)",
        [repo, path, sha, content, url],
    )


def read(con: Connection, repo: str, path: str) -> tuple[str, str | None] | None:
    """(content, blob sha) of a mirrored file, or None when it was never synced."""
    row = first(con.execute("SELECT content, sha FROM repo_files WHERE repo = ? AND path = ?", [repo, path]))
    return (row[0], row[1]) if row else None
