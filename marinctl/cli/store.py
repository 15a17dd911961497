"""`marinctl store init|copy|maintain`: a team's DuckLake made, a mirror copied between stores, upkeep.

The lake itself is store/lake.py's; these commands parse, call it, and say what happened.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from marinctl.cli import output
from marinctl.cli.boundary import CommandGroup

store_app = typer.Typer(help="A team mirror on DuckLake: create one, copy a mirror between stores, keep it tidy.",
                        no_args_is_help=True, rich_markup_mode=None, cls=CommandGroup)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.add_typer(store_app, name="store")
    store_app.command("init", help=(
        "Create a DuckLake store: marinctl's schema and migrations on its catalog. URL: ducklake:postgres:dbname=… "
        "host=… port=… user=… (the password by libpq's means: PGPASSWORD, ~/.pgpass) or ducklake:PATH.ducklake; "
        "default --store. Run again, it brings an existing lake's schema up to date."))(init)
    store_app.command("copy", help=(
        "Copy a mirror between stores, each an embedded .duckdb path or a DuckLake URL: a laptop's mirror into the "
        "team lake, or the lake into a file for a flight. A second copy moves only what changed."))(copy)
    store_app.command("maintain", help=(
        "DuckLake's upkeep for the --store lake: flush inlined rows, merge small files, expire snapshots and "
        "delete the files no snapshot needs (older than --keep-hours); safe while others read."))(maintain)


def init(
    url: Annotated[Optional[str], typer.Argument(metavar="[URL]", help="The DuckLake (default: --store / $MARINCTL_STORE).")] = None,
    data: Annotated[Optional[str], typer.Option("--data", metavar="PATH", help=(
        "Where its data goes: a folder (shared by the readers) or s3://bucket/prefix/ (default: --store-data)."))] = None,
) -> None:
    from marinctl import paths
    from marinctl.errors import UserError
    from marinctl.store import location
    from marinctl.store.lake import LakeStore

    url = url or paths.store_url()
    if not url:
        raise UserError("store init needs the DuckLake to create",
                        "marinctl store init 'ducklake:postgres:dbname=lake host=HOST user=USER' --data /shared/marinctl/")
    store = LakeStore(location.parse(url, data or paths.store_data()))
    created, version = store.init()
    output.info(("created" if created else "already") + f" a marinctl store in {store.describe()}"
                + f" (schema {version}, data at {store.lake.data or 'the path it recorded'})")
    output.info(f"  readers: export MARINCTL_STORE='{store.lake.url}'"
                + (f" MARINCTL_STORE_DATA='{store.lake.data}'" if store.lake.data else ""))


def copy(
    src: Annotated[str, typer.Argument(metavar="SRC", help="The store to copy from: a .duckdb path or a DuckLake URL.")],
    dst: Annotated[str, typer.Argument(metavar="DST", help="The store to copy into (a new .duckdb file is made).")],
    json_out: Annotated[bool, typer.Option("--json", help="JSON output: {\"runs\", \"rows\"}.")] = False,
) -> None:
    from marinctl.store.copy import copy_stores

    source, target = _endpoint(src, must_exist=True), _endpoint(dst, must_exist=False)

    def progress(uid: str, done: int, total: int) -> None:
        if not json_out:
            output.info(f"  {done}/{total} {uid}")

    result = copy_stores(source, target, progress=progress)
    if json_out:
        output.print_json(result)
    else:
        print(f"copied {result['runs']} run(s), {result['rows']} history value(s) from {source.describe()} "
              f"into {target.describe()}")


def maintain(
    keep_hours: Annotated[float, typer.Option("--keep-hours", min=0.0, help=(
        "Keep snapshots (and the files they read) this many hours, for readers under way.") )] = 1.0,
) -> None:
    from marinctl.store import open_store

    store = open_store()
    if store.kind != "lake":
        print(f"{store.describe()} is an embedded store: DuckDB keeps it tidy itself, there is nothing to do")
        return
    done = store.maintain(keep_hours)
    print(f"{store.describe()}: {done['files_before']} data files before, {done['files_after']} after (rows small "
          f"writes kept in the catalog are written out to files first); {done['snapshots_expired']} snapshot(s) "
          f"expired, {done['files_deleted']} file(s) no snapshot needs deleted")


def _endpoint(spec: str, *, must_exist: bool):
    """A `store copy` side: a DuckLake URL, or a .duckdb path (which must exist for the source)."""
    from pathlib import Path

    from marinctl import paths
    from marinctl.errors import UserError
    from marinctl.store import Store, lake_store, location

    if location.is_lake_url(spec):
        data = paths.store_data() if spec.strip() == (paths.store_url() or "").strip() else None
        store = lake_store(spec, data)
        if must_exist and not store.exists():
            raise UserError(f"no marinctl store in the DuckLake {store.describe()}",
                            f"create it with `marinctl store init '{spec}'`, or name another source")
        return store
    path = Path(spec).expanduser()
    if must_exist and not path.is_file():
        raise UserError(f"no marinctl store at {spec}", "name an existing .duckdb file or a DuckLake URL as SRC")
    if path.is_dir():
        raise UserError(f"{spec} is a folder, not a marinctl store file", "name a .duckdb file")
    if not must_exist:
        paths.usable_folder(path.parent.resolve(), "folder of the store", "pick a writable folder for DST")
    return Store(paths.store_file(path.resolve()))
