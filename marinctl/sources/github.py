"""GitHub's REST API over plain httpx: issues, comments, label lists, commits, contents.

Why its own client: marinctl needs exactly three behaviours a generic library hides —
conditional requests (a stored ETag sent as If-None-Match, so an unchanged issue costs
a 304 and no download), rate-limit manners (the primary limit's X-RateLimit-Remaining /
X-RateLimit-Reset and the secondary limit's 403/429 + Retry-After: wait when the wait is
short, otherwise stop with the time to come back), and Link-header pagination the caller
can resume page by page. Anonymous access works (60 requests/hour); GITHUB_TOKEN or
GH_TOKEN is sent as a bearer token when set and never printed, logged or stored.
GITHUB_API_URL overrides the base URL (GitHub Enterprise, and the tests' server).
"""

from __future__ import annotations

import base64
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable
from urllib.parse import parse_qsl, urlencode, urlparse, urlunparse

import httpx

from marinctl import __version__
from marinctl.errors import RuntimeFailure, Unreachable, UserError
from marinctl.sources.http import DNS_ATTEMPTS, announce, network_failure, notice, server_wait, unresolvable

DEFAULT_API_URL = "https://api.github.com"
DEFAULT_MAX_WAIT = 60.0
PER_PAGE = 100


def api_url() -> str:
    return (os.environ.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")


def env_token() -> str | None:
    for name in ("GITHUB_TOKEN", "GH_TOKEN"):
        value = (os.environ.get(name) or "").strip()
        if value:
            return value
    return None


def max_wait_default() -> float:
    raw = os.environ.get("MARINCTL_GITHUB_MAX_WAIT")
    try:
        return float(raw) if raw else DEFAULT_MAX_WAIT
    except ValueError:
        return DEFAULT_MAX_WAIT


class RateLimitStop(RuntimeFailure):
    """GitHub asked for a longer pause than we wait for; `retry_at` says when to come back."""

    def __init__(self, message: str, hint: str, retry_at: datetime):
        super().__init__(message, hint)
        self.retry_at = retry_at


@dataclass
class Page:
    """One response: `status` 200 (with `data`) or 304 (unchanged, no body)."""

    url: str
    status: int
    data: Any
    etag: str | None
    next_url: str | None
    nbytes: int


def with_page(url: str, page: int, per_page: int | None = None) -> str:
    """`url` with its `page` (and optionally `per_page`) query parameter set."""
    parts = urlparse(url)
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    query["page"] = str(page)
    if per_page is not None:
        query["per_page"] = str(per_page)
    return urlunparse(parts._replace(query=urlencode(query)))


def page_number(url: str) -> int:
    return int(dict(parse_qsl(urlparse(url).query)).get("page", "1") or 1)


class GitHubClient:
    """A small, polite REST client. All failures surface as marinctl errors."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        max_wait: float | None = None,
        max_attempts: int = 5,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.base_url = (base_url or api_url()).rstrip("/")
        token = token if token is not None else env_token()
        self._has_token = bool(token)
        self.max_wait = max_wait_default() if max_wait is None else max_wait
        self._max_attempts = max_attempts
        self._sleep = sleep
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": f"marinctl/{__version__}",
        }
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._client = httpx.Client(timeout=httpx.Timeout(timeout, connect=10.0), headers=headers,
                                    transport=transport, follow_redirects=True)
        self.remaining: int | None = None
        self.reset_at: float | None = None
        self.requests = 0
        self.bytes_downloaded = 0
        self.waited = 0.0

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "GitHubClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- URLs ----------------------------------------------------------------------------
    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        """An absolute API URL for `path` with `params` in a stable order (ETag keys)."""
        full = path if path.startswith(("http://", "https://")) else f"{self.base_url}/{path.lstrip('/')}"
        if params:
            full += ("&" if "?" in full else "?") + urlencode(sorted((k, str(v)) for k, v in params.items() if v is not None))
        return full

    # -- one request ---------------------------------------------------------------------
    def get(self, url: str, *, etag: str | None = None) -> Page:
        """GET with rate-limit manners and retries; 304 when `etag` still matches."""
        url = self.url(url)
        headers = {"If-None-Match": etag} if etag else {}
        failure = ""
        for attempt in range(self._max_attempts):
            self._respect_known_limit()
            self.requests += 1
            announce("GitHub", self.base_url)
            try:
                resp = self._client.get(url, headers=headers)
            except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
                failure = network_failure(exc, self.base_url)
                if unresolvable(exc) and attempt + 1 >= DNS_ATTEMPTS:
                    break
                self._backoff(attempt, failure=failure)
                continue
            self._note_limits(resp.headers)
            self.bytes_downloaded += len(resp.content)
            status = resp.status_code
            if status == 304:
                return Page(url, 304, None, etag, None, 0)
            if status in (403, 429):
                wait, kind = self._limit_wait(resp)
                if wait is None:
                    raise RuntimeFailure(
                        f"GitHub refused {self._who()} (HTTP {status}) for {_short(url)}",
                        "check GITHUB_TOKEN/GH_TOKEN, or unset them for public repositories",
                    )
                self._wait_or_stop(wait, kind)
                continue
            if status == 401:
                raise RuntimeFailure(
                    f"GitHub rejected the token from GITHUB_TOKEN/GH_TOKEN (HTTP 401) at {self.base_url}",
                    "check the token, or unset it: public repositories work anonymously",
                )
            if status == 404:
                raise UserError(f"GitHub has no {_short(url)} (HTTP 404)",
                                "check OWNER/REPO, the issue number or the path (e.g. github:marin-community/marin#8435)")
            if status >= 500 or status == 408:
                failure = f"server error {status}"
                self._backoff(attempt, server_wait(resp.headers), failure=failure)
                continue
            if status >= 400:
                raise RuntimeFailure(f"GitHub answered HTTP {status} for {_short(url)}")
            try:
                data = resp.json()
            except ValueError:
                failure = "a malformed response body"
                self._backoff(attempt)
                continue
            nxt = resp.links.get("next", {}).get("url")
            return Page(url, 200, data, resp.headers.get("etag"), nxt, len(resp.content))
        raise Unreachable(
            f"GitHub at {self.base_url} kept failing ({failure}); nothing stored was lost",
            "check the network and run the same `marinctl sync` again; it resumes where it stopped",
        )

    # -- conveniences (unconditional) ----------------------------------------------------
    def get_json(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.get(self.url(path, params)).data

    def paginate(self, path: str, params: dict[str, Any] | None = None) -> list[Any]:
        """Every item of a list endpoint, following Link rel=next."""
        url: str | None = self.url(path, {"per_page": PER_PAGE, **(params or {})})
        items: list[Any] = []
        while url:
            page = self.get(url)
            items += page.data or []
            url = page.next_url
        return items

    def issue(self, owner: str, repo: str, number: int) -> dict[str, Any]:
        return self.get_json(f"repos/{owner}/{repo}/issues/{number}")

    def comments(self, owner: str, repo: str, number: int) -> list[dict[str, Any]]:
        return self.paginate(f"repos/{owner}/{repo}/issues/{number}/comments")

    def issues_by_label(self, owner: str, repo: str, label: str, state: str = "all") -> list[dict[str, Any]]:
        return self.paginate(f"repos/{owner}/{repo}/issues", {"labels": label, "state": state})

    def commits(self, owner: str, repo: str, path: str | None = None, since: str | None = None) -> list[dict[str, Any]]:
        return self.paginate(f"repos/{owner}/{repo}/commits", {"path": path, "since": since})

    def file_text(self, owner: str, repo: str, path: str, ref: str | None = None) -> tuple[str, str]:
        """(text, blob sha) of a file at `ref` (default branch when None)."""
        return decode_contents(self.get_json(f"repos/{owner}/{repo}/contents/{path}", {"ref": ref}), path)

    # -- rate limits ---------------------------------------------------------------------
    def _note_limits(self, headers: httpx.Headers) -> None:
        try:
            if "x-ratelimit-remaining" in headers:
                self.remaining = int(headers["x-ratelimit-remaining"])
            if "x-ratelimit-reset" in headers:
                self.reset_at = float(headers["x-ratelimit-reset"])
        except ValueError:
            pass

    def _respect_known_limit(self) -> None:
        """Spent primary limit seen on the last answer: wait for the reset, or stop now."""
        if self.remaining == 0 and self.reset_at is not None:
            wait = self.reset_at - time.time()
            if wait > 0:
                self._wait_or_stop(wait + 1.0, "primary")
            self.remaining = None

    def _limit_wait(self, resp: httpx.Response) -> tuple[float | None, str]:
        """Seconds to wait for a 403/429 that is a rate limit, else (None, '')."""
        retry_after = server_wait(httpx.Headers({"retry-after": resp.headers["retry-after"]})) \
            if "retry-after" in resp.headers else None
        if retry_after is not None:
            return retry_after, "secondary"
        if resp.headers.get("x-ratelimit-remaining") == "0":
            reset = self.reset_at or time.time() + 60
            return max(1.0, reset - time.time() + 1.0), "primary"
        text = resp.text.lower()
        if resp.status_code == 429 or "rate limit" in text:
            return 60.0, "secondary"  # GitHub's advice without Retry-After: wait at least a minute
        return None, ""

    def _wait_or_stop(self, wait: float, kind: str) -> None:
        if wait <= self.max_wait:
            self.waited += wait
            self._sleep(wait)
            return
        retry_at = datetime.fromtimestamp(time.time() + wait, tz=timezone.utc)
        what = "rate limit" if kind == "primary" else "secondary rate limit"
        hint = f"run the same `marinctl sync` again after {retry_at:%H:%M} UTC; it resumes where it stopped"
        if not self._has_token and kind == "primary":
            hint += " (or set GITHUB_TOKEN for 5,000 requests/hour)"
        raise RateLimitStop(
            f"GitHub {what} reached; it resets at {retry_at:%Y-%m-%d %H:%M:%S} UTC (in {_human(wait)}); "
            "what was fetched so far is stored",
            hint, retry_at,
        )

    def _backoff(self, attempt: int, asked: float | None = None, failure: str = "") -> None:
        if attempt + 1 >= self._max_attempts:
            return
        wait = min(asked if asked is not None else min(8.0, 0.25 * 2 ** attempt), self.max_wait)
        if failure:
            notice(f"GitHub at {self.base_url}: {failure}; try {attempt + 2} of {self._max_attempts} in {wait:.1f} s")
        self._sleep(wait)

    def _who(self) -> str:
        return "the token from GITHUB_TOKEN/GH_TOKEN" if self._has_token else "anonymous access"


def decode_contents(data: Any, path: str) -> tuple[str, str]:
    if not isinstance(data, dict) or data.get("type") != "file":
        raise UserError(f"{path} is not a file in the repository (a directory?)",
                        "for a directory, end the target with / to sync the commits touching it")
    raw = data.get("content") or ""
    if data.get("encoding") == "base64":
        text = base64.b64decode(raw.encode()).decode("utf-8", errors="replace")
    else:
        text = raw
    return text, data.get("sha") or ""


def _short(url: str) -> str:
    parts = urlparse(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


def _human(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds / 3600:.1f} h"
