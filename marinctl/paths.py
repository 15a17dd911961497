"""Where marinctl keeps its data (the contract's precedence, in one place).

`--home`, else `$MARINCTL_HOME`, else the checkout's `cache/` when run from a marinctl
checkout, else the user cache directory. The DuckDB file is `<home>/marinctl.duckdb`
unless `--db` names another. A team's DuckLake is named by `--store` (else `$MARINCTL_STORE`),
its data by `--store-data` (else `$MARINCTL_STORE_DATA`); the home still holds per-user files.

A folder that cannot hold the store (a path through a file, a read-only folder, a full
disk) is found here, before DuckDB or a download meets it, and reported as a runtime
failure naming the path and what to do (the contract's exit 1), never as a traceback.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from marinctl.errors import RuntimeFailure

DB_NAME = "marinctl.duckdb"

_overrides: dict[str, Path | None] = {"home": None, "db": None}
_store_overrides: dict[str, str | None] = {"store": None, "data": None}
_usable: set[Path] = set()   # folders already checked in this process
_HOME_HINT = "pick a writable folder: marinctl --home DIR … (or set MARINCTL_HOME)"
_DB_HINT = "pick a writable place for the store: marinctl --db PATH …, or drop --db"


def set_overrides(home: Path | None = None, db: Path | None = None) -> None:
    _overrides["home"] = Path(home).expanduser() if home else None
    _overrides["db"] = Path(db).expanduser() if db else None


def set_store(store: str | None = None, data: str | None = None) -> None:
    """`--store URL` and `--store-data PATH` as given on the command line (None: not given)."""
    _store_overrides["store"] = store or None
    _store_overrides["data"] = data or None


def store_url() -> str | None:
    """The DuckLake the command works on (`--store`, else `$MARINCTL_STORE`); None: the embedded file."""
    return _store_overrides["store"] or os.environ.get("MARINCTL_STORE") or None


def store_data() -> str | None:
    """Where a DuckLake keeps its data (`--store-data`, else `$MARINCTL_STORE_DATA`); None: not said."""
    return _store_overrides["data"] or os.environ.get("MARINCTL_STORE_DATA") or None


def checkout_root() -> Path | None:
    """The marinctl checkout this package runs from, if it is one (editable install)."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "cache").is_dir():
        return root
    return None


def _home_path(given: Path | None) -> Path:
    if given is not None:
        return given
    if os.environ.get("MARINCTL_HOME"):
        return Path(os.environ["MARINCTL_HOME"]).expanduser()
    if (root := checkout_root()) is not None:
        return root / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "marinctl"


def home() -> Path:
    return usable_folder(_home_path(_overrides["home"]), "data home", _HOME_HINT)


def locate(home: str | os.PathLike | None = None, db: str | os.PathLike | None = None) -> Path:
    """The store file `home`/`db` name, in the same precedence, touching nothing: a reader (the
    Python API) may read a store it cannot write, so no folder is made or probed here."""
    if db is not None:
        return Path(db).expanduser()
    return _home_path(Path(home).expanduser() if home is not None else None) / DB_NAME


def db_path() -> Path:
    db = _overrides["db"]
    if db is not None:
        if db.is_dir():
            raise RuntimeFailure(f"cannot use {db} as the store: it is a folder, not a DuckDB file", _DB_HINT)
        usable_folder(db.parent, "folder of the store", _DB_HINT)
        return store_file(db)
    return store_file(home() / DB_NAME)


def store_file(path: Path) -> Path:
    """`path`, unless it is an existing file that is not a DuckDB database (its magic bytes say)."""
    if path in _usable or not path.is_file():
        return path
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError as exc:
        raise RuntimeFailure(f"cannot read the store {path}: {_why(path, exc)}", _DB_HINT) from None
    if len(head) == 12 and head[8:12] != b"DUCK":
        raise RuntimeFailure(f"{path} is not a marinctl store (not a DuckDB file)",
                             "point --db at a marinctl store or a new file name")
    _usable.add(path)
    return path


def subdir(name: str) -> Path:
    """A folder under the data home (parquet/, http/, repro/, tokenizer/ ...)."""
    return usable_folder(home() / name, "data home", _HOME_HINT)


def usable_folder(path: Path, what: str, hint: str) -> Path:
    """`path`, made if missing and proven writable (a file created and removed), once per process."""
    if path in _usable:
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".marinctl-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise RuntimeFailure(f"cannot use {path} as the {what}: {_why(path, exc)}", hint) from None
    _usable.add(path)
    return path


def _why(path: Path, exc: OSError) -> str:
    if exc.errno in (errno.EEXIST, errno.ENOTDIR):
        blocker = next((p for p in [path, *path.parents] if p.exists() and not p.is_dir()), None)
        return f"{blocker} is a file, not a folder" if blocker else "a part of the path is not a folder"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "it is not writable (permission denied)"
    if exc.errno == errno.EROFS:
        return "the file system is read-only"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk is full"
    return exc.strerror or str(exc)
