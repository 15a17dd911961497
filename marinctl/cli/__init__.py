"""marinctl's command line: the root Typer app and the error boundary.

Each command group lives in its own module and registers itself on the root app.
Modules import only typer and marinctl's light core at import time; anything heavy
(textual, torch, wandb, scipy) is imported inside the command that needs it, so
`marinctl --help` stays fast — tests/test_import_hygiene.py holds this.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from marinctl import __version__, paths
from marinctl.errors import MarinctlError

app = typer.Typer(
    name="marinctl",
    help="Follow and reproduce open LLM training runs (Marin's hero MoE and its scaling ladder) from the terminal.",
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
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")] = False,
) -> None:
    paths.set_overrides(home=home, db=db)
    _state["debug"] = debug


from marinctl.cli import sync as _sync  # noqa: E402
from marinctl.cli import runs as _runs  # noqa: E402
from marinctl.cli import events as _events  # noqa: E402
from marinctl.cli import explain as _explain  # noqa: E402
from marinctl.cli import ladder as _ladder  # noqa: E402
from marinctl.cli import watch as _watch  # noqa: E402
from marinctl.cli import repro as _repro  # noqa: E402

for _module in (_sync, _runs, _events, _explain, _ladder, _watch, _repro):
    _module.register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; map marinctl errors to one stderr line and the exit code."""
    try:
        app(args=argv, standalone_mode=False)
    except MarinctlError as exc:
        if _state["debug"]:
            raise
        from marinctl.text import inert

        sys.stderr.write(f"marinctl: error: {inert(exc.message, single_line=True)}\n")
        if exc.hint:
            sys.stderr.write(f"  try: {exc.hint}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("marinctl: interrupted\n")
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as exc:  # click usage errors come through here in non-standalone mode
        import click

        if isinstance(exc, click.exceptions.ClickException):
            exc.show()
            sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
        if isinstance(exc, click.exceptions.Abort):
            sys.stderr.write("marinctl: aborted\n")
            sys.exit(130)
        if _state["debug"]:
            raise
        sys.stderr.write(f"marinctl: internal error: {type(exc).__name__}: {exc}\n  try: rerun with --debug and report it\n")
        sys.exit(1)
    except BaseException:
        raise
