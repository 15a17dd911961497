"""A loopback fake of an ntfy server's publish API, in its documented shapes (docs.ntfy.sh/publish).

    with NtfyServer(token="tk_synthetic") as ntfy:         # --notify ntfy={ntfy.url}/TOPIC
        ntfy.wait_for(lambda msgs: len(msgs) >= 1, timeout=20)
        ntfy.messages     # [Published(topic, title, message, priority, tags, headers, raw, at, status)]

Two ways to publish, both answered with the message as JSON (`{"id","time","event":"message",
"topic","message","title","priority"}`):
- `POST|PUT /TOPIC`, the message as the body, `Title`/`X-Title`, `Priority`/`X-Priority` (1–5 or
  min|low|default|high|max|urgent) and `Tags`/`X-Tags` headers;
- `POST /` (the server's root) with a JSON object `{"topic","message","title","priority","tags"}`.
A topic is 1–64 of `[-_A-Za-z0-9]`. With `token`, a publish needs `Authorization: Bearer TOKEN`
(else HTTP 401/403, as ntfy answers). `failing` (a set of topics) answers HTTP 500.

Only 127.0.0.1; every request is kept.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from dataclasses import dataclass, field

from .loopback import JsonHandler, Recorder

TOPIC = re.compile(r"^[-_A-Za-z0-9]{1,64}$")
PRIORITY_WORDS = {"min": 1, "low": 2, "default": 3, "high": 4, "max": 5, "urgent": 5}


@dataclass
class Published:
    topic: str
    title: str | None
    message: str
    priority: int
    tags: list[str]
    headers: dict[str, str]
    raw: bytes
    at: float
    status: int
    body: dict = field(default_factory=dict)


class _Handler(JsonHandler):
    owner: "NtfyServer"

    def do_PUT(self) -> None:
        self.do_POST()

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        owner, headers = self.owner, dict(self.headers.items())
        path = self.path.split("?", 1)[0]
        doc: dict = {}
        if path in ("", "/"):
            try:
                doc = json.loads(raw)
            except ValueError:
                return self._answer(400, {"code": 40001, "http": 400, "error": "invalid request: body is not JSON"})
            topic, message = str(doc.get("topic", "")), str(doc.get("message", "triggered"))
            title, prio, tags = doc.get("title"), doc.get("priority", 3), list(doc.get("tags") or [])
        else:
            topic, message = path.strip("/"), raw.decode("utf-8", "replace") or "triggered"
            title = headers.get("Title") or headers.get("X-Title")
            prio = headers.get("Priority") or headers.get("X-Priority") or 3
            tags = [t for t in (headers.get("Tags") or headers.get("X-Tags") or "").split(",") if t]
        try:
            priority = PRIORITY_WORDS[prio] if isinstance(prio, str) and prio in PRIORITY_WORDS else int(prio)
        except (TypeError, ValueError):
            priority = 0
        status = 200
        if not TOPIC.match(topic) or not 1 <= priority <= 5:
            status = 400
        elif owner.token and headers.get("Authorization") != f"Bearer {owner.token}":
            status = 401 if "Authorization" not in headers else 403
        elif topic in owner.failing:
            status = 500
        with owner.lock:
            owner.messages.append(Published(topic, title, message, priority, tags, headers, raw, time.time(), status,
                                            doc))
        if status != 200:
            return self._answer(status, {"code": status * 100 + 1, "http": status, "error": "synthetic refusal"})
        self._answer(200, {"id": secrets.token_hex(6), "time": int(time.time()), "event": "message", "topic": topic,
                           "message": message, "title": title, "priority": priority, "tags": tags})


class NtfyServer(Recorder):
    HANDLER = _Handler
    NAME = "synthetic-ntfy"

    def __init__(self, *, token: str | None = None):
        super().__init__()
        self.token = token
        self.failing: set[str] = set()
        self.messages: list[Published] = []

    def kept(self) -> list[Published]:
        return self.messages

    def accepted(self, topic: str | None = None) -> list[Published]:
        with self.lock:
            return [m for m in self.messages if m.status == 200 and (topic is None or m.topic == topic)]
