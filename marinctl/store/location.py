"""Where a store is: the embedded DuckDB file, or a DuckLake named by a URL and its data path.

`--store` (or `$MARINCTL_STORE`) takes the DuckLake forms DuckDB's own `ATTACH` takes:
- `ducklake:postgres:CONNINFO` — a PostgreSQL catalog, CONNINFO being libpq's `key=value …`
  string (`dbname=lake host=db.lab port=5432 user=marin`); the password comes from libpq's own
  places (`PGPASSWORD`, `~/.pgpass`), so a URL never needs to carry it;
- `ducklake:PATH.ducklake` — a DuckDB file as the catalog (several processes of one machine).
The data (`--store-data`, `$MARINCTL_STORE_DATA`) is a folder or `s3://bucket/prefix/`. A
string that is none of these is bad input (exit 2) before anything is opened.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from marinctl.errors import UserError

__all__ = ["Lake", "parse", "is_lake_url", "conninfo_pairs"]

_PG = "ducklake:postgres:"
_HINT = ("name a DuckLake as ducklake:postgres:dbname=DB host=HOST port=PORT user=USER, or ducklake:PATH.ducklake"
         " (see `marinctl store init --help`)")
_KEY = re.compile(r"^[a-z_]+$")
# libpq's keywords (a misspelt one is refused here, where libpq would say only "invalid option")
_LIBPQ = {
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "connect_timeout", "client_encoding",
    "options", "application_name", "fallback_application_name", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "tcp_user_timeout", "sslmode", "sslcert", "sslkey", "sslrootcert",
    "sslcrl", "sslpassword", "requiressl", "sslcompression", "gssencmode", "krbsrvname", "service",
    "target_session_attrs", "load_balance_hosts", "channel_binding", "require_auth", "sslnegotiation",
    "sslcertmode", "sslsni", "ssl_min_protocol_version", "ssl_max_protocol_version",
}


@dataclass(frozen=True)
class Lake:
    """A DuckLake: its catalog (a PostgreSQL conninfo, or a `.ducklake` file) and its data path."""

    url: str                      # as typed: `ducklake:postgres:…` or `ducklake:PATH.ducklake`
    conninfo: str | None = None   # the PostgreSQL catalog's libpq string
    path: Path | None = None      # the DuckDB-file catalog
    data: str | None = None       # a folder, or s3://bucket/prefix/ (None: the one the catalog recorded)

    @property
    def on_postgres(self) -> bool:
        return self.conninfo is not None

    @property
    def on_s3(self) -> bool:
        return bool(self.data) and self.data.startswith("s3://")

    def describe(self) -> str:
        """The URL as messages show it: a `password=` in it is never printed."""
        if self.conninfo is None:
            return self.url
        shown = " ".join(f"{k}={'***' if k == 'password' else v}" for k, v in conninfo_pairs(self.conninfo))
        return _PG + shown

    def attach_target(self) -> str:
        """What DuckDB's `ATTACH` takes for the catalog."""
        return f"ducklake:postgres:{self.conninfo}" if self.conninfo is not None else f"ducklake:{self.path}"


def is_lake_url(text: str) -> bool:
    return text.strip().startswith("ducklake:")


def conninfo_pairs(conninfo: str) -> list[tuple[str, str]]:
    """libpq's `key=value` pairs (values may be single-quoted); UserError when it is not that form."""
    pairs = []
    try:
        words = shlex.split(conninfo.replace("\\'", "\x00"), posix=True)
    except ValueError as exc:
        raise UserError(f"cannot read the catalog's connection string: {exc}", _HINT) from None
    for word in words:
        key, eq, value = word.partition("=")
        key = key.strip().lower()
        if not eq or not _KEY.match(key):
            raise UserError(f"cannot read {word!r} in the catalog's connection string: libpq takes key=value pairs",
                            _HINT)
        if key not in _LIBPQ:
            raise UserError(f"{key!r} is not a libpq connection keyword", _HINT)
        pairs.append((key, value.replace("\x00", "'")))
    return pairs


def parse(url: str, data: str | None = None) -> Lake:
    """A `--store` URL (and `--store-data`) read into a `Lake`; UserError (exit 2) for anything else."""
    text = (url or "").strip()
    data = (data or "").strip() or None
    if data is not None and not data.startswith("s3://"):
        if "://" in data:
            raise UserError(f"cannot keep a DuckLake's data at {data!r}: a folder or s3://bucket/prefix/ is needed",
                            "--store-data /shared/marinctl-lake/ or --store-data s3://bucket/marinctl/")
        data = str(Path(data).expanduser().resolve())
    if text.startswith(_PG):
        conninfo = text[len(_PG):].strip()
        pairs = conninfo_pairs(conninfo)
        keys = {k for k, _ in pairs}
        if "dbname" not in keys and "service" not in keys:
            raise UserError(f"the catalog's connection string names no database: {text!r}", _HINT)
        return Lake(url=text, conninfo=conninfo, data=data)
    if text.startswith("ducklake:"):
        rest = text[len("ducklake:"):].strip()
        if rest.startswith(("postgres", "sqlite:", "mysql:")) or not rest.endswith(".ducklake"):
            raise UserError(f"cannot read {text!r} as a DuckLake: marinctl takes a PostgreSQL or a .ducklake file catalog",
                            _HINT)
        return Lake(url=text, path=Path(rest).expanduser().resolve(), data=data)
    raise UserError(f"{text!r} is not a DuckLake URL", _HINT)
