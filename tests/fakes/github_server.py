"""A GitHub-compatible REST server on loopback for tests (the tests' own data and texts).

Serves the slice of the REST API marinctl reads — repos, issues (by number and by
label), issue comments, commits (`?path=`), single commits, contents (base64) and
`/rate_limit` — in GitHub's JSON shapes, so a real client nobody here wrote (PyGithub)
can read it too. It implements the behaviours that matter for a polite sync:
- ETags on every 200 (computed from the body, as GitHub's are) and `304 Not Modified`
  with an empty body for a matching `If-None-Match`;
- `Link` pagination (`per_page`, `page`, rel next/last/prev/first);
- a primary rate limit (`X-RateLimit-*` headers, 403 with `X-RateLimit-Remaining: 0`
  once spent, reset at `X-RateLimit-Reset`) and scripted secondary limits (403/429 with
  `Retry-After`);
- request and body-byte counters, so a test can assert a re-sync downloaded nothing.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

from .loopback import Loopback


def _user(login: str) -> dict[str, Any]:
    uid = int(hashlib.sha1(login.encode()).hexdigest()[:6], 16)
    return {"login": login, "id": uid, "node_id": f"U_{uid}", "type": "Bot" if login.endswith("[bot]") else "User",
            "site_admin": False, "avatar_url": "", "html_url": f"https://github.com/{login}"}


@dataclass
class Repo:
    owner: str
    name: str
    default_branch: str = "main"
    issues: dict[int, dict] = field(default_factory=dict)
    comments: dict[int, list[dict]] = field(default_factory=dict)
    commits: list[dict] = field(default_factory=list)     # newest first, each with "_paths"
    files: dict[str, str] = field(default_factory=dict)   # path -> text at the default branch


class FakeGitHub:
    """The server's state plus a running loopback server; use as a context manager."""

    def __init__(self, *, rate_limit: int = 5000, count_304: bool = False):
        self.repos: dict[str, Repo] = {}
        self.lock = threading.RLock()
        self.requests: list[tuple[str, int, int]] = []   # (path?query, status, body bytes)
        self.auth_headers: list[str | None] = []
        self.limit = rate_limit
        self.remaining = rate_limit
        self.reset_at = int(time.time()) + 3600
        self.count_304 = count_304                        # GitHub does not count 304s for authorized calls
        self.secondary: list[tuple[int, int]] = []         # queued (status, retry_after) answers
        self._next_id = 1000
        self._loop: Loopback | None = None

    # -- data ----------------------------------------------------------------------------
    def repo(self, full: str) -> Repo:
        if full not in self.repos:
            owner, name = full.split("/")
            self.repos[full] = Repo(owner, name)
        return self.repos[full]

    def _id(self) -> int:
        self._next_id += 1
        return self._next_id

    def add_issue(self, full: str, number: int, title: str, body: str, *, user: str = "octo",
                  labels: tuple[str, ...] = (), created_at: str = "2026-08-20T00:00:00Z",
                  pull: bool = False, state: str = "open") -> dict:
        r = self.repo(full)
        issue = {
            "url": f"{self.url}/repos/{full}/issues/{number}",
            "repository_url": f"{self.url}/repos/{full}",
            "comments_url": f"{self.url}/repos/{full}/issues/{number}/comments",
            "html_url": f"https://github.com/{full}/issues/{number}",
            "id": self._id(), "node_id": f"I_{number}", "number": number, "title": title, "body": body,
            "user": _user(user), "labels": [{"id": i + 1, "name": n, "color": "ededed", "default": False,
                                             "url": f"{self.url}/repos/{full}/labels/{n}"} for i, n in enumerate(labels)],
            "state": state, "locked": False, "assignee": None, "assignees": [], "milestone": None,
            "comments": 0, "created_at": created_at, "updated_at": created_at, "closed_at": None,
            "author_association": "MEMBER",
        }
        if pull:
            issue["pull_request"] = {"url": f"{self.url}/repos/{full}/pulls/{number}",
                                     "html_url": f"https://github.com/{full}/pull/{number}"}
        with self.lock:
            r.issues[number] = issue
            r.comments.setdefault(number, [])
        return issue

    def add_comment(self, full: str, number: int, body: str, *, user: str = "octo",
                    created_at: str = "2026-08-20T01:00:00Z") -> dict:
        r = self.repo(full)
        cid = self._id()
        comment = {
            "id": cid, "node_id": f"IC_{cid}", "url": f"{self.url}/repos/{full}/issues/comments/{cid}",
            "html_url": f"https://github.com/{full}/issues/{number}#issuecomment-{cid}",
            "issue_url": f"{self.url}/repos/{full}/issues/{number}",
            "body": body, "user": _user(user), "created_at": created_at, "updated_at": created_at,
            "author_association": "MEMBER",
        }
        with self.lock:
            r.comments[number].append(comment)
            issue = r.issues[number]
            issue["comments"] = len(r.comments[number])
            issue["updated_at"] = max(issue["updated_at"], created_at)
        return comment

    def edit_comment(self, full: str, number: int, comment_id: int, body: str, updated_at: str) -> None:
        with self.lock:
            for c in self.repo(full).comments[number]:
                if c["id"] == comment_id:
                    c["body"], c["updated_at"] = body, updated_at

    def delete_comment(self, full: str, number: int, comment_id: int) -> None:
        """Delete a comment as GitHub does: it is simply gone from every later listing."""
        with self.lock:
            r = self.repo(full)
            r.comments[number] = [c for c in r.comments[number] if c["id"] != comment_id]
            issue = r.issues[number]
            issue["comments"] = len(r.comments[number])

    def add_commit(self, full: str, sha: str, message: str, *, paths: tuple[str, ...], author: str = "octo",
                   date: str = "2026-08-20T00:00:00Z") -> dict:
        person = {"name": author, "email": f"{author}@example.invalid", "date": date}
        commit = {
            "sha": sha, "node_id": f"C_{sha[:8]}", "url": f"{self.url}/repos/{full}/commits/{sha}",
            "html_url": f"https://github.com/{full}/commit/{sha}",
            "comments_url": f"{self.url}/repos/{full}/commits/{sha}/comments",
            "commit": {"author": person, "committer": person, "message": message,
                       "tree": {"sha": "0" * 40, "url": f"{self.url}/repos/{full}/git/trees/{'0' * 40}"},
                       "url": f"{self.url}/repos/{full}/git/commits/{sha}", "comment_count": 0},
            "author": _user(author), "committer": _user(author), "parents": [],
            "_paths": list(paths),
        }
        with self.lock:
            self.repo(full).commits.insert(0, commit)
        return commit

    def set_file(self, full: str, path: str, text: str) -> None:
        with self.lock:
            self.repo(full).files[path] = text

    def exhaust(self, reset_in: float) -> None:
        """Spend the primary limit now; it resets `reset_in` seconds from now."""
        with self.lock:
            self.remaining = 0
            self.reset_at = math.ceil(time.time() + reset_in)

    def queue_secondary(self, status: int, retry_after: int, times: int = 1) -> None:
        with self.lock:
            self.secondary += [(status, retry_after)] * times

    # -- counters ------------------------------------------------------------------------
    @property
    def body_bytes(self) -> int:
        return sum(b for _, _, b in self.requests)

    def statuses(self) -> list[int]:
        return [s for _, s, _ in self.requests]

    def reset_counters(self) -> None:
        with self.lock:
            self.requests.clear()
            self.auth_headers.clear()

    # -- server --------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._loop is not None, "start the server first"
        return self._loop.url

    def __enter__(self) -> "FakeGitHub":
        self._loop = Loopback(_handler(self), name="synthetic-github").start()
        return self

    def __exit__(self, *exc) -> None:
        if self._loop is not None:
            self._loop.stop()
            self._loop = None

    # -- routing -------------------------------------------------------------------------
    def route(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        parts = [p for p in path.split("/") if p]
        if parts == ["rate_limit"]:
            core = {"limit": self.limit, "remaining": self.remaining, "reset": self.reset_at, "used": self.limit - self.remaining}
            return 200, {"resources": {"core": core}, "rate": core}
        if len(parts) < 3 or parts[0] != "repos":
            return 404, {"message": "Not Found"}
        full = f"{parts[1]}/{parts[2]}"
        repo = self.repos.get(full)
        if repo is None:
            return 404, {"message": "Not Found"}
        rest = parts[3:]
        if not rest:
            return 200, {"id": 1, "name": repo.name, "full_name": full, "default_branch": repo.default_branch,
                         "owner": _user(repo.owner), "url": f"{self.url}/repos/{full}",
                         "html_url": f"https://github.com/{full}", "private": False}
        if rest[0] == "issues" and len(rest) == 1:
            labels = set(filter(None, query.get("labels", "").split(",")))
            state = query.get("state", "open")
            items = [i for i in sorted(repo.issues.values(), key=lambda i: i["created_at"], reverse=True)
                     if labels <= {lab["name"] for lab in i["labels"]} and (state == "all" or i["state"] == state)]
            return 200, items
        if rest[0] == "issues" and len(rest) == 2 and rest[1].isdigit():
            issue = repo.issues.get(int(rest[1]))
            return (200, issue) if issue else (404, {"message": "Not Found"})
        if rest[0] == "issues" and len(rest) == 3 and rest[2] == "comments":
            n = int(rest[1])
            if n not in repo.issues:
                return 404, {"message": "Not Found"}
            since = query.get("since")
            return 200, [c for c in repo.comments[n] if not since or c["updated_at"] >= since]
        if rest[0] == "commits" and len(rest) == 1:
            path_filter = query.get("path")
            items = [c for c in repo.commits
                     if not path_filter or any(p == path_filter or p.startswith(path_filter.rstrip("/") + "/") for p in c["_paths"])]
            return 200, [{k: v for k, v in c.items() if k != "_paths"} for c in items]
        if rest[0] == "commits" and len(rest) == 2:
            for c in repo.commits:
                if c["sha"].startswith(rest[1]):
                    out = {k: v for k, v in c.items() if k != "_paths"}
                    out["files"] = [{"filename": p, "status": "modified"} for p in c["_paths"]]
                    return 200, out
            return 404, {"message": "No commit found"}
        if rest[0] == "contents":
            fpath = "/".join(rest[1:])
            text = repo.files.get(fpath)
            if text is None:
                return 404, {"message": "Not Found"}
            raw = text.encode()
            sha = hashlib.sha1(b"blob %d\0" % len(raw) + raw).hexdigest()
            b64 = base64.b64encode(raw).decode()
            return 200, {"type": "file", "encoding": "base64", "size": len(raw), "name": fpath.rsplit("/", 1)[-1],
                         "path": fpath, "sha": sha, "content": "\n".join(b64[i:i + 60] for i in range(0, len(b64), 60)),
                         "url": f"{self.url}/repos/{full}/contents/{fpath}",
                         "html_url": f"https://github.com/{full}/blob/{repo.default_branch}/{fpath}",
                         "download_url": None, "git_url": None}
        return 404, {"message": "Not Found"}


def _handler(gh: FakeGitHub):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            with gh.lock:
                gh.auth_headers.append(self.headers.get("Authorization"))
                now = time.time()
                if gh.remaining <= 0 and now >= gh.reset_at:
                    gh.remaining, gh.reset_at = gh.limit, int(now) + 3600
                if gh.secondary:
                    status, retry = gh.secondary.pop(0)
                    return self._send(status, {"message": "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."},
                                      extra={"Retry-After": str(retry)})
                if gh.remaining <= 0:
                    return self._send(403, {"message": "API rate limit exceeded for 127.0.0.1. (But here's the good news: "
                                                       "Authenticated requests get a higher rate limit.)",
                                            "documentation_url": "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api"})
            status, payload = gh.route(url.path, query)
            headers: dict[str, str] = {}
            if status == 200 and isinstance(payload, list):
                per_page = max(1, min(100, int(query.get("per_page", 30))))
                page = max(1, int(query.get("page", 1)))
                last = max(1, -(-len(payload) // per_page))
                links = []
                def link(p: int, rel: str) -> str:
                    q = dict(query, page=str(p), per_page=str(per_page))
                    return f'<{gh.url}{url.path}?{urlencode(q)}>; rel="{rel}"'
                if page < last:
                    links += [link(page + 1, "next"), link(last, "last")]
                if page > 1:
                    links += [link(page - 1, "prev"), link(1, "first")]
                if links:
                    headers["Link"] = ", ".join(links)
                payload = payload[(page - 1) * per_page: page * per_page]
            body = json.dumps(payload).encode()
            if status == 200:
                etag = 'W/"' + hashlib.sha256(body).hexdigest()[:32] + '"'
                headers["ETag"] = etag
                if etag in [t.strip() for t in (self.headers.get("If-None-Match") or "").split(",")]:
                    with gh.lock:
                        if gh.count_304:
                            gh.remaining -= 1
                    return self._send(304, None, extra=headers)
            with gh.lock:
                gh.remaining -= 1
            self._send(status, payload, extra=headers, body=body)

        def _send(self, status: int, payload: Any, *, extra: dict[str, str] | None = None, body: bytes | None = None) -> None:
            data = b"" if status == 304 else (body if body is not None else json.dumps(payload).encode())
            # Record before answering: a client that has its reply must find the request counted.
            with gh.lock:
                gh.requests.append((self.path, status, len(data)))
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-RateLimit-Limit", str(gh.limit))
            self.send_header("X-RateLimit-Remaining", str(max(0, gh.remaining)))
            self.send_header("X-RateLimit-Reset", str(gh.reset_at))
            self.send_header("X-RateLimit-Used", str(gh.limit - max(0, gh.remaining)))
            self.send_header("X-RateLimit-Resource", "core")
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            if data:
                self.wfile.write(data)

    return Handler
