"""One place for HTTP behaviour shared by the W&B and GitHub clients.

Retries come from tenacity (a well-kept library) with one wait rule of our own: a server
that says how long to wait (Retry-After in seconds or as an HTTP date, or W&B's
RateLimit-Reset) is obeyed; otherwise exponential back-off with jitter. Requests are
paced so a long sync stays polite.

Without a network a person should not wait in silence: a client says it is connecting on
its first request and says each retry as it happens, through the notice callback the caller
installs with `notices(...)` (sources never print; `marinctl sync` prints them on stderr).
A host that does not resolve is not worth eight attempts: two, then the failure says so.
"""

from __future__ import annotations

import contextlib
import contextvars
import email.utils
import socket
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Callable, Iterator

if TYPE_CHECKING:   # httpx and tenacity load with the first request: a local sync never needs them
    import httpx
    from tenacity import RetryCallState

DNS_ATTEMPTS = 2          # a name that did not resolve twice will not resolve on the eighth try

_notice: contextvars.ContextVar[Callable[[str], None] | None] = contextvars.ContextVar("marinctl_http_notice",
                                                                                       default=None)
_announced: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar("marinctl_http_announced",
                                                                                    default=None)


@contextlib.contextmanager
def notices(callback: Callable[[str], None], *, connecting: bool = True) -> Iterator[None]:
    """Within this block, retry notices of this thread's clients go to `callback`, and (unless
    `connecting` is False) 'connecting to …' once per server."""
    token, seen = _notice.set(callback), _announced.set(frozenset() if connecting else None)
    try:
        yield
    finally:
        _notice.reset(token)
        _announced.reset(seen)


def notice(message: str) -> None:
    callback = _notice.get()
    if callback is not None:
        callback(message)


def announce(service: str, url: str) -> None:
    """'connecting to W&B at URL …', once per service and URL inside a `notices` block."""
    key, seen = f"{service} {url}", _announced.get()
    if _notice.get() is None or seen is None or key in seen:
        return
    _announced.set(seen | {key})
    notice(f"connecting to {service} at {url} …")


def unresolvable(exc: BaseException | None) -> bool:
    """True when `exc` (or what caused it) is a host name that did not resolve."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, socket.gaierror):
            return True
        text = str(exc)
        if any(w in text for w in ("Name or service not known", "Temporary failure in name resolution",
                                   "nodename nor servname", "No address associated with hostname",
                                   "getaddrinfo failed")):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def network_failure(exc: BaseException, url: str) -> str:
    """A transport error in words: 'cannot resolve api.wandb.ai', 'connection refused by …', 'timed out …'."""
    import httpx

    host = httpx.URL(url).host
    if unresolvable(exc):
        return f"cannot resolve {host} (no network, or a wrong address)"
    if isinstance(exc, httpx.TimeoutException):
        return f"{host} did not answer in time"
    if "refused" in str(exc).lower():
        return f"connection refused by {host}"
    return f"{type(exc).__name__} talking to {host}"


class RetryStop:
    """tenacity stop: `attempts` tries, but only DNS_ATTEMPTS when the host does not resolve."""

    def __init__(self, attempts: int):
        self.attempts = attempts

    def __call__(self, state: RetryCallState) -> bool:
        exc = state.outcome.exception() if state.outcome else None
        limit = min(self.attempts, DNS_ATTEMPTS) if unresolvable(exc) else self.attempts
        return state.attempt_number >= limit


def say_retry(service: str, url: str, attempts: int) -> Callable[[RetryCallState], None]:
    """tenacity before_sleep: one notice per retry, what failed and when the next try comes."""
    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        limit = min(attempts, DNS_ATTEMPTS) if unresolvable(exc) else attempts
        notice(f"{service} at {url}: {exc}; try {state.attempt_number + 1} of {limit} in {wait:.1f} s")
    return before_sleep


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
        from tenacity import wait_exponential_jitter

        self._backoff = wait_exponential_jitter(multiplier=initial, max=maximum, jitter=initial)
        self.cap = cap

    def __call__(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, Retryable) and exc.wait is not None:
            return min(exc.wait, self.cap)
        return self._backoff(state)


class Pacer:
    """At most one request per `interval` seconds across threads, and none while a server's
    "wait" holds: a 429 seen by one thread holds every thread's next request (`hold`), so
    concurrent fetches back off together instead of each meeting the limit on its own."""

    def __init__(self, interval: float):
        self.interval = interval
        self._next = 0.0
        self._held_until = 0.0
        self._lock = threading.Lock()

    def hold(self, seconds: float) -> None:
        """No request from any thread before `seconds` from now (extends, never shortens, a hold)."""
        with self._lock:
            self._held_until = max(self._held_until, time.monotonic() + max(seconds, 0.0))

    def wait(self) -> None:
        with self._lock:
            now = time.monotonic()
            start = max(now, self._held_until, self._next if self.interval > 0 else 0.0)
            if self.interval > 0:
                self._next = start + self.interval
        if start > now:
            time.sleep(start - now)


class Concurrency:
    """How many requests may be in flight at once: up to `limit`, halved at each rate limit and
    grown back by one after `relax_after` answers in a row (additive increase, multiplicative
    decrease, as TCP treats congestion): a sync that met a 429 stays gentler for a while."""

    def __init__(self, limit: int, relax_after: int = 20):
        self.limit = max(1, limit)
        self.allowed = self.limit
        self.relax_after = relax_after
        self._busy = 0
        self._ok = 0
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        with self._cond:
            while self._busy >= self.allowed:
                self._cond.wait()
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def throttle(self) -> None:
        with self._cond:
            self.allowed = max(1, self.allowed // 2)
            self._ok = 0

    def relax(self) -> None:
        with self._cond:
            self._ok += 1
            if self._ok >= self.relax_after and self.allowed < self.limit:
                self.allowed += 1
                self._ok = 0
                self._cond.notify_all()
