"""One JSON POST to an alert sink's URL (a webhook, Slack's or Discord's incoming webhook), bounded in time.

Alert delivery (sync/delivery.py) retries on its own schedule, so a try here is exactly one
request: no retries, no redirects followed (a redirect could carry the body to another host),
every phase bounded by `timeout`, and the reply's body never read. Slack and Discord put the
webhook's secret in the URL's path, so what a failure says names the host only.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from marinctl import __version__


def where(url: str) -> str:
    """The host (and port) of a URL, what a message may say of it."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{host}:{parts.port}" if parts.port else host


def failed(url: str, exc: Exception, timeout: float) -> str:
    """Why a request to `url` got no answer, naming its host only (httpx's error as words)."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer from {where(url)} within {timeout:g} s"
    if isinstance(exc, httpx.ConnectError):
        return f"cannot connect to {where(url)}"
    return f"{type(exc).__name__} talking to {where(url)}"


def post_json(url: str, body: bytes, *, timeout: float, headers: dict[str, str] | None = None) -> str | None:
    """POST `body` (JSON) to `url` (with `headers` besides the JSON ones); None when the server
    accepted it (2xx), else why not, in words that name neither the URL's path nor its query."""
    import httpx

    headers = {"Content-Type": "application/json", "User-Agent": f"marinctl/{__version__}", **(headers or {})}
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=False) as client:
            with client.stream("POST", url, content=body, headers=headers) as reply:
                status = reply.status_code
    except httpx.HTTPError as exc:
        return failed(url, exc, timeout)
    if 200 <= status < 300:
        return None
    return f"{where(url)} answered HTTP {status}"
