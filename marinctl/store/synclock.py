"""Advisory per-target sync locks, so two processes never sync the same target at once.

DuckDB already serialises writers per file, but a `marinctl sync hero` started while
`watch` follows the hero would interleave two syncs of one run. Each syncing process
holds an fcntl lock on `<db>.locks/<hash(key)>.lock` (released by the OS even on SIGKILL);
a second one is told who holds it instead of waiting. Keys name what is synced, resolved
(`sync.targets.lock_key`: a W&B run as ENTITY/PROJECT/RUN_ID however it was typed, a local
file by its real path), so one run cannot be synced twice at once under two names.

On a DuckLake the same locks are the catalog's: a `.ducklake` file's sit beside it
(`<file>.locks/`, one machine), a PostgreSQL catalog's are advisory locks on its server
(store/pglocks.py), so followers on two machines never sync one run at once either.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Iterator

from marinctl.errors import SyncBusy


def _lock_path(store, target: str) -> Path:
    folder = Path(str(_anchor(store)) + ".locks")
    folder.mkdir(parents=True, exist_ok=True)
    return folder / (hashlib.sha1(target.strip().encode()).hexdigest()[:16] + ".lock")


def _anchor(store) -> Path | None:
    """The file the store's lock folder sits beside (None: a PostgreSQL catalog, whose server locks)."""
    if store.kind == "embedded":
        return store.path
    return store.lake.path


@contextmanager
def acquire(store, target: str, owner: str = "sync") -> Iterator[None]:
    """Hold the sync lock of `target` for the block, or fail at once naming who holds it."""
    if _anchor(store) is None:
        from marinctl.store import pglocks

        with pglocks.session_for(store.lake.conninfo, store.describe()).syncing(target, owner):
            yield
        return
    path = _lock_path(store, target)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another marinctl process"
            raise SyncBusy(
                f"{holder} is already syncing {target}",
                "let it finish (a running `marinctl watch` keeps it in sync), or stop it first",
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{owner} (pid {os.getpid()})".encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def held(store, targets: list[str], owner: str = "sync") -> Iterator[set[str]]:
    """The locks of `targets` this process can take now, held for the block: a project sync writes a
    run only while it holds the run's own lock, so a `sync E/P/RUN` or a `watch` keeping that run
    in sync is never interleaved with it (the run is skipped this pass, not waited for)."""
    with ExitStack() as stack:
        mine = set()
        for target in sorted(set(targets)):
            try:
                stack.enter_context(acquire(store, target, owner))
            except SyncBusy:
                continue
            mine.add(target)
        yield mine


@contextmanager
def acquire_all(store, targets: list[str], owner: str = "sync") -> Iterator[None]:
    with ExitStack() as stack:
        for target in sorted(set(targets)):
            stack.enter_context(acquire(store, target, owner))
        yield
