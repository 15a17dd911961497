"""One place for HTTP behaviour shared by the W&B and GitHub clients.

Retries come from tenacity (a well-kept library) with one wait rule of our own: a server
that says how long to wait (Retry-After in seconds or as an HTTP date, or W&B's
RateLimit-Reset) is obeyed; otherwise exponential back-off with jitter. Requests are
paced so a long sync stays polite.
"""

from __future__ import annotations

import email.utils
import threading
import time
from datetime import datetime, timezone

import httpx
from tenacity import RetryCallState, wait_exponential_jitter


class Retryable(Exception):
    """A failure worth another try; `wait` is what the server asked for, if it said."""

    def __init__(self, message: str, wait: float | None = None):
        super().__init__(message)
        self.wait = wait


def server_wait(headers: httpx.Headers) -> float | None:
    """Seconds the server asks us to wait (Retry-After, RateLimit-Reset), if any."""
    for name in ("retry-after", "ratelimit-reset"):
        raw = headers.get(name)
        if not raw:
            continue
        raw = raw.strip()
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass
        try:
            when = email.utils.parsedate_to_datetime(raw)
            if when.tzinfo is None:
                when = when.replace(tzinfo=timezone.utc)
            return max(0.0, (when - datetime.now(timezone.utc)).total_seconds())
        except (TypeError, ValueError):
            continue
    return None


class RetryWait:
    """tenacity wait strategy: the server's word if it gave one (capped), else back-off."""

    def __init__(self, initial: float = 0.5, maximum: float = 30.0, cap: float = 120.0):
        self._backoff = wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial)
        self.cap = cap

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Retryable) and exc.wait is not None:
            return min(exc.wait, self.cap)
        return self._backoff(state)


class Pacer:
    """At most one request per `interval` seconds across threads."""

    def __init__(self, interval: float):
        self.interval = interval
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if self.interval <= 0:
            return
        with self._lock:
            now = time.monotonic()
            delay = self._next - now
            self._next = max(now, self._next) + self.interval
        if delay > 0:
            time.sleep(delay)
