"""marinctl's command line: the root Typer app and the error boundary.

Each command group lives in its own module and registers itself on the root app.
Modules import only typer and marinctl's light core at import time; anything heavy
(textual, torch, wandb, scipy) is imported inside the command that needs it, so
`marinctl --help` stays fast — tests/test_import_hygiene.py holds this.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from marinctl import __version__, paths
from marinctl.cli.boundary import CommandGroup
from marinctl.errors import MarinctlError, is_interrupt

app = typer.Typer(
    name="marinctl",
    cls=CommandGroup,
    help="Follow and reproduce open LLM training runs (Marin's hero MoE and its scaling ladder) from the terminal.",
    epilog="Start offline with `marinctl demo`, or with network `marinctl sync marin && marinctl watch`. "
           "Every command has --help; exit codes: 0 ok, 1 runtime failure, 2 bad input.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"marinctl {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    db: Annotated[Optional[Path], typer.Option("--db", help="DuckDB file (default: <home>/marinctl.duckdb).")] = None,
    home: Annotated[Optional[Path], typer.Option("--home", help="Data home (default: $MARINCTL_HOME, the checkout's cache/, or the user cache dir).")] = None,
    store: Annotated[Optional[str], typer.Option("--store", metavar="URL", help=(
        "A team's DuckLake instead of the embedded file (default: $MARINCTL_STORE): "
        "ducklake:postgres:dbname=… host=… port=… user=…, or ducklake:PATH.ducklake."))] = None,
    store_data: Annotated[Optional[str], typer.Option("--store-data", metavar="PATH", help=(
        "Where the DuckLake's data is, a folder or s3://bucket/prefix/ (default: $MARINCTL_STORE_DATA, "
        "else the one the lake recorded)."))] = None,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    paths.set_overrides(home=home, db=db)
    paths.set_store(store, store_data)
    _state["debug"] = debug


from marinctl.cli import sync as _sync  # noqa: E402
from marinctl.cli import runs as _runs  # noqa: E402
from marinctl.cli import events as _events  # noqa: E402
from marinctl.cli import explain as _explain  # noqa: E402
from marinctl.cli import ladder as _ladder  # noqa: E402
from marinctl.cli import watch as _watch  # noqa: E402
from marinctl.cli import repro as _repro  # noqa: E402
from marinctl.cli import serve as _serve  # noqa: E402
from marinctl.cli import alerts as _alerts  # noqa: E402
from marinctl.cli import diff as _diff  # noqa: E402
from marinctl.cli import store as _store  # noqa: E402

for _module in (_sync, _runs, _events, _explain, _ladder, _watch, _repro, _serve, _alerts, _diff, _store):
    _module.register(app)


def run() -> None:
    """The `marinctl` process (the console script, `python -m marinctl`): `main`, with Arrow on the
    C library's allocator. Only here: `marinctl.open()` in a notebook, and `main` called in-process,
    keep Arrow's own."""
    # Arrow's default jemalloc hands freed pages back to the OS and faults them in again: a project
    # sync spent three times the kernel time of the system allocator doing so (bench/NOTES.md)
    os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    try:
        main()
    except SystemExit as exc:
        _exit_joined(exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1))
        raise
    _exit_joined(0)


def _exit_joined(code: int) -> None:
    """Before the interpreter exits with `code`: every thread a command started joined, within a
    bound (marinctl/threads.py); one still running then ends the process here, unfinalised."""
    import threading

    from marinctl.threads import join_others

    if threading.active_count() > 1 and join_others():
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; say what went wrong in one or two stderr lines, with the exit code."""
    from typer import Abort
    from typer._click.exceptions import ClickException, UsageError

    from marinctl.cli import boundary

    try:
        code = app(args=argv, standalone_mode=False)
    except MarinctlError as exc:
        if _state["debug"]:
            raise
        _fail(exc.message, exc.hint, exc.exit_code)
    except UsageError as exc:
        if boundary.is_root_without_command(exc):
            sys.stdout.write(boundary.help_text(exc) + "\n")
            sys.exit(0)
        message, hint = boundary.describe(exc)
        _fail(message, hint, 2)
    except ClickException as exc:
        _fail(exc.format_message(), None, exc.exit_code)
    except (KeyboardInterrupt, Abort):
        sys.stderr.write("marinctl: interrupted\n")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:
        if _state["debug"]:
            raise
        if is_interrupt(exc):
            sys.stderr.write("marinctl: interrupted\n")
            sys.exit(130)
        disk = boundary.disk_failure(exc, _db_path_or_none()) or boundary.store_failure(exc)
        if disk is not None:
            _fail(disk.message, disk.hint, disk.exit_code)
        _fail(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug and report it", 1, prefix="marinctl: ")
    if isinstance(code, int) and code:
        sys.exit(code)


def _fail(message: str, hint: str | None, exit_code: int, prefix: str = "marinctl: error: ") -> None:
    """Print the one or two lines and exit. A hint that already starts with "try" is not prefixed twice."""
    from marinctl.text import inert

    sys.stderr.write(f"{prefix}{inert(message, single_line=True)}\n")
    if hint:
        hint = re.sub(r"^\s*try\b:?\s*", "", hint, flags=re.I)
        sys.stderr.write(f"  try: {inert(hint, single_line=True)}\n")
    sys.exit(exit_code)


def _db_path_or_none() -> str | None:
    try:
        return str(paths.db_path())
    except Exception:
        return None
