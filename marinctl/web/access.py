"""Who may open a served watch: the token, the host, the origin.

textual-serve has no authentication of its own, and each browser tab it serves is a process
reading the store. So on any address but loopback a token is required (generated when not
given), and every page and websocket request carries it as `?token=T`, else 403. On loopback
without a token, two browser-borne attacks stay closed: a page of another site opening the
websocket (its `Origin` is not this server) and DNS rebinding (a `Host` that is not a loopback
name). textual-serve's own static files (its JavaScript, CSS, fonts) are public and pass.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from typing import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web

PUBLIC = "/static/"
LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """Whether `host` (a name or an address, IPv6 with or without brackets) is this machine only."""
    name = host.strip().strip("[]").lower()
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def new_token() -> str:
    """A token no one guesses: 192 random bits, URL-safe."""
    return secrets.token_urlsafe(24)


def _hostname(host_header: str) -> str:
    return urlsplit(f"//{host_header}").hostname or ""


def middleware(token: str | None) -> Callable[..., Awaitable[web.StreamResponse]]:
    """The aiohttp middleware: with a token, `?token=T` on every request but static files; without
    one (loopback only), a loopback Host and, for the websocket, this server's own Origin."""

    @web.middleware
    async def guard(request: web.Request, handler) -> web.StreamResponse:
        if request.path.startswith(PUBLIC):
            return await handler(request)
        if token is not None:
            given = request.query.get("token", "")
            if not hmac.compare_digest(given.encode(), token.encode()):
                raise web.HTTPForbidden(text="marinctl serve: this page needs its token; open the URL "
                                             "`marinctl serve` printed (it ends in ?token=…)\n")
        else:
            if not is_loopback(_hostname(request.host)):
                raise web.HTTPForbidden(text="marinctl serve: a loopback server answers loopback names only\n")
            origin = request.headers.get("Origin")
            if origin is not None and urlsplit(origin).netloc != request.host:
                raise web.HTTPForbidden(text="marinctl serve: another site's page may not open this session\n")
        return await handler(request)

    return guard
