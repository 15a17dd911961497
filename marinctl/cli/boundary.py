"""What escapes a command, said as the contract says it: one or two stderr lines and an exit code.

typer bundles its own copy of click (`typer._click`), and that copy is what a mistyped command
line raises; the separate `click` package's classes never match, so this module names typer's.
Each usage error becomes `(message, hint)` — what was wrong, naming the input, and the command
to try — with exit 2. Disk failures (a home that is a file, a read-only folder, a full disk)
become exit 1 naming the path. The closest command is suggested for a misspelt one.
"""

from __future__ import annotations

import errno
import re
from difflib import get_close_matches
from typing import Any

from typer import core as typer_core
from typer._click import exceptions as X

from marinctl.errors import RuntimeFailure

_DISK_ERRNOS = {errno.ENOSPC: "the disk is full", errno.EROFS: "the file system is read-only",
                errno.EACCES: "permission denied", errno.EPERM: "permission denied",
                errno.ENOTDIR: "a part of the path is a file, not a folder", errno.EDQUOT: "the disk quota is used up",
                errno.EFBIG: "the file reached this system's file-size limit (ulimit -f)"}
_DISK_WORDS = {"No space left on device": errno.ENOSPC, "Read-only file system": errno.EROFS,
               "Permission denied": errno.EACCES, "Disk quota exceeded": errno.EDQUOT,
               "File too large": errno.EFBIG}

_NOT_A_STORE = ("not a valid DuckDB database file", "Could not read enough bytes")


class UnknownCommand(X.UsageError):
    """A command name the group does not have, with the closest one it does."""

    def __init__(self, name: str, closest: str | None, ctx: Any):
        super().__init__(f"No such command {name!r}.", ctx)
        self.name, self.closest = name, closest


