"""Pushover's message API: one notification sent (with its receipt, for an emergency), or an
emergency's repeats cancelled.

    POST {base}/1/messages.json           form: token, user, title, message, priority, timestamp
                                          (priority 2 also retry, expire) → {"status": 1, "request": …,
                                          "receipt": … (priority 2 only)}; 4xx {"status": 0, "errors": […]}
    POST {base}/1/receipts/{receipt}/cancel.json   form: token → {"status": 1}

The app token comes from PUSHOVER_APP_TOKEN (the name Marin's hero monitor reads), the base URL
from PUSHOVER_API_URL (default https://api.pushover.net; a test points it at its loopback fake).
Both the token and the user key are secrets: a failure names the host and the HTTP status,
never a form field, a URL or the reply's text. One try per call, bounded by `timeout`; retries
are the caller's (sync/delivery.py), and no redirect is followed.
"""

from __future__ import annotations

import os
import re

from marinctl import __version__
from marinctl.sources.webhook import failed, where

DEFAULT_URL = "https://api.pushover.net"
TOKEN_ENV, URL_ENV = "PUSHOVER_APP_TOKEN", "PUSHOVER_API_URL"
EMERGENCY_RETRY_S = 60      # Marin's monitor: re-alert every 60 s …
EMERGENCY_EXPIRE_S = 3600   # … for up to an hour, or until acknowledged
_RECEIPT = re.compile(r"^[A-Za-z0-9]{1,64}$")


def base_url() -> str:
    return (os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")


def app_token() -> str:
    """The application's API token ('' when the environment has none)."""
    return os.environ.get(TOKEN_ENV, "").strip()


def send(form: dict[str, str | int], *, timeout: float, headers: dict[str, str] | None = None
         ) -> tuple[str | None, str | None]:
    """POST one message (`form` without the token: it is added here); (error, receipt): error None
    when Pushover accepted it, receipt set for an emergency (priority 2)."""
    token = app_token()
    if not token:
        return f"no Pushover app token ({TOKEN_ENV} is not set)", None
    reply = _post(f"{base_url()}/1/messages.json", {**form, "token": token}, timeout, headers)
    if isinstance(reply, str):
        return reply, None
    receipt = reply.get("receipt")
    return None, receipt if isinstance(receipt, str) and _RECEIPT.match(receipt) else None


def cancel(receipt: str, *, timeout: float) -> str | None:
    """Stop an emergency's repeats on every device (None when Pushover took the cancel)."""
    token = app_token()
    if not token:
        return f"no Pushover app token ({TOKEN_ENV} is not set)"
    if not _RECEIPT.match(receipt):
        return "not a Pushover receipt"
    reply = _post(f"{base_url()}/1/receipts/{receipt}/cancel.json", {"token": token}, timeout, None)
    return reply if isinstance(reply, str) else None


def _post(url: str, form: dict[str, str | int], timeout: float, headers: dict[str, str] | None) -> dict | str:
    """The reply's JSON object when Pushover answered 2xx with status 1, else why not (host and status only)."""
    import httpx

    hdrs = {"User-Agent": f"marinctl/{__version__}", **(headers or {})}
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=False) as client:
            reply = client.post(url, data={k: str(v) for k, v in form.items()}, headers=hdrs)
    except httpx.HTTPError as exc:
        return failed(url, exc, timeout)
    if not 200 <= reply.status_code < 300:
        return f"{where(url)} answered HTTP {reply.status_code}"
    try:
        doc = reply.json()
    except ValueError:
        return f"{where(url)} answered something other than JSON"
    if not isinstance(doc, dict) or doc.get("status") != 1:
        return f"{where(url)} refused the request (status {doc.get('status') if isinstance(doc, dict) else '?'})"
    return doc
