"""Mirror GitHub issues, comments, commits, logbooks and files into the store as events.

Spec forms (the `marinctl sync` TARGETs):
- `github:OWNER/REPO#N`              an issue (or PR) and all its comments
- `github:OWNER/REPO?label=NAME`     every issue with that label, with comments
- `github:OWNER/REPO/path/in/repo`   a file: the commits touching it, and its content at
                                     the default branch (a logbook `.md` under a
                                     `logbooks/` folder is split into dated entries)
- `github:OWNER/REPO/some/dir/`      a directory (trailing slash): the commits touching it

Resumable and cheap to repeat: every page is fetched with the ETag stored for its URL in
`sync_state` (scope `github`), and a page's events and its new ETag land in one
transaction. An unchanged page costs a 304 with no body; a sync stopped by a rate limit
restarts from page 1, gets 304s for what it already has, and continues where it stopped —
no gaps, and stable event ids make every write an upsert, never a duplicate.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from marinctl.errors import UserError
from marinctl.sources.github import PER_PAGE, GitHubClient, decode_contents, page_number, with_page
from marinctl.store import Store

DEFAULT_MARIN_SPECS = [
    "github:marin-community/marin#8435",   # hero tracking issue
    "github:marin-community/marin#8506",   # hero status log (bot comments: SHA, job, fork point, checkpoint)
    "github:marin-community/marin/.agents/logbooks/7279-moe-hero-ep.md",
    "github:marin-community/marin/experiments/grug/moe_hero_ep/harrier_mix_2026_08_18.json",
    "github:marin-community/marin/experiments/grug/moe_hero_ep/",
]

Progress = Callable[[str, int, int], None]

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


def sync_github(store: Store, spec: str, *, progress: Progress | None = None,
                client: GitHubClient | None = None, min_interval: float = 0.0) -> int:
    """Mirror one spec; returns how many events were added or changed.

    `min_interval` (seconds) skips the network when this spec was checked more recently
    than that — for `sync --follow` and `watch`, where anonymous 304s still count
    against GitHub's 60 requests/hour.
    """
    target = parse_spec(spec)
    if min_interval > 0 and _checked_within(store, spec, min_interval):
        return 0
    own = client is None
    client = client or GitHubClient()
    job = _Job(store, client, target, progress)
    try:
        if target.number is not None:
            job.issue(target.number)
        elif target.label is not None:
            job.label(target.label)
        else:
            job.commits(target.path)
            if not target.is_dir:
                job.file(target.path)
    finally:
        if own:
            client.close()
    with store.transaction() as con:
        _save_state(con, f"checked:{spec}", None, {})
    realign(store)
    return job.changed


def _checked_within(store: Store, spec: str, seconds: float) -> bool:
    with store.connect() as con:
        row = con.execute("SELECT updated_at FROM sync_state WHERE scope = 'github' AND name = ?",
                          [f"checked:{spec}"]).fetchone()
    if not row or row[0] is None:
        return False
    return (datetime.now(timezone.utc) - row[0]).total_seconds() < seconds


# -- store helpers ---------------------------------------------------------------------------

def _state(con, url: str) -> tuple[str | None, dict[str, Any]]:
    row = con.execute("SELECT token, extra FROM sync_state WHERE scope = 'github' AND name = ?", [url]).fetchone()
    if not row:
        return None, {}
    extra = row[1]
    return row[0], (json.loads(extra) if isinstance(extra, str) else (extra or {}))


def _save_state(con, url: str, etag: str | None, extra: dict[str, Any]) -> None:
    con.execute(
        "INSERT OR REPLACE INTO sync_state (scope, name, position, token, extra, updated_at)"
        " VALUES ('github', ?, ?, ?, ?, current_timestamp)",
        [url, extra.get("count"), etag, json.dumps(extra)],
    )


_EVENT_COLS = ("source", "kind", "time", "title", "author", "url", "body")


def upsert_event(con, event_id: str, fields: dict[str, Any], **values: Any) -> bool:
    """Insert or update one event; True when it was new or its content changed."""
    row = con.execute(f"SELECT {', '.join(_EVENT_COLS)}, fields FROM events WHERE event_id = ?", [event_id]).fetchone()
    new = [values.get(c) for c in _EVENT_COLS]
    if row is None:
        con.execute(
            f"INSERT INTO events (event_id, {', '.join(_EVENT_COLS)}, fields) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [event_id, *new, json.dumps(fields)],
        )
        return True
    old_fields = json.loads(row[-1]) if isinstance(row[-1], str) else (row[-1] or {})
    merged = dict(old_fields)
    for k, v in fields.items():
        if k == "paths":
            merged[k] = sorted(set(old_fields.get(k, [])) | set(v))
        else:
            merged[k] = v
    old = list(row[:-1])
    if old[2] is not None and new[2] is not None:
        old[2] = old[2].astimezone(timezone.utc)
    if old == new and merged == old_fields:
        return False
    con.execute(
        f"UPDATE events SET {', '.join(c + ' = ?' for c in _EVENT_COLS)}, fields = ? WHERE event_id = ?",
        [*new, json.dumps(merged), event_id],
    )
    return True


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


# -- the work --------------------------------------------------------------------------------

class _Job:
    def __init__(self, store: Store, client: GitHubClient, target: GitHubSpec, progress: Progress | None):
        self.store, self.client, self.t, self.progress = store, client, target, progress
        self.changed = 0
        self.pages = 0

    def _tick(self, name: str) -> None:
        self.pages += 1
        if self.progress:
            self.progress(f"github {self.t.full}{name}", self.pages, self.pages)

    def fetch(self, url: str, handle: Callable[[Any, Any], int], *, paginated: bool) -> None:
        """GET `url` (and its next pages) conditionally; `handle(con, data)` stores a 200."""
        current: str | None = url
        seen: set[str] = set()
        while current and current not in seen:
            seen.add(current)
            with self.store.connect() as con:
                etag, extra = _state(con, current)
            page = self.client.get(current, etag=etag)
            self._tick("")
            if page.status == 304:
                nxt = extra.get("next")
                if paginated and not nxt and (extra.get("count") or 0) >= (extra.get("per_page") or PER_PAGE):
                    nxt = with_page(current, page_number(current) + 1)  # a full last page: the list may have grown
                current = nxt if paginated else None
                continue
            with self.store.transaction() as con:
                self.changed += handle(con, page.data)
                count = len(page.data) if isinstance(page.data, list) else None
                _save_state(con, current, page.etag, {"next": page.next_url, "count": count, "per_page": PER_PAGE})
            current = page.next_url if paginated else None

    # issues ---------------------------------------------------------------------------------
    def issue(self, number: int) -> None:
        base = f"repos/{self.t.full}/issues/{number}"
        self.fetch(self.client.url(base), lambda con, data: self._store_issue(con, data), paginated=False)
        self.comments(number)

    def comments(self, number: int) -> None:
        url = self.client.url(f"repos/{self.t.full}/issues/{number}/comments", {"per_page": PER_PAGE, "page": 1})
        self.fetch(url, lambda con, data: sum(self._store_comment(con, number, c) for c in data or []), paginated=True)

    def label(self, label: str) -> None:
        url = self.client.url(f"repos/{self.t.full}/issues", {"labels": label, "state": "all", "per_page": PER_PAGE, "page": 1})
        numbers: list[int] = []

        def handle(con, data):
            numbers.extend(i["number"] for i in data or [] if i.get("comments"))
            return sum(self._store_issue(con, i) for i in data or [])

        self.fetch(url, handle, paginated=True)
        for n in numbers:
            self.comments(n)
        # On a 304 the list is unchanged, but comments may still have arrived: check each
        # stored issue of this label conditionally (each costs a 304 when unchanged).
        with self.store.connect() as con:
            rows = con.execute("SELECT fields FROM events WHERE kind IN ('issue', 'pull') AND event_id LIKE ?",
                               [f"github:{self.t.full}#%"]).fetchall()
        stored = []
        for (raw,) in rows:
            f = json.loads(raw) if isinstance(raw, str) else (raw or {})
            if label in (f.get("labels") or []) and f.get("comments"):
                stored.append(int(f["number"]))
        for n in stored:
            if n not in numbers:
                self.comments(n)

    def _store_issue(self, con, issue: dict[str, Any]) -> int:
        number = issue["number"]
        kind = "pull" if issue.get("pull_request") else "issue"
        fields = {"number": number, "repo": self.t.full, "state": issue.get("state"),
                  "labels": [lab.get("name") for lab in issue.get("labels") or [] if isinstance(lab, dict)],
                  "comments": issue.get("comments")}
        return int(upsert_event(
            con, f"github:{self.t.full}#{number}", fields, source="github", kind=kind,
            time=parse_time(issue.get("created_at")), title=f"#{number} {issue.get('title') or ''}".strip(),
            author=(issue.get("user") or {}).get("login"), url=issue.get("html_url"), body=issue.get("body") or "",
        ))

    def _store_comment(self, con, number: int, c: dict[str, Any]) -> int:
        author = (c.get("user") or {}).get("login")
        fields = {"number": number, "repo": self.t.full, "comment_id": c.get("id"),
                  "updated_at": c.get("updated_at")}
        return int(upsert_event(
            con, f"github:{self.t.full}#{number}/comment/{c['id']}", fields, source="github", kind="comment",
            time=parse_time(c.get("created_at")), title=f"#{number}: {first_line(c.get('body'))}",
            author=author, url=c.get("html_url"), body=c.get("body") or "",
        ))

    # commits and files ------------------------------------------------------------------------
    def commits(self, path: str) -> None:
        url = self.client.url(f"repos/{self.t.full}/commits", {"path": path.rstrip("/") or None, "per_page": PER_PAGE, "page": 1})
        self.fetch(url, lambda con, data: sum(self._store_commit(con, c, path) for c in data or []), paginated=True)

    def _store_commit(self, con, c: dict[str, Any], path: str) -> int:
        sha = c["sha"]
        info = c.get("commit") or {}
        who = (c.get("author") or {}).get("login") or (info.get("author") or {}).get("name")
        when = (info.get("committer") or {}).get("date") or (info.get("author") or {}).get("date")
        message = info.get("message") or ""
        return int(upsert_event(
            con, f"github:{self.t.full}/commit/{sha}", {"sha": sha, "repo": self.t.full, "paths": [path]},
            source="github", kind="commit", time=parse_time(when), title=first_line(message),
            author=who, url=c.get("html_url"), body=message,
        ))

    def file(self, path: str) -> None:
        url = self.client.url(f"repos/{self.t.full}/contents/{path}")

        def handle(con, data):
            text, sha = decode_contents(data, path)
            con.execute(
                "INSERT OR REPLACE INTO repo_files (repo, path, ref, sha, content, url, fetched_at)"
                " VALUES (?, ?, NULL, ?, ?, ?, current_timestamp)",
                [self.t.full, path, sha, text, data.get("html_url")],
            )
            if is_logbook(path):
                return sum(upsert_event(con, eid, fields, **values)
                           for eid, fields, values in logbook_events(self.t.full, path, text, data.get("html_url")))
            return 0

        self.fetch(url, handle, paginated=False)


# -- logbooks --------------------------------------------------------------------------------

_ENTRY = re.compile(r"^(#{2,4})\s+(\d{4}-\d{2}-\d{2})(?:[ T](\d{1,2}:\d{2})(?::\d{2})?)?\s*(?:UTC|Z)?\s*[-–—:]*\s*(.*)$")
_FRONT_AUTHOR = re.compile(r"^author:\s*(.+)$", re.M)


def is_logbook(path: str) -> bool:
    return path.lower().endswith(".md") and "logbook" in path.lower()


def _anchor(heading: str) -> str:
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def logbook_events(repo: str, path: str, text: str, html_url: str | None):
    """Dated entries (`### 2026-08-01 20:39 UTC - Title`) as (event_id, fields, values)."""
    front = text.split("\n---", 1)[0] if text.startswith("---") else ""
    author_m = _FRONT_AUTHOR.search(front)
    author = author_m.group(1).strip() if author_m else None
    lines = text.splitlines()
    heads = [(i, m) for i, line in enumerate(lines) if (m := _ENTRY.match(line))]
    seen: dict[str, int] = {}
    for k, (i, m) in enumerate(heads):
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
        yield eid, {"repo": repo, "path": path}, dict(
            source="logbook", kind="logbook", time=when, title=title or date, author=author, url=url, body=body)


# -- alignment pass --------------------------------------------------------------------------

def realign(store: Store) -> int:
    """(Re)align every GitHub/logbook event to a run and step; returns rows changed.

    Runs after each GitHub sync (and may run after a W&B sync), so events synced before
    their run's history arrived get their steps once it has.
    """
    from marinctl.analysis.align import Aligner

    changed = 0
    with store.transaction() as con:
        aligner = Aligner(con)
        rows = con.execute(
            "SELECT event_id, time, title, body, run_uid, step, fields FROM events WHERE source IN ('github', 'logbook')"
        ).fetchall()
        for event_id, when, title, body, run_uid, step, fields in rows:
            fields = json.loads(fields) if isinstance(fields, str) else (fields or {})
            a = aligner.align(f"{title or ''}\n{body or ''}", when)
            new_fields = {k: v for k, v in fields.items() if k not in ("facts", "align", "run")}
            if a.facts:
                new_fields["facts"] = a.facts
            if a.basis:
                new_fields["align"] = a.basis
            if a.run_id:
                new_fields["run"] = a.run_id
            if (a.run_uid, a.step, new_fields) != (run_uid, step, fields):
                con.execute("UPDATE events SET run_uid = ?, step = ?, fields = ? WHERE event_id = ?",
                            [a.run_uid, a.step, json.dumps(new_fields), event_id])
                changed += 1
    return changed
