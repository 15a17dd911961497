"""An alert as a phone's notification: Pushover (`pushover=USER_KEY`) and ntfy (`ntfy=URL`).

Each takes the generic body (sinks.py: already inert, secrets scrubbed) at the alert's priority
on the service's own scale:

| priority  | Pushover                                   | ntfy          |
|-----------|--------------------------------------------|---------------|
| emergency | 2: repeats every 60 s for up to an hour,   | 5 (urgent)    |
|           | until `marinctl alerts ack ID` cancels it  |               |
| high      | 1                                          | 4 (high)      |
| normal    | 0                                          | 3 (default)   |
| low       | −1 (quiet)                                 | 2 (low)       |

Pushover: the user (or group) key is the sink's target, the application's token comes from
PUSHOVER_APP_TOKEN (sources/pushover.py, which also reads PUSHOVER_API_URL); an emergency's
receipt is what `alerts ack` cancels. ntfy: the topic's URL (`https://ntfy.sh/TOPIC`, or a
self-hosted server), published as JSON to the server's root (`{"topic", "title", "message",
"priority", "tags"}`), with `Authorization: Bearer $NTFY_TOKEN` when that is set (a protected
topic; credentials inside the URL work too). The title is the alert's title, the message its
summary and the command to run next. Both get the alert's `Idempotency-Key` header; neither
service drops a resend by it, but a Pushover message carries the alert's own time
(`timestamp`), so a resend shows when the alert fired.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from marinctl.errors import UserError

PUSHOVER = {"emergency": 2, "high": 1, "normal": 0, "low": -1}
NTFY = {"emergency": 5, "high": 4, "normal": 3, "low": 2}
NTFY_TAGS = {"emergency": "rotating_light", "high": "warning", "normal": "bell", "low": "memo"}
NTFY_TOKEN_ENV = "NTFY_TOKEN"
_USER_KEY = re.compile(r"^[A-Za-z0-9]{30}$")
_TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")
_HINT = "--notify pushover=USER_KEY (PUSHOVER_APP_TOKEN set) | ntfy=https://ntfy.sh/TOPIC"


def check(kind: str, target: str) -> None:
    """A phone sink's target checked before anything is synced (UserError, exit 2, naming no secret)."""
    if kind == "pushover":
        from marinctl.sources import pushover

        if not _USER_KEY.match(target):
            raise UserError("--notify pushover= needs a Pushover user or group key (30 letters and digits)", _HINT)
        if not pushover.app_token():
            raise UserError(f"--notify pushover needs the application's token in {pushover.TOKEN_ENV}"
                            " (pushover.net: Your Applications)", f"export {pushover.TOKEN_ENV}=…")
    elif kind == "ntfy":
        topic = urlsplit(target).path.rstrip("/").rsplit("/", 1)[-1]
        if not _TOPIC.match(topic):
            raise UserError("--notify ntfy= needs a topic's URL (https://ntfy.sh/TOPIC; a topic is 1–64 letters,"
                            " digits, - or _)", _HINT)


def send(sink, g: dict[str, Any], *, timeout: float, key: str) -> tuple[str | None, str | None]:
    """One try of a phone sink with the generic body `g`: (why it failed or None, Pushover's receipt)."""
    level = g.get("priority") or "normal"
    title = g["title"][:250]
    message = "\n".join(x for x in (g.get("summary"), g.get("command")) if x)[:1024] or title
    headers = {"Idempotency-Key": key}
    if sink.kind == "pushover":
        from marinctl.sources import pushover

        form: dict[str, str | int] = {"user": sink.target, "title": title, "message": message,
                                      "priority": PUSHOVER[level]}
        if isinstance(g.get("fired_at"), str):
            form["timestamp"] = int(datetime.fromisoformat(g["fired_at"]).timestamp())
        if level == "emergency":
            form.update(retry=pushover.EMERGENCY_RETRY_S, expire=pushover.EMERGENCY_EXPIRE_S)
        return pushover.send(form, timeout=timeout, headers=headers)
    from marinctl.sources.webhook import post_json

    root, topic = _ntfy_root(sink.target)
    token = os.environ.get(NTFY_TOKEN_ENV, "").strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    body = {"topic": topic, "title": title, "message": message, "priority": NTFY[level],
            "tags": ["marinctl", NTFY_TAGS[level]]}
    return post_json(root, json.dumps(body, ensure_ascii=True).encode(), timeout=timeout, headers=headers), None


def cancel(receipt: str, *, timeout: float) -> str | None:
    """Stop a Pushover emergency's repeats (None when Pushover took it)."""
    from marinctl.sources import pushover

    return pushover.cancel(receipt, timeout=timeout)


def _ntfy_root(url: str) -> tuple[str, str]:
    """(the server's root URL, the topic) of a topic's URL: JSON is published to the root."""
    parts = urlsplit(url)
    path, _, topic = parts.path.rstrip("/").rpartition("/")
    return urlunsplit((parts.scheme, parts.netloc, path + "/", "", "")), topic
