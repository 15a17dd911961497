"""Which install extra a command needs, said plainly when it is missing.

A plain `pip install marinctl` carries what following runs needs. Reading local `.wandb`
files needs wandb's protobufs (`marinctl[local]`); training needs torch (`marinctl[repro]`);
`serve` needs textual-serve (`marinctl[web]`); a DuckLake store needs DuckDB's ducklake,
postgres and httpfs extensions as packaged for the pinned DuckDB (`marinctl[team]`).
A command that reaches for a missing one stops with exit 1 and the install line to run.
"""

from __future__ import annotations

import importlib.util

from marinctl.errors import RuntimeFailure

EXTRAS = {"local": ("wandb",), "repro": ("torch", "tokenizers", "wandb"), "web": ("textual_serve",),
          "team": ("duckdb_extension_ducklake", "duckdb_extension_postgres_scanner", "duckdb_extension_httpfs",
                   "psycopg", "pytz")}


def missing(extra: str) -> list[str]:
    """The packages of `extra` that this Python cannot import."""
    return [name for name in EXTRAS[extra] if importlib.util.find_spec(name) is None]


def require(extra: str, what: str) -> None:
    """Raise a RuntimeFailure naming the extra when `what` needs packages that are absent."""
    absent = missing(extra)
    if absent:
        raise RuntimeFailure(
            f"{what} needs {', '.join(absent)}, which this install lacks",
            f"pip install 'marinctl[{extra}]' (from a checkout: pip install -e '.[{extra}]')",
        )
