"""A loopback webhook receiver for alert tests and benchmarks: records every POST, can fail on purpose.

    with WebhookReceiver(fail_first=1) as hook:        # answers the first POST with HTTP 500
        ... marinctl sync … --follow --notify webhook={hook.url}/generic
        hook.wait_for(lambda posts: len(posts) >= 1, timeout=20)
        hook.posts     # [Post(path, body (parsed JSON), at (time.time()), status answered, headers)]
    hook.failing.add("/down")      # every POST under /down answered 500 until it is removed
    hook.hold.clear()              # POSTs wait (unanswered) until `hold` is set again; `held` counts them

Every POST is kept, the failed ones too (`status` says what it was answered). Only 127.0.0.1.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from .loopback import Recorder


@dataclass
class Post:
    path: str
    body: Any
    raw: bytes
    at: float
    status: int
    headers: dict[str, str] = field(default_factory=dict)


class _Handler(BaseHTTPRequestHandler):
    owner: "WebhookReceiver"

    def log_message(self, *args) -> None:   # quiet
        pass

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        at = time.time()
        owner = self.owner
        with owner.lock:
            n = len(owner.posts)
            failing = n < owner.fail_first or any(self.path.startswith(p) for p in owner.failing)
            status = 500 if failing else 204 if self.path.startswith("/discord") else 200
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            owner.posts.append(Post(self.path, body, raw, at, status, dict(self.headers.items())))
            owner.held += 0 if owner.hold.is_set() else 1
        owner.hold.wait(60)
        if owner.delay_s:
            time.sleep(owner.delay_s)
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class WebhookReceiver(Recorder):
    HANDLER = _Handler
    NAME = "synthetic-webhook"

    def __init__(self, *, fail_first: int = 0, delay_s: float = 0.0):
        super().__init__()
        self.fail_first, self.delay_s = fail_first, delay_s
        self.failing: set[str] = set()      # path prefixes answered 500
        self.hold = threading.Event()       # cleared: POSTs wait unanswered (a sink that hangs)
        self.hold.set()
        self.held = 0                       # POSTs that waited
        self.posts: list[Post] = []

    def kept(self) -> list[Post]:
        return self.posts

    def stop(self) -> None:
        self.hold.set()
        super().stop()

    def accepted(self, path_prefix: str = "") -> list[Post]:
        """POSTs answered 2xx (under `path_prefix`), in arrival order."""
        with self.lock:
            return [p for p in self.posts if p.status < 300 and p.path.startswith(path_prefix)]

