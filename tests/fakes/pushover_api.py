"""A loopback fake of Pushover's message API, in its documented request shapes (pushover.net/api).

    with PushoverAPI(token="synthetic-app-token") as api:      # PUSHOVER_API_URL=api.url
        ... marinctl sync … --follow --notify pushover=USER_KEY      (PUSHOVER_APP_TOKEN in the environment)
        api.wait_for(lambda msgs: len(msgs) >= 1, timeout=20)
        api.messages      # [Message(form: the POSTed fields, receipt, at, status answered)]
        api.cancelled     # receipts cancelled through /1/receipts/{receipt}/cancel.json

- `POST /1/messages.json`, form-encoded: `token` (the application's), `user`, `message` (required,
  at most 1,024 characters), `title` (at most 250), `priority` (−2…2; 2 needs `retry` ≥ 30 and
  `expire` ≤ 10,800), `timestamp`. Answers `{"status": 1, "request": "…"}` and, for priority 2,
  a `receipt`; a wrong token or user, a missing field or a bad priority is HTTP 400
  `{"status": 0, "errors": […]}`.
- An emergency "repeats until acknowledged" on Pushover's side: the fake keeps its receipt
  `active` until `POST /1/receipts/{receipt}/cancel.json` (form `token`) cancels it; `repeating()`
  lists the receipts still repeating.
- `fail_first`: the first N messages are answered HTTP 500 (a failing sink).

Only 127.0.0.1; every request is kept.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from urllib.parse import parse_qs

from .loopback import JsonHandler, Recorder

USER_KEY_LEN = 30


@dataclass
class Message:
    form: dict[str, str]
    raw: bytes
    headers: dict[str, str]
    receipt: str | None
    at: float
    status: int


class _Handler(JsonHandler):
    owner: "PushoverAPI"

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        form = {k: v[-1] for k, v in parse_qs(raw.decode("utf-8", "replace"), keep_blank_values=True).items()}
        owner = self.owner
        if self.path == "/1/messages.json":
            status, doc, receipt = owner._message(form)
            with owner.lock:
                owner.messages.append(Message(form, raw, dict(self.headers.items()), receipt, time.time(), status))
            return self._answer(status, doc)
        if self.path.startswith("/1/receipts/") and self.path.endswith("/cancel.json"):
            receipt = self.path[len("/1/receipts/"):-len("/cancel.json")]
            with owner.lock:
                ok = form.get("token") == owner.token and receipt in owner.receipts
                if ok:
                    owner.receipts[receipt] = "cancelled"
                    owner.cancelled.append(receipt)
            return self._answer(200 if ok else 400, {"status": 1 if ok else 0, "request": secrets.token_hex(8)})
        self._answer(404, {"status": 0, "errors": ["not found"]})


class PushoverAPI(Recorder):
    HANDLER = _Handler
    NAME = "synthetic-pushover"

    def __init__(self, *, token: str, fail_first: int = 0):
        super().__init__()
        self.token, self.fail_first = token, fail_first
        self.messages: list[Message] = []
        self.receipts: dict[str, str] = {}       # receipt -> 'active' | 'cancelled'
        self.cancelled: list[str] = []

    def kept(self) -> list[Message]:
        return self.messages

    def _message(self, form: dict[str, str]) -> tuple[int, dict, str | None]:
        with self.lock:
            if len(self.messages) < self.fail_first:
                return 500, {"status": 0, "errors": ["synthetic outage"]}, None
        errors = []
        if form.get("token") != self.token:
            errors.append("application token is invalid")
        if len(form.get("user", "")) != USER_KEY_LEN:
            errors.append("user identifier is not a valid user, group, or subscribed user key")
        if not form.get("message") or len(form["message"]) > 1024:
            errors.append("message cannot be blank, and is at most 1024 characters")
        if len(form.get("title", "")) > 250:
            errors.append("title is at most 250 characters")
        try:
            priority = int(form.get("priority", "0"))
        except ValueError:
            priority = 99
        if not -2 <= priority <= 2:
            errors.append("priority is invalid")
        if priority == 2:
            try:
                ok = int(form.get("retry", "0")) >= 30 and 0 < int(form.get("expire", "0")) <= 10_800
            except ValueError:
                ok = False
            if not ok:
                errors.append("retry must be at least 30 and expire at most 10800 for emergency priority")
        if errors:
            return 400, {"status": 0, "errors": errors, "request": secrets.token_hex(8)}, None
        doc = {"status": 1, "request": secrets.token_hex(8)}
        receipt = None
        if priority == 2:
            receipt = secrets.token_hex(15)
            with self.lock:
                self.receipts[receipt] = "active"
            doc["receipt"] = receipt
        return 200, doc, receipt

    def repeating(self) -> list[str]:
        """Emergency receipts Pushover would still be repeating (neither cancelled nor expired)."""
        with self.lock:
            return [r for r, state in self.receipts.items() if state == "active"]

    def accepted(self) -> list[Message]:
        with self.lock:
            return [m for m in self.messages if m.status == 200]