class CommandGroup(typer_core.TyperGroup):
    """typer's group, raising `UnknownCommand` (with the closest command) for a misspelt one,
    and listing each command with its whole first sentence (wrapped) instead of a cut one."""

    def format_commands(self, ctx, formatter) -> None:
        rows = [(name, cmd.get_short_help_str(limit=300)) for name in self.list_commands(ctx)
                if (cmd := self.get_command(ctx, name)) is not None and not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(self, ctx, args):
        try:
            return super().resolve_command(ctx, args)
        except X.UsageError:
            if args and not args[0].startswith("-") and self.get_command(ctx, args[0]) is None:
                names = [n for n, c in self.commands.items() if not c.hidden]
                close = get_close_matches(args[0], names, n=1, cutoff=0.6)
                raise UnknownCommand(args[0], close[0] if close else None, ctx) from None
            raise


def _path(exc: X.UsageError) -> str:
    return exc.ctx.command_path if exc.ctx is not None else "marinctl"


def _param_name(param: Any) -> str:
    if param is None:
        return "a value"
    opts = getattr(param, "opts", None) or []
    if getattr(param, "param_type_name", "") == "option" and opts:
        return max(opts, key=len)
    return param.metavar or (param.name or "value").upper()


def _bad_value(exc: X.BadParameter) -> tuple[str, str]:
    """'N must be a whole number, not 'abc'' from typer's conversion error (pydantic underneath)."""
    name = _param_name(exc.param)
    cause = exc.__cause__
    errors = cause.errors() if hasattr(cause, "errors") else []
    if errors and "input" in errors[0]:
        kind = errors[0].get("type", "")
        want = ("a whole number" if kind.startswith("int") else "a number" if kind.startswith("float")
                else "true or false" if kind.startswith("bool") else None)
        value = errors[0]["input"]
        if want:
            return f"{name} must be {want}, not {value!r}", f"`{_path(exc)} --help` shows what {name} takes"
        return f"bad value {value!r} for {name}: {exc.message}", f"`{_path(exc)} --help` shows what {name} takes"
    return f"bad value for {name}: {exc.message}", f"`{_path(exc)} --help` shows what {name} takes"


def _usage(exc: X.UsageError) -> str:
    """`marinctl export [OPTIONS] RUN`: the command's own usage line, as a hint."""
    if exc.ctx is None:
        return "marinctl --help"
    pieces = re.sub(r"\{([^{}]*)\}", r"\1", " ".join(exc.ctx.command.collect_usage_pieces(exc.ctx)))
    return f"{_path(exc)} {pieces}".strip() + f" · `{_path(exc)} --help` for more"


def describe(exc: X.UsageError) -> tuple[str, str]:
    """(message, hint) for one usage error typer raised."""
    path = _path(exc)
    if isinstance(exc, UnknownCommand):
        where = "" if path == "marinctl" else f" for `{path}`"
        if exc.closest:
            return (f"unknown command {exc.name!r}{where}: did you mean `{exc.closest}`?",
                    f"{path} {exc.closest} --help")
        return f"unknown command {exc.name!r}{where}", f"`{path} --help` lists the commands"
    if isinstance(exc, X.NoArgsIsHelpError):
        group = exc.ctx.command
        names = [n for n, c in getattr(group, "commands", {}).items() if not c.hidden]
        if names:
            return f"`{path}` needs a command: {', '.join(names)}", f"{path} {names[0]} --help"
        return f"`{path}` needs arguments", _usage(exc)
    if isinstance(exc, X.MissingParameter):
        return f"`{path}` needs {_param_name(exc.param)}", _usage(exc)
    if isinstance(exc, X.NoSuchOption):
        if re.fullmatch(r"-\d[\d.,eE]*", exc.option_name):
            return f"{exc.option_name} is not valid here: `{path}` takes no negative numbers", _usage(exc)
        close = sorted(exc.possibilities or [])
        maybe = f": did you mean {' or '.join(close[:2])}?" if close else ""
        return f"unknown option {exc.option_name} for `{path}`{maybe}", f"`{path} --help` lists its options"
    if isinstance(exc, X.BadParameter):
        return _bad_value(exc)
    if isinstance(exc, X.BadOptionUsage) and "requires an argument" in exc.message:
        return f"{exc.option_name} needs a value", _usage(exc)
    text = exc.format_message().rstrip(".")
    return text[:1].lower() + text[1:], _usage(exc)


def is_root_without_command(exc: X.UsageError) -> bool:
    """`marinctl` typed alone: show the help, as a person expects."""
    return isinstance(exc, X.NoArgsIsHelpError) and exc.ctx is not None and exc.ctx.parent is None


def help_text(exc: X.UsageError) -> str:
    return exc.ctx.get_help()


def disk_failure(exc: BaseException, db_path: str | None) -> RuntimeFailure | None:
    """A disk or permission failure below a command (OSError, or DuckDB's IO error), or a store
    file that is not one, as exit 1 naming the path; None for anything else."""
    code, where = None, None
    if isinstance(exc, OSError) and exc.errno in _DISK_ERRNOS:
        code, where = exc.errno, exc.filename or db_path
    else:
        text = str(exc)
        code = next((c for w, c in _DISK_WORDS.items() if w in text), None)
        where = db_path
    if code is None:
        if db_path and any(w in str(exc) for w in _NOT_A_STORE):
            return RuntimeFailure(f"cannot read {db_path} as a marinctl store: {str(exc).splitlines()[0]}",
                                  "point --db at a marinctl store or a new file; a store cut short by a full disk "
                                  "can be moved aside and synced again")
        return None
    return RuntimeFailure(f"cannot write {where}: {_DISK_ERRNOS[code]}",
                          "free some space or pick a writable folder: marinctl --home DIR … (or set MARINCTL_HOME)")


def store_failure(exc: BaseException):
    """A DuckLake's failure that escaped its store (the catalog server gone between statements) as
    the store's own one line; None when no lake is in use or it is something else."""
    from marinctl import paths
    from marinctl.errors import MarinctlError

    url = paths.store_url()
    if not url:
        return None
    try:
        from marinctl.store import lake_store

        store = lake_store(url, paths.store_data())
    except MarinctlError:
        return None
    if type(exc).__module__.split(".")[0] == "psycopg":
        from marinctl.store.pglocks import _unreachable

        return _unreachable(store.describe(), exc)
    mapped = store.failure(exc)
    return mapped if isinstance(mapped, MarinctlError) else None
