"""Where marinctl keeps its data (the contract's precedence, in one place).

`--home`, else `$MARINCTL_HOME`, else the checkout's `cache/` when run from a marinctl
checkout, else the user cache directory. The DuckDB file is `<home>/marinctl.duckdb`
unless `--db` names another.
"""

from __future__ import annotations

import os
from pathlib import Path

DB_NAME = "marinctl.duckdb"

_overrides: dict[str, Path | None] = {"home": None, "db": None}


def set_overrides(home: Path | None = None, db: Path | None = None) -> None:
    _overrides["home"] = Path(home).expanduser() if home else None
    _overrides["db"] = Path(db).expanduser() if db else None


def checkout_root() -> Path | None:
    """The marinctl checkout this package runs from, if it is one (editable install)."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file() and (root / "cache").is_dir():
        return root
    return None


def home() -> Path:
    if _overrides["home"] is not None:
        path = _overrides["home"]
    elif os.environ.get("MARINCTL_HOME"):
        path = Path(os.environ["MARINCTL_HOME"]).expanduser()
    elif (root := checkout_root()) is not None:
        path = root / "cache"
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        path = Path(base) / "marinctl"
    path.mkdir(parents=True, exist_ok=True)
    return path


def db_path() -> Path:
    if _overrides["db"] is not None:
        _overrides["db"].parent.mkdir(parents=True, exist_ok=True)
        return _overrides["db"]
    return home() / DB_NAME


def subdir(name: str) -> Path:
    """A folder under the data home (parquet/, http/, repro/, tokenizer/ ...)."""
    path = home() / name
    path.mkdir(parents=True, exist_ok=True)
    return path
