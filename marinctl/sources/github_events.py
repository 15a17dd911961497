"""GitHub targets and what their pages become: issues, comments, commits and logbook entries as events.

Spec forms (the `marinctl sync` TARGETs):
- `github:OWNER/REPO#N`              an issue (or PR) and all its comments
- `github:OWNER/REPO?label=NAME`     every issue with that label, with comments
- `github:OWNER/REPO/path/in/repo`   a file: the commits touching it, and its content at
                                     the default branch (a logbook `.md` under a
                                     `logbooks/` folder is split into dated entries)
- `github:OWNER/REPO/some/dir/`      a directory (trailing slash): the commits touching it

Only decoding lives here (no store, no network): the URLs to ask for, and a page's JSON
turned into `domain.Event`s with stable ids, so writing one again is an update.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Iterator

from marinctl.domain import Event
from marinctl.errors import UserError
from marinctl.sources.github import PER_PAGE, GitHubClient, decode_contents

_NAME = r"[A-Za-z0-9][A-Za-z0-9_.\-]*"
_SPEC = re.compile(rf"^github:({_NAME})/({_NAME})(?:#(\d+)|\?label=([^\s&]+)|/(.+))?$")


@dataclass
class GitHubSpec:
    owner: str
    repo: str
    number: int | None = None
    label: str | None = None
    path: str | None = None

    @property
    def full(self) -> str:
        return f"{self.owner}/{self.repo}"

    @property
    def is_dir(self) -> bool:
        return bool(self.path) and self.path.endswith("/")


def parse_spec(spec: str) -> GitHubSpec:
    m = _SPEC.match(spec.strip())
    if not m or (m.group(5) is not None and (".." in m.group(5).split("/") or m.group(5).startswith("/"))):
        raise UserError(
            f"not a GitHub target: {spec!r}",
            "use github:OWNER/REPO#N, github:OWNER/REPO/path/in/repo or github:OWNER/REPO?label=NAME",
        )
    owner, repo, number, label, path = m.groups()
    if number is None and label is None and path is None:
        raise UserError(f"GitHub target {spec!r} names a repository but no issue or path",
                        f"add #N for an issue or /path for a file, e.g. github:{owner}/{repo}#1")
    return GitHubSpec(owner, repo, int(number) if number else None, label, path)


# --- the URLs a spec reads --------------------------------------------------------------------

def issue_url(client: GitHubClient, repo: str, number: int) -> str:
    return client.url(f"repos/{repo}/issues/{number}")


def comments_url(client: GitHubClient, repo: str, number: int) -> str:
    return client.url(f"repos/{repo}/issues/{number}/comments", {"per_page": PER_PAGE, "page": 1})


def label_url(client: GitHubClient, repo: str, label: str) -> str:
    return client.url(f"repos/{repo}/issues", {"labels": label, "state": "all", "per_page": PER_PAGE, "page": 1})


def commits_url(client: GitHubClient, repo: str, path: str) -> str:
    return client.url(f"repos/{repo}/commits", {"path": path.rstrip("/") or None, "per_page": PER_PAGE, "page": 1})


def contents_url(client: GitHubClient, repo: str, path: str) -> str:
    return client.url(f"repos/{repo}/contents/{path}")


# --- pages to events --------------------------------------------------------------------------

def parse_time(raw: str | None) -> datetime | None:
    if not raw:
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).astimezone(timezone.utc)
    except ValueError:
        return None


def first_line(text: str | None, limit: int = 120) -> str:
    for line in (text or "").splitlines():
        line = line.strip().lstrip("#").strip()
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def issue_event(repo: str, issue: dict[str, Any]) -> Event:
    number = issue["number"]
    fields = {"number": number, "repo": repo, "state": issue.get("state"),
              "labels": [lab.get("name") for lab in issue.get("labels") or [] if isinstance(lab, dict)],
              "comments": issue.get("comments")}
    return Event(f"github:{repo}#{number}", "github", "pull" if issue.get("pull_request") else "issue",
                 time=parse_time(issue.get("created_at")), title=f"#{number} {issue.get('title') or ''}".strip(),
                 author=(issue.get("user") or {}).get("login"), url=issue.get("html_url"),
                 body=issue.get("body") or "", fields=fields)


def comment_prefix(repo: str, number: int) -> str:
    """What the event id of every comment of an issue starts with."""
    return f"github:{repo}#{number}/comment/"


def comment_event(repo: str, number: int, c: dict[str, Any]) -> Event:
    fields = {"number": number, "repo": repo, "comment_id": c.get("id"), "updated_at": c.get("updated_at")}
    return Event(f"{comment_prefix(repo, number)}{c['id']}", "github", "comment",
                 time=parse_time(c.get("created_at")), title=f"#{number}: {first_line(c.get('body'))}",
                 author=(c.get("user") or {}).get("login"), url=c.get("html_url"), body=c.get("body") or "",
                 fields=fields)


def commit_event(repo: str, c: dict[str, Any], path: str) -> Event:
    sha = c["sha"]
    info = c.get("commit") or {}
    who = (c.get("author") or {}).get("login") or (info.get("author") or {}).get("name")
    when = (info.get("committer") or {}).get("date") or (info.get("author") or {}).get("date")
    message = info.get("message") or ""
    return Event(f"github:{repo}/commit/{sha}", "github", "commit", time=parse_time(when), title=first_line(message),
                 author=who, url=c.get("html_url"), body=message, fields={"sha": sha, "repo": repo, "paths": [path]})


@dataclass
class FilePage:
    """A repository file as the contents API returned it, and the logbook entries it holds."""

    path: str
    text: str
    sha: str
    url: str | None
    events: list[Event]


def file_page(repo: str, path: str, data: Any) -> FilePage:
    text, sha = decode_contents(data, path)
    url = data.get("html_url")
    found = list(logbook_events(repo, path, text, url)) if is_logbook(path) else []
    return FilePage(path, text, sha, url, found)


# --- logbooks -------------------------------------------------------------------------------

_ENTRY = re.compile(r"^(#{2,4})\s+(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}:\d{2})(?::\d{2})?)?\s*(?:UTC|Z)?\s*[-–—:]*\s*(.*)$")
_FRONT_AUTHOR = re.compile(r"^author:\s*(.+)$", re.M)


def is_logbook(path: str) -> bool:
    return path.lower().endswith(".md") and "logbook" in path.lower()


def _anchor(heading: str) -> str:
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def logbook_events(repo: str, path: str, text: str, html_url: str | None) -> Iterator[Event]:
    """Dated entries (`### 2026-08-01 20:39 UTC - Title`) as events, ids stable across edits."""
    front = text.split("\n---", 1)[0] if text.startswith("---") else ""
    author_m = _FRONT_AUTHOR.search(front)
    author = author_m.group(1).strip() if author_m else None
    lines = text.splitlines()
    heads = [(i, m) for i, line in enumerate(lines) if (m := _ENTRY.match(line))]
    seen: dict[str, int] = {}
    for i, m in heads:
        end = len(lines)
        for j in range(i + 1, len(lines)):  # the entry runs to the next heading of its level or higher
            h = re.match(r"^(#{1,6})\s", lines[j])
            if h and len(h.group(1)) <= len(m.group(1)):
                end = j
                break
        date, clock, title = m.group(2), m.group(3) or "00:00", m.group(4).strip()
        try:
            when = datetime.fromisoformat(f"{date}T{clock.zfill(5)}:00+00:00")
        except ValueError:
            continue
        key = f"{date}T{clock.zfill(5)} {title}"
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        seen[digest] = seen.get(digest, 0) + 1
        eid = f"logbook:{repo}/{path}#{date}-{digest}" + (f"-{seen[digest]}" if seen[digest] > 1 else "")
        body = "\n".join(lines[i + 1:end]).strip()
        url = f"{html_url}#{_anchor(lines[i].lstrip('#'))}" if html_url else None
        yield Event(eid, "logbook", "logbook", time=when, title=title or date, author=author, url=url, body=body,
                    fields={"repo": repo, "path": path})
