"""`serve [TARGET]`: `watch` in a browser — one `marinctl watch TARGET` process per tab (web/)."""

from __future__ import annotations

import errno
import os
import re
import shlex
import socket
import sys
from typing import Annotated, Optional

import typer

from marinctl.cli import complete
from marinctl.errors import RuntimeFailure, UserError

TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,}")      # URL-safe, so it travels in a query unescaped


def register(app: typer.Typer) -> None:
    """Add this module's commands to the root app."""
    app.command("serve", help=(
        "The watch view in a browser (textual-serve): each tab runs its own `marinctl watch TARGET`. "
        "Loopback by default; on any other --host every page and websocket request must carry "
        "?token=T (generated and printed unless --token is given), else 403. Needs the [web] extra."))(serve)


def serve(
    target: Annotated[Optional[str], typer.Argument(metavar="TARGET", help="What each tab watches, as `marinctl watch TARGET` takes it (default: the hero lineage).", autocompletion=complete.targets)] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on; any but loopback requires a token.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on (0: a free one, printed).")] = 8000,
    token: Annotated[Optional[str], typer.Option("--token", metavar="T", help="The token every request must carry as ?token=T (16+ URL-safe characters; generated off loopback when not given).")] = None,
    max_sessions: Annotated[int, typer.Option("--max-sessions", metavar="N", help="Browser tabs served at once (each is a watch process).")] = 4,
) -> None:
    from marinctl import extras

    extras.require("web", "marinctl serve")
    if not 0 <= port <= 65535:
        raise UserError(f"--port must be 0–65535, not {port}", "marinctl serve --port 8000 (0: a free port)")
    if max_sessions < 1:
        raise UserError(f"--max-sessions must be 1 or more, not {max_sessions}", "marinctl serve --max-sessions 4")
    if token is not None and not TOKEN.fullmatch(token):
        raise UserError("--token must be 16 or more URL-safe characters (letters, digits, - _ . ~)",
                        "leave it out and marinctl serve generates one")
    from marinctl.web import access

    if token is None and not access.is_loopback(host):
        token = access.new_token()
    command, title = _watch_command(target)
    from marinctl.cli import output
    from marinctl.web.server import WatchServer

    server = WatchServer(command, host=host, port=port, title=title, token=token, max_sessions=max_sessions)

    def ready(bound: str, actual: int) -> None:
        query = f"?token={token}" if token else ""
        shown = socket.gethostname() if bound in ("0.0.0.0", "::", "") else bound
        shown = f"[{shown}]" if ":" in shown else shown
        print(f"{title} at http://{shown}:{actual}/{query}", flush=True)
        output.info(f"  up to {max_sessions} tab(s), each its own watch process"
                    + (" · every request needs the token" if token else " · loopback only") + " · Ctrl-C stops")

    import asyncio

    try:
        asyncio.run(server.run(ready))
    except OSError as exc:
        raise _listen_failure(exc, host, port) from None
    output.info("marinctl serve: stopped")


def _watch_command(target: str | None) -> tuple[str, str]:
    """(the shell command each tab runs, the page title); a bad TARGET fails here, exit 2."""
    from marinctl import paths
    from marinctl.store import open_store
    from marinctl.store.lineage import resolve_target
    from marinctl.sync import plan_watch

    store = open_store()
    plan_watch(store, target)
    name = target
    if name is None:
        with store.connect() as con:
            try:
                name = resolve_target(con, None).name
            except UserError:
                name = None                 # nothing stored yet: watch says so in the page
    options, env = store.command_options()
    # a lake's URL reaches the tabs through the environment they inherit, never a command line
    os.environ.update(env)
    argv = [sys.executable, "-m", "marinctl", "--home", str(paths.home()), *options, "watch",
            *([target] if target is not None else [])]
    # exec: the tab's process is watch itself, so ending it ends the app, not a shell around it
    return "exec " + " ".join(shlex.quote(a) for a in argv), "marinctl watch" + (f" {name}" if name else "")


def _listen_failure(exc: OSError, host: str, port: int) -> Exception:
    if exc.errno == errno.EADDRINUSE:
        return RuntimeFailure(f"cannot listen on {host}:{port}: the port is in use",
                              "pick another with --port, or --port 0 for a free one")
    if isinstance(exc, socket.gaierror) or exc.errno in (errno.EADDRNOTAVAIL, errno.EINVAL):
        return UserError(f"cannot listen on {host!r}: it is not an address of this machine",
                         "marinctl serve --host 127.0.0.1 (or 0.0.0.0 for every address, with a token)")
    if exc.errno == errno.EACCES:
        return RuntimeFailure(f"cannot listen on {host}:{port}: permission denied", "use a port above 1023")
    return RuntimeFailure(f"cannot listen on {host}:{port}: {exc.strerror or exc}", "try another --host or --port")
