"""`marinctl serve`'s server: textual-serve's, with a door, a session limit and sessions that end.

textual-serve (`Server`) serves a page and, per browser tab, a websocket driving one app
process (`AppService`) run from a shell command: here `marinctl watch TARGET`, a black box.
`WatchServer` subclasses it and changes what it must, at the seams the class has:
- `_make_app`: every request passes `access.middleware` (the token, or loopback's checks);
- `handle_index`: textual-serve's own template, with the websocket URL taken from the request's
  Host (a server bound to 0.0.0.0 is reached by a name only the browser knows) and carrying
  the token, a `<title>` naming the run (the template has none), and `no-store`, so that a
  page the browser has left is not kept alive in its back/forward cache;
- `handle_websocket`: at most `max_sessions` app processes at once (503 beyond), and a tab's
  process ends when its websocket closes: textual-serve asks the app to quit; one still running
  `QUIT_WAIT_S` later is terminated, then killed (`Session.end`).
`run` binds the port itself (port 0 picks a free one) and says where it listens through a callback.
"""

from __future__ import annotations

import asyncio
import html
import logging
import signal
from typing import Any, Callable

import aiohttp_jinja2
from aiohttp import web
from textual_serve.app_service import AppService
from textual_serve.server import Server, to_int

from marinctl.web import access

log = logging.getLogger("marinctl.serve")

QUIT_WAIT_S = 5.0        # a watch asked to quit has this long before SIGTERM
KILL_WAIT_S = 3.0        # and this long after it before SIGKILL
FULL = ("marinctl serve: {n} session(s) are open, the most this server runs (--max-sessions); "
        "close a tab, or restart with --max-sessions {more}\n")


class Session(AppService):
    """One tab's app process; `end` makes sure it is gone."""

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    async def end(self) -> None:
        """Ask the app to quit; terminate, then kill, what is still running after the waits."""
        try:
            await asyncio.wait_for(self.stop(), QUIT_WAIT_S)
        except (asyncio.TimeoutError, OSError):
            pass
        proc = self._process
        if proc is None or proc.returncode is not None:
            return
        for send, wait in ((proc.terminate, KILL_WAIT_S), (proc.kill, None)):
            try:
                send()
            except ProcessLookupError:
                return
            try:
                await asyncio.wait_for(proc.wait(), wait)
                return
            except asyncio.TimeoutError:
                continue


class WatchServer(Server):
    """textual-serve's server for one command, behind `access` and with at most `max_sessions` tabs."""

    def __init__(self, command: str, *, host: str, port: int, title: str, token: str | None, max_sessions: int):
        super().__init__(command, host=host, port=port, title=title)
        self.token = token
        self.max_sessions = max_sessions
        self.sessions: set[Session] = set()

    async def _make_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(access.middleware(self.token))
        return app

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve prints its logo here; the CLI says where it listens instead."""

    async def on_shutdown(self, app: web.Application) -> None:
        await asyncio.gather(*(s.end() for s in list(self.sessions)), return_exceptions=True)

    def _full(self) -> web.HTTPServiceUnavailable | None:
        if len(self.sessions) < self.max_sessions:
            return None
        return web.HTTPServiceUnavailable(text=FULL.format(n=len(self.sessions), more=self.max_sessions + 1))

    async def handle_index(self, request: web.Request) -> web.Response:
        if (full := self._full()) is not None:
            raise full
        router = request.app.router
        base = f"{request.scheme}://{request.host}"
        ws = f"{'wss' if request.scheme == 'https' else 'ws'}://{request.host}{router['websocket'].url_for()}"
        if self.token is not None:
            # textual.js appends "?width=…&height=…" to this URL: after "&" that reads as a parameter
            # named "?width", which handle_websocket reads back
            ws += f"?token={self.token}&"
        context = {
            "font_size": to_int(request.query.get("fontsize", "16"), 16),
            "app_websocket_url": ws,
            "config": {"static": {"url": base + str(router["static"].url_for(filename="/")).rstrip("/") + "/"}},
            "application": {"name": self.title},
        }
        response = aiohttp_jinja2.render_template("app_index.html", request, context)
        response.text = response.text.replace("<head>", f"<head>\n    <title>{html.escape(self.title)}</title>", 1)
        # the page holds the token, and a page kept in the back/forward cache keeps its websocket (and
        # so its watch process) open after the browser has left it: neither cache may keep it
        response.headers["Cache-Control"] = "no-store"
        return response

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        if (full := self._full()) is not None:
            raise full
        size = {k: to_int(request.query.get(k) or request.query.get(f"?{k}", ""), d)
                for k, d in (("width", 80), ("height", 24))}
        websocket = web.WebSocketResponse(heartbeat=15)
        session = Session(self.command, write_bytes=websocket.send_bytes, write_str=websocket.send_str,
                          close=websocket.close, download_manager=self.download_manager, debug=self.debug)
        self.sessions.add(session)
        try:
            await websocket.prepare(request)
            await session.start(size["width"], size["height"])
            await self._process_messages(websocket, session)
        except asyncio.CancelledError:
            await websocket.close()
        except Exception as exc:            # a broken socket or a process that would not start: this tab only
            log.warning("session ended: %s", exc)
        finally:
            self.sessions.discard(session)
            await session.end()
        return websocket

    async def run(self, ready: Callable[[str, int], Any]) -> None:
        """Serve until SIGINT/SIGTERM; `ready(host, port)` once listening (port 0: a free one)."""
        runner = web.AppRunner(await self._make_app(), handle_signals=False, shutdown_timeout=QUIT_WAIT_S)
        await runner.setup()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            site = web.TCPSite(runner, self.host, self.port)
            await site.start()
            ready(self.host, runner.addresses[0][1])
            await stop.wait()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
            await runner.cleanup()
