"""DuckDB's ducklake, postgres and httpfs extensions, loaded from their PyPI packages.

`INSTALL` would download them from DuckDB's extension site at run time; marinctl never does.
The `[team]` extra installs them as Python packages (`duckdb-extension-ducklake`, …), each
holding the extension built for one DuckDB version at
`<package>/extensions/v<duckdb version>/<name>.duckdb_extension`, and `LOAD` takes that path.
A missing package, or one built for another DuckDB than the one installed, is a runtime
failure naming the install line — never a download.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from marinctl.errors import RuntimeFailure
from marinctl.store.engine import duckdb

__all__ = ["CONFIG", "load", "path_of"]

# How a lake's DuckDB is opened. Nothing is ever installed from the network. DuckDB checks an
# extension's signature at every LOAD by hashing the whole file, 78 MB for ducklake and postgres:
# ~0.45 s of every command's start (bench/NOTES.md, "Extension signatures"). The files loaded are
# the installed packages' own, no more and no less trusted than the Python code beside them in
# site-packages, so their check is skipped; `marinctl sql` refuses LOAD as it refuses any write.
CONFIG = {"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"}

# extension name → the package that carries it
PACKAGES = {"ducklake": "duckdb_extension_ducklake", "postgres_scanner": "duckdb_extension_postgres_scanner",
            "httpfs": "duckdb_extension_httpfs"}
_INSTALL = "pip install 'marinctl[team]' (it pins the DuckDB these extensions are built for)"


def path_of(name: str) -> Path:
    """The packaged extension file for the installed DuckDB."""
    spec = importlib.util.find_spec(PACKAGES[name])
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeFailure(f"a DuckLake store needs DuckDB's {name} extension, which this install lacks", _INSTALL)
    folder = Path(next(iter(spec.submodule_search_locations))) / "extensions"
    version = duckdb.__version__ if hasattr(duckdb, "__version__") else _version()
    found = folder / f"v{version}" / f"{name}.duckdb_extension"
    if not found.is_file():
        built = sorted(p.name for p in folder.glob("v*")) if folder.is_dir() else []
        raise RuntimeFailure(f"DuckDB's {name} extension is installed for DuckDB {', '.join(built) or '?'}, "
                             f"not for the DuckDB {version} installed here", _INSTALL)
    return found


def _version() -> str:
    import duckdb as package

    return package.__version__


def load(con: duckdb.DuckDBPyConnection, *names: str) -> None:
    """`LOAD` each named extension from its package into this connection's database."""
    for name in names:
        path = str(path_of(name)).replace("'", "''")
        con.execute(f"LOAD '{path}'")
